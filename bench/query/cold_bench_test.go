package querybench

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/abacus-stream/abacus/hbase"
	"github.com/abacus-stream/abacus/internal/testenv"
	"github.com/abacus-stream/abacus/internal/testenv/gate"
)

// coldRestarts is how many times BenchmarkPanelsCold restarts HBase's region servers
// (ABACUS_BENCH_COLD_RESTARTS, default 3): each restart gives every panel one cold sample.
func coldRestarts() int {
	if n, err := strconv.Atoi(os.Getenv("ABACUS_BENCH_COLD_RESTARTS")); err == nil && n > 0 {
		return n
	}
	return 3
}

// BenchmarkPanelsCold asks every panel once after each restart of HBase's region servers, so that
// each answer comes from a region server whose block cache holds nothing of the dataset: on the
// HBase cluster of testenv/services.sh (HBASE_REGIONSERVERS=3) every region server is stopped and
// started in turn, as in a rolling restart; on the standalone HBase the whole HBase is. The OS page
// cache is dropped as well when this process may (it runs as root), since HBase's files live on the
// local disk and would otherwise be read from memory. The query server and its HBase client stay
// up through the restarts, as a deployed one does: the first read of a region after a restart
// also finds where it is open now. Each panel is asked with entities no earlier panel of the
// benchmark read, so its rows are cold too, not only the servers. It prints the median and the
// largest of the cold answers per panel, and what each read.
func BenchmarkPanelsCold(b *testing.B) {
	// Cold reads are HBase's: the query server's cache of settled windows (which fleet and
	// rollup panels share across entities' picks) stays out of it.
	b.Setenv("ABACUS_BENCH_CACHE", "off")
	s := datasetSize()
	pb := newPanelBench(b, s)
	defer pb.close()
	ctx := context.Background()
	restart := restarter(b)
	type sample struct {
		took        time.Duration
		bytes, rpcs int64
	}
	samples := map[string][]sample{}
	var names []string
	dropped := ""
	for r := range coldRestarts() {
		t0 := time.Now()
		restart()
		pb.waitServing(b, ctx, s.table())
		dropped = dropPageCache()
		b.Logf("restart %d: region servers back and every region of %s open after %s; page cache: %s",
			r+1, s.table(), time.Since(t0).Round(time.Second), dropped)
		// The dashboards' picks in measure are d*7919 + round*104729; these are far from them
		// and from each other, so each restart reads other entities.
		for _, p := range pb.keep(pb.ex.panels(1_000_003 * (r + 1))) {
			if r == 0 {
				names = append(names, p.name)
			}
			b0, r0 := pb.src.bytes.Load(), rpcs(pb.c)
			took, err := pb.ask(p)
			if err != nil {
				b.Fatalf("cold, after restart %d: %v", r+1, err)
			}
			samples[p.name] = append(samples[p.name], sample{took, pb.src.bytes.Load() - b0, rpcs(pb.c) - r0})
		}
	}
	fmt.Printf("\ndataset %s: %d entities x %d days; cold: each panel asked once after each of %d restarts of the region servers (page cache: %s)\n",
		s.table(), s.entities, s.days, coldRestarts(), dropped)
	fmt.Printf("%-36s %12s %12s %10s %6s\n", "panel", "cold:p50ms", "cold:maxms", "KB-read", "rpcs")
	for _, n := range names {
		ss := samples[n]
		lat := make([]time.Duration, len(ss))
		for i, x := range ss {
			lat[i] = x.took
		}
		slices.Sort(lat)
		fmt.Printf("%-36s %12.1f %12.1f %10.1f %6d\n", n, ms(percentile(lat, 0.5)), ms(lat[len(lat)-1]),
			float64(ss[0].bytes)/1024, ss[0].rpcs)
	}
	fmt.Println()
}

// restarter returns what restarts the region servers of the HBase the benchmark reads.
func restarter(b *testing.B) func() {
	if os.Getenv(testenv.EnvHBaseCluster) != "" {
		cl := testenv.HBaseClusterFor(b)
		return func() {
			for n := 1; n <= cl.Servers; n++ {
				cl.Stop(b, n)
				cl.Start(b, n)
			}
		}
	}
	return func() {
		gate.StopService(b, "hbase")
		gate.StartService(b, "hbase")
	}
}

// waitServing waits until every region of table and of its key index answers a read, so that a
// cold answer measures reading, not waiting for an assignment. hbase:meta alone does not say so
// right after a restart: until the master has reassigned them, the rows of regions that were open
// before still read OPEN on the same host and port (a run failed so: a panel found its region in
// transition for longer than the client's retries).
func (pb *panelBench) waitServing(b *testing.B, ctx context.Context, table string) {
	deadline := time.Now().Add(5 * time.Minute)
	for i, t := range []string{table, table + "_keys"} {
		for {
			err := pb.readsEveryRegion(ctx, t, i == 0)
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("regions of %s not all serving 5 minutes after the restart: %v", t, err)
			}
			time.Sleep(time.Second)
		}
	}
}

// readsEveryRegion gets a row of each region of table that hbase:meta says is open, and fails
// unless every one answers, and unless meta lists one when the table is required (an index that
// does not exist has nothing to wait for).
func (pb *panelBench) readsEveryRegion(ctx context.Context, table string, required bool) error {
	rs, err := pb.c.Admin().Regions(ctx, table)
	if err != nil {
		return err
	}
	if len(rs) == 0 {
		if !required {
			return nil
		}
		return fmt.Errorf("hbase:meta lists no region of %s", table)
	}
	for i := range rs {
		r := &rs[i]
		if r.Offline || r.Split {
			continue // a split parent: its daughters serve its rows
		}
		if !r.Serving() {
			return fmt.Errorf("region %q: %s", r.Name, r.State)
		}
		row := r.StartKey
		if len(row) == 0 {
			row = []byte{0}
		}
		if _, err := pb.c.Get(ctx, hbase.Get{Table: table, Row: row}); err != nil {
			return fmt.Errorf("region %q: %w", r.Name, err)
		}
	}
	return nil
}

// dropPageCache asks the kernel to drop its clean page cache, and says whether it did.
func dropPageCache() string {
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("3\n"), 0); err != nil {
		return "kept (" + strings.TrimSpace(err.Error()) + ")"
	}
	return "dropped"
}
