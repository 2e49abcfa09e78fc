package hbase

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestDisruptiveServerRestart stops the real HBase through testenv/services.sh, checks that a
// write while it is down fails as retriable, starts it again, and checks that the same Client, with
// its now-dead connections and stale region cache, writes and reads again.
//
// It restarts a shared server, so it follows the project's convention for disruptive tests: named
// TestDisruptive*, it runs only with ABACUS_DISRUPTIVE=1, which testenv/run-tests.sh sets in a
// separate pass after every other test, one package at a time. By hand:
//
//	ABACUS_DISRUPTIVE=1 go test -count=1 -run '^TestDisruptive' ./hbase/
func TestDisruptiveServerRestart(t *testing.T) {
	if os.Getenv("ABACUS_DISRUPTIVE") != "1" {
		t.Skip("stops the shared HBase: runs only with ABACUS_DISRUPTIVE=1, as testenv/run-tests.sh does after the other tests")
	}
	script, err := filepath.Abs(filepath.Join("..", "testenv", "services.sh"))
	if err != nil {
		t.Fatal(err)
	}
	c := testClient(t)
	table := testTable(t, c, "restart", fam("f"), [][]byte{[]byte("m")})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := c.Apply(ctx, []*Mutation{put1(table, "a", "q", 1, "before"), put1(table, "z", "q", 1, "before")}); err != nil {
		t.Fatal(err)
	}

	services := func(cmd string) {
		t.Helper()
		sh := exec.CommandContext(ctx, script, cmd)
		sh.Env = append(os.Environ(), "SERVICES=hbase")
		if out, err := sh.CombinedOutput(); err != nil {
			t.Fatalf("services.sh %s: %v\n%s", cmd, err, out)
		}
	}
	services("stop")
	restarted := false
	defer func() {
		if !restarted { // never leave the shared HBase down
			services("start")
		}
	}()

	down, cancelDown := context.WithTimeout(ctx, 3*time.Second)
	err = c.Apply(down, []*Mutation{put1(table, "a", "q", 2, "while down")})
	cancelDown()
	var be *BatchError
	if !errors.As(err, &be) || !IsRetriable(be.Errs[0]) {
		t.Fatalf("write while HBase is down: %v, want a retriable failure", err)
	}

	services("start")
	restarted = true
	if err := c.Apply(ctx, []*Mutation{put1(table, "a", "q", 3, "after"), put1(table, "z", "q", 3, "after")}); err != nil {
		t.Fatalf("write after restart: %v", err)
	}
	for _, row := range []string{"a", "z"} {
		res, err := c.Get(ctx, Get{Table: table, Row: []byte(row), MaxVersions: AllVersions})
		if err != nil {
			t.Fatalf("get after restart: %v", err)
		}
		if v, _ := res.Value("f", "q"); string(v) != "after" || len(res.Cells) != 2 {
			t.Fatalf("row %s after restart: %+v, want 'after'@3 over 'before'@1", row, res.Cells)
		}
	}
}
