package hbase

import (
	"context"
	"errors"
	"fmt"
	"github.com/abacus-stream/abacus/internal/testenv/gate"
	"io"
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
	gate.Disruptive(t)
	c := testClient(t)
	table := testTable(t, c, "restart", fam("f"), [][]byte{[]byte("m")})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := c.Apply(ctx, []*Mutation{put1(table, "a", "q", 1, "before"), put1(table, "z", "q", 1, "before")}); err != nil {
		t.Fatal(err)
	}

	services := hbaseServices(t)
	services("stop")
	restarted := false
	defer func() {
		if !restarted { // never leave the shared HBase down
			services("start")
		}
	}()

	down, cancelDown := context.WithTimeout(ctx, 3*time.Second)
	err := c.Apply(down, []*Mutation{put1(table, "a", "q", 2, "while down")})
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

// TestDisruptiveServerKilled SIGKILLs the real HBase (master, region server and ZooKeeper in one
// JVM) right after a stream of acknowledged writes, starts it again, and checks that the same
// Client reads back every row it was told had landed: acknowledged edits live in the WAL and come
// back through its recovery. Like TestDisruptiveServerRestart it runs only with ABACUS_DISRUPTIVE=1.
func TestDisruptiveServerKilled(t *testing.T) {
	gate.Disruptive(t)
	c := testClient(t)
	table := testTable(t, c, "killed", fam("f"), [][]byte{[]byte("r5")})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	services := hbaseServices(t)
	acked := 0
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); {
		var ms []*Mutation
		for range 200 {
			ms = append(ms, put1(table, fmt.Sprintf("r%07d", acked+len(ms)), "q", 1, "v"))
		}
		if err := c.Apply(ctx, ms); err != nil {
			t.Fatal(err)
		}
		acked += len(ms)
	}
	services("kill-hbase")
	services("start")
	// The table's regions reopen once the dead server's WAL is split and replayed: wait for a
	// full scan to go through, then count.
	var rows int
	for {
		n, err := countRowsErr(ctx, c, Scan{Table: table})
		if err == nil {
			rows = n
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("table never readable after the restart: %v", err)
		}
		time.Sleep(2 * time.Second)
	}
	if rows != acked {
		t.Fatalf("%d rows after SIGKILL and restart, %d were acknowledged", rows, acked)
	}
	t.Logf("%d acknowledged rows, all back after SIGKILL and WAL recovery", acked)
}

func countRowsErr(ctx context.Context, c *Client, s Scan) (int, error) {
	sc := c.Scan(s)
	defer sc.Close()
	n := 0
	for {
		_, err := sc.Next(ctx)
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
		n++
	}
}

// hbaseServices returns a function that runs testenv/services.sh with a command (stop, start,
// kill-hbase) for the shared HBase, failing the test if it fails.
func hbaseServices(t *testing.T) func(cmd string) {
	return func(cmd string) {
		t.Helper()
		gate.ServiceCommand(t, "hbase", cmd)
	}
}
