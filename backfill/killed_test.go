package backfill_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/abacus-stream/abacus/app"
	"github.com/abacus-stream/abacus/topology"
)

// childEnv, set, makes the test binary the `abacus backfill` that TestBackfillRealServers
// SIGKILLs mid-run: its value is a killedChild spec.
const childEnv = "BACKFILL_TEST_KILLED_CHILD"

// killedChild is what the child runs: the CLI's backfill with checkpoints at every chance,
// stopped for good after Block readings (its engine waits there, its writes may be in flight),
// having said so on stdout.
type killedChild struct {
	Config string
	Sets   string
	Block  int64
}

func TestMain(m *testing.M) {
	if spec := os.Getenv(childEnv); spec != "" {
		os.Exit(runKilledChild(spec))
	}
	os.Exit(m.Run())
}

func runKilledChild(spec string) int {
	var c killedChild
	if err := json.Unmarshal([]byte(spec), &c); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	var n atomic.Int64
	onReading = func() {
		if n.Add(1) == c.Block {
			fmt.Println("blocked")
			select {}
		}
	}
	tp, err := buildTopo(true)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	p := app.Program{Topologies: []func() (*topology.Topology, error){func() (*topology.Topology, error) { return tp, nil }}}
	return p.Run(context.Background(), []string{"backfill", "-config", c.Config, "-set", c.Sets, "-checkpoint-every", "1ns"},
		os.Stdout, os.Stderr)
}

// killBackfill runs a backfill in a process of its own and SIGKILLs it once it has run block
// readings: past some checkpoints, with cells written and perhaps some in flight.
func killBackfill(ctx context.Context, t *testing.T, conf, sets string, block int64) {
	t.Helper()
	spec, _ := json.Marshal(killedChild{Config: conf, Sets: sets, Block: block})
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+string(spec))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	said := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		var all []string
		for sc.Scan() {
			all = append(all, sc.Text())
			if sc.Text() == "blocked" {
				said <- "blocked"
				_, _ = io.Copy(io.Discard, out)
				return
			}
		}
		said <- strings.Join(all, "\n")
	}()
	select {
	case s := <-said:
		if s != "blocked" {
			_ = cmd.Wait()
			t.Fatalf("the backfill to kill ended before it ran %d readings:\n%s\n%s", block, s, stderr.String())
		}
	case <-time.After(3 * time.Minute):
		_ = cmd.Process.Kill()
		t.Fatalf("the backfill to kill did not run %d readings in 3 minutes:\n%s", block, stderr.String())
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	t.Logf("backfill SIGKILLed after %d readings; it had said:\n%s", block, stderr.String())
}
