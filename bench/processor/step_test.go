package main

import (
	"context"
	"io"
	"log/slog"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fakeStep runs a shell script as the system: the step's failure detection does not depend on
// what the process is, only on what it reports and whether it lives.
func fakeStep(t *testing.T, script string, committed int64) *step {
	return &step{
		name:      "fake",
		cmd:       exec.Command("sh", "-c", script),
		in:        &input{topic: "in", total: 10},
		logPath:   filepath.Join(t.TempDir(), "fake.log"),
		stall:     time.Second,
		timeout:   20 * time.Second,
		stopGrace: 2 * time.Second,
		committed: func(context.Context) (int64, error) { return committed, nil },
	}
}

func runFake(t *testing.T, s *step) error {
	t.Helper()
	done := make(chan *result, 1)
	go func() { done <- s.run(context.Background(), nil, slog.New(slog.NewTextHandler(io.Discard, nil))) }()
	select {
	case r := <-done:
		return r.err
	case <-time.After(30 * time.Second):
		t.Fatal("the step hangs")
		return nil
	}
}

// The hang of the old harness: the process is gone, the harness waits for its count.
func TestStepFailsWhenTheProcessExitsEarly(t *testing.T) {
	err := runFake(t, fakeStep(t, "echo progress 3; echo 'boom: no partitions' >&2; exit 2", 0))
	if err == nil || !strings.Contains(err.Error(), "exited before it was done") ||
		!strings.Contains(err.Error(), "processed 3 of 10") || !strings.Contains(err.Error(), "boom: no partitions") {
		t.Fatalf("err = %v", err)
	}
}

func TestStepFailsWhenNothingMoves(t *testing.T) {
	err := runFake(t, fakeStep(t, "echo progress 4; exec sleep 60", 0))
	if err == nil || !strings.Contains(err.Error(), "stalled") || !strings.Contains(err.Error(), "processed 4 of 10") {
		t.Fatalf("err = %v", err)
	}
}

func TestStepFailsWhenTheProcessDoesNotStop(t *testing.T) {
	// Done (all processed and committed), but it ignores its stdin closing.
	err := runFake(t, fakeStep(t, "trap '' TERM; echo progress 10; exec sleep 600 </dev/null", 10))
	if err == nil || !strings.Contains(err.Error(), "did not stop") {
		t.Fatalf("err = %v", err)
	}
}

func TestStepSucceeds(t *testing.T) {
	// Exits 0 once its stdin closes, as the real systems do.
	if err := runFake(t, fakeStep(t, "echo progress 10; cat >/dev/null", 10)); err != nil {
		t.Fatal(err)
	}
}
