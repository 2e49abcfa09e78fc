package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/abacus-stream/abacus/hbase"
)

// services runs testenv/services.sh with the suite's ports and data folder.
type services struct {
	script string
	env    []string
}

func (s *services) run(ctx context.Context, which string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, s.script, args...)
	cmd.Env = append(append(os.Environ(), s.env...), "SERVICES="+which)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("testenv/services.sh %s (%s): %w\n%s", strings.Join(args, " "), which, err, out)
	}
	return string(out), nil
}

// Fault kinds: what the suite does to the pipeline besides killing its roles.
const (
	faultHBaseOutage   = "hbase-outage"   // HBase stopped (SIGTERM), started again after a while
	faultHBaseKill     = "hbase-kill"     // HBase SIGKILLed and started again: WAL recovery
	faultBrokerRestart = "broker-restart" // the broker stopped (or SIGKILLed) and started again
	faultSplit         = "split"          // the busiest region of a table split at its middle row
	faultBounce        = "unassign"       // a region of a table unassigned, then assigned again
)

// faults injects the suite's faults and counts them.
type faults struct {
	svc    *services
	hb     *hbase.Client
	rng    *rand.Rand
	logf   func(string, ...any)
	tables []string // aggregates table, facts table

	// hbaseMu is held while a planned fault stops or kills HBase, and while the supervisor
	// restarts it, so that the two never act on HBase at once.
	hbaseMu sync.Mutex

	mu    sync.Mutex
	count map[string]int // by fault kind (and "split <table>")
	// revived counts HBase restarts by the supervisor: HBase found dead without a planned fault
	// (its region server aborted), as an orchestrator would restart it.
	revived     []string
	outage      time.Duration // HBase down, in total
	skipped     []string
	brokerKills int

	// cluster is set with -hbase-cluster: the region server faults act on it.
	cluster     *cluster
	metaMoves   int // hbase:meta reopened on another server after its server was killed
	regionMoves int // regions moved by hand and by the balancer
}

func (f *faults) note(kind string) {
	f.mu.Lock()
	f.count[kind]++
	f.mu.Unlock()
}

// hbaseOutage stops HBase for d.
func (f *faults) hbaseOutage(ctx context.Context, d time.Duration) error {
	return f.hbaseDown(ctx, "stop", d, faultHBaseOutage,
		"HBase stopped; starting it again in "+d.Round(time.Second).String(), "HBase back after %v down")
}

// hbaseKill SIGKILLs HBase and starts it again: its acknowledged edits come back from the WAL.
func (f *faults) hbaseKill(ctx context.Context) error {
	return f.hbaseDown(ctx, "kill-hbase", 2*time.Second, faultHBaseKill,
		"HBase SIGKILLed; starting it again", "HBase back after a SIGKILL, %v down (WAL recovered)")
}

// hbaseDown takes HBase down with a services.sh command, waits for d and starts it again,
// counting the time it was down as outage; backMsg is a format of that time.
func (f *faults) hbaseDown(ctx context.Context, command string, d time.Duration, kind, downMsg, backMsg string) error {
	f.hbaseMu.Lock()
	defer f.hbaseMu.Unlock()
	t0 := time.Now()
	if _, err := f.svc.run(ctx, "hbase", command); err != nil {
		return err
	}
	f.logf("%s", downMsg)
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
	if _, err := f.svc.run(context.WithoutCancel(ctx), "hbase", "start"); err != nil {
		return err
	}
	down := time.Since(t0)
	f.mu.Lock()
	f.outage += down
	f.mu.Unlock()
	f.note(kind)
	f.logf(backMsg, down.Round(time.Second))
	return nil
}

// superviseHBase checks every 15 s that HBase answers (a read of hbase:meta) while no planned
// fault acts on it, and restarts it after a minute of silence. On a busy shared machine a pause of
// the host can expire the region server's ZooKeeper session, and a standalone HBase's region server
// then aborts for good; the suite counts such restarts apart from its own faults.
func (f *faults) superviseHBase(ctx context.Context) {
	failures := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(15 * time.Second):
		}
		if !f.hbaseMu.TryLock() {
			failures = 0 // a planned fault is at work
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := f.hb.Get(pctx, hbase.Get{Table: "hbase:meta", Row: []byte("hbase:namespace")})
		cancel()
		if err == nil || ctx.Err() != nil {
			failures = 0
			f.hbaseMu.Unlock()
			continue
		}
		failures++
		if failures < 4 {
			f.hbaseMu.Unlock()
			continue
		}
		failures = 0
		t0 := time.Now()
		f.logf("HBase has not answered for a minute outside any planned fault (%v): restarting it", err)
		// A cluster is not stopped: start starts whichever of its processes died.
		if f.cluster == nil {
			if _, err := f.svc.run(context.WithoutCancel(ctx), "hbase", "stop"); err != nil {
				f.logf("supervisor: %v", err)
			}
		}
		if _, err := f.svc.run(context.WithoutCancel(ctx), "hbase", "start"); err != nil {
			f.logf("supervisor: %v", err)
		}
		f.mu.Lock()
		f.revived = append(f.revived, fmt.Sprintf("%s (silent since about %s; %v to restart)",
			t0.UTC().Format(time.TimeOnly), t0.Add(-time.Minute).UTC().Format(time.TimeOnly), time.Since(t0).Round(time.Second)))
		f.outage += time.Since(t0) + time.Minute
		f.mu.Unlock()
		f.logf("HBase restarted by the supervisor")
		f.hbaseMu.Unlock()
	}
}

// brokerRestart restarts the broker: a SIGKILL, or a clean stop, every other time.
func (f *faults) brokerRestart(ctx context.Context) error {
	f.mu.Lock()
	kill := f.count[faultBrokerRestart]%2 == 0 // SIGKILL first: the short form restarts once
	f.mu.Unlock()
	t0 := time.Now()
	var err error
	if kill {
		_, err = f.svc.run(ctx, "kafka", "kill-broker", "1")
		f.mu.Lock()
		f.brokerKills++
		f.mu.Unlock()
	} else {
		_, err = f.svc.run(ctx, "kafka", "stop")
	}
	if err != nil {
		return err
	}
	time.Sleep(time.Duration(2+f.rng.IntN(5)) * time.Second)
	if _, err := f.svc.run(context.WithoutCancel(ctx), "kafka", "start"); err != nil {
		return err
	}
	how := "stopped"
	if kill {
		how = "SIGKILLed"
	}
	f.note(faultBrokerRestart)
	f.logf("broker %s and started again, %v down", how, time.Since(t0).Round(time.Second))
	return nil
}

// split splits the busiest serving region of table (most writes since it opened) at the middle of
// its rows.
func (f *faults) split(ctx context.Context, table string) error {
	adm := f.hb.Admin()
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	rs, err := adm.Regions(ctx, table)
	if err != nil {
		return err
	}
	loads, err := adm.RegionLoads(ctx, table)
	if err != nil {
		return err
	}
	var serving []hbase.RegionInfo
	for _, r := range rs {
		if r.Serving() {
			serving = append(serving, r)
		}
	}
	sort.SliceStable(serving, func(i, j int) bool {
		return loads[string(serving[i].Name)].WriteRequests > loads[string(serving[j].Name)].WriteRequests
	})
	for _, r := range serving {
		at, err := adm.SplitPoint(ctx, r)
		if err != nil {
			continue // too few rows: try the next busiest
		}
		t0 := time.Now()
		if err := adm.SplitRegion(ctx, r, at); err != nil {
			if strings.Contains(err.Error(), "NOT splittable") {
				// A daughter still holds references to its parent's files until a compaction
				// rewrites them: split the next busiest instead.
				continue
			}
			return fmt.Errorf("split %q: %w", r.Name, err)
		}
		f.note(faultSplit)
		f.note(faultSplit + " " + table)
		f.logf("split %s region %s (%d writes) in %v; %d regions serve the table now", table, r.EncodedName,
			loads[string(r.Name)].WriteRequests, time.Since(t0).Round(time.Millisecond), len(serving)+1)
		return nil
	}
	return fmt.Errorf("no region of %s can be split (too few rows, or daughters not yet compacted)", table)
}

// bounce unassigns a random serving region of table and assigns it again after a moment.
func (f *faults) bounce(ctx context.Context, table string) error {
	adm := f.hb.Admin()
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	rs, err := adm.Regions(ctx, table)
	if err != nil {
		return err
	}
	var serving []hbase.RegionInfo
	for _, r := range rs {
		if r.Serving() {
			serving = append(serving, r)
		}
	}
	if len(serving) == 0 {
		return fmt.Errorf("no region of %s serves", table)
	}
	r := serving[f.rng.IntN(len(serving))]
	t0 := time.Now()
	if err := adm.UnassignRegion(ctx, r.Name); err != nil {
		return fmt.Errorf("unassign %q: %w", r.Name, err)
	}
	time.Sleep(time.Duration(1000+f.rng.IntN(3000)) * time.Millisecond)
	if err := adm.AssignRegion(ctx, r.Name); err != nil {
		return fmt.Errorf("assign %q: %w", r.Name, err)
	}
	f.note(faultBounce)
	f.logf("unassigned and assigned %s region %s: closed for %v", table, r.EncodedName, time.Since(t0).Round(time.Millisecond))
	return nil
}

// schedule returns the infrastructure faults of a run, in random order.
func (f *faults) schedule(o *options) []string {
	var out []string
	add := func(kind string, n int) {
		for range n {
			out = append(out, kind)
		}
	}
	add(faultHBaseOutage, o.outages)
	add(faultHBaseKill, o.hbaseKills)
	add(faultBrokerRestart, o.brokerRestarts)
	add(faultRSKill, o.rsKills)
	add(faultMetaKill, o.metaKills)
	add(faultMoves, o.moves)
	for _, t := range f.tables {
		add(faultSplit+" "+t, o.splits)
		add(faultBounce+" "+t, o.bounces)
	}
	f.rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// inject runs one scheduled fault.
func (f *faults) inject(ctx context.Context, o *options, fault string) error {
	kind, table, _ := strings.Cut(fault, " ")
	switch kind {
	case faultHBaseOutage:
		return f.hbaseOutage(ctx, o.outage)
	case faultHBaseKill:
		return f.hbaseKill(ctx)
	case faultBrokerRestart:
		return f.brokerRestart(ctx)
	case faultSplit:
		return f.split(ctx, table)
	case faultBounce:
		return f.bounce(ctx, table)
	case faultRSKill, faultMetaKill:
		return f.rsKill(ctx, kind == faultMetaKill)
	case faultMoves:
		return f.moveRegions(ctx)
	}
	return fmt.Errorf("unknown fault %q", fault)
}
