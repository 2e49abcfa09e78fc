package querybench

import (
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestMeasureChecksAfterTheClock: measure checks its answers after the clock stops, and still
// fails on a wrong one (or counts it, for the system under comparison), on one that differs from
// the answer checked for the same request, and counts 503s rather than failing on them.
func TestMeasureChecksAfterTheClock(t *testing.T) {
	t.Setenv("ABACUS_BENCH_ROUNDS", "2")
	right := func(name string) panel {
		return panel{name: name, method: http.MethodGet, path: "/" + name, check: func(code int, body []byte) error {
			if code != http.StatusOK || string(body) != "right" {
				return fmt.Errorf("answered %d %q", code, body)
			}
			return nil
		}}
	}
	panels := func(int) []panel { return []panel{right("a"), right("b")} }
	answering := func(of func(p panel) (int, string)) func(panel) (time.Duration, answer, error) {
		return func(p panel) (time.Duration, answer, error) {
			code, body := of(p)
			return time.Millisecond, answer{code, []byte(body)}, nil
		}
	}

	lat, timeouts, wrong, err := measure(t, panels, answering(func(panel) (int, string) { return 200, "right" }), false)
	if err != nil {
		t.Fatal(err)
	}
	if len(lat[1]["a"]) != 2 || len(lat[16]["b"]) != 32 || timeouts[16]["a"] != 0 || wrong[16]["a"] != 0 {
		t.Fatalf("%d and %d answers timed, want 2 and 32", len(lat[1]["a"]), len(lat[16]["b"]))
	}

	wrongB := answering(func(p panel) (int, string) {
		if p.name == "b" {
			return 200, "wrong"
		}
		return 200, "right"
	})
	if _, _, _, err := measure(t, panels, wrongB, false); err == nil || !strings.Contains(err.Error(), `"b"`) {
		t.Fatalf("a wrong answer of panel b: %v", err)
	}
	if _, _, wrong, err := measure(t, panels, wrongB, true); err != nil || wrong[1]["b"] != 2 || wrong[16]["b"] != 32 || wrong[16]["a"] != 0 {
		t.Fatalf("wrong answers counted: %v (%v)", wrong, err)
	}

	var bs atomic.Int64
	secondDiffers := answering(func(p panel) (int, string) {
		if p.name == "b" && bs.Add(1) == 2 {
			return 200, "righT"
		}
		return 200, "right"
	})
	if _, _, _, err := measure(t, panels, secondDiffers, false); err == nil || !strings.Contains(err.Error(), "another time") {
		t.Fatalf("an answer unlike the one checked for the same request: %v", err)
	}

	busyA := answering(func(p panel) (int, string) {
		if p.name == "a" {
			return http.StatusServiceUnavailable, "timeout"
		}
		return 200, "right"
	})
	if _, timeouts, _, err := measure(t, panels, busyA, false); err != nil || timeouts[1]["a"] != 2 || timeouts[16]["a"] != 32 {
		t.Fatalf("503s: %v (%v)", timeouts, err)
	}
}
