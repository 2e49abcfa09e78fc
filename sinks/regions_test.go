package sinks

import (
	"context"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/abacus-stream/abacus/hbase"
)

// TestSinksFollowSplitsAndMoves runs the whole pipeline on a steady stream while each table's
// busiest region is split three times and regions of both tables are unassigned and assigned
// again. The sinks must follow every split (the parent's NotServingRegion, then its daughters) and
// every closed region, resend only what failed, dead-letter nothing, and leave exactly the cells
// the stream's oracle computes, one version each.
func TestSinksFollowSplitsAndMoves(t *testing.T) {
	if testing.Short() {
		t.Skip("splits regions of real tables while the sinks write")
	}
	p := startPipeline(t, "splits", 300, 0)
	waitFor(t, "both sinks to commit", 2*time.Minute, func() bool {
		return testutil.ToFloat64(p.factsM.commits) > 0 && testutil.ToFloat64(p.aggM.commits) > 0
	})
	time.Sleep(5 * time.Second) // some rows in every region before the first split
	rng := rand.New(rand.NewPCG(3, 4))
	adm := p.hb.Admin()
	ctx := context.Background()
	splits, bounces := 0, 0
	for round := range 3 {
		for _, table := range []string{p.factsTable, p.aggTable} {
			rs, err := adm.Regions(ctx, table)
			if err != nil {
				t.Fatal(err)
			}
			loads, err := adm.RegionLoads(ctx, table)
			if err != nil {
				t.Fatal(err)
			}
			var serving []hbase.RegionInfo
			for _, r := range rs {
				if r.Serving() {
					serving = append(serving, r)
				}
			}
			sort.Slice(serving, func(i, j int) bool {
				return loads[string(serving[i].Name)].WriteRequests > loads[string(serving[j].Name)].WriteRequests
			})
			// The busiest region that can be split: a daughter holds references to its parent's
			// files until a compaction rewrites them, and HBase refuses to split it until then.
			var busiest hbase.RegionInfo
			var at []byte
			for _, r := range serving {
				if at, err = adm.SplitPoint(ctx, r); err != nil {
					continue
				}
				if err = adm.SplitRegion(ctx, r, at); err == nil {
					busiest = r
					break
				}
				if !strings.Contains(err.Error(), "NOT splittable") {
					t.Fatalf("split %d of %s: %v", round, table, err)
				}
			}
			if busiest.Name == nil {
				t.Fatalf("no region of %s could be split: %v", table, err)
			}
			splits++
			t.Logf("split %s region %s (%d writes) at %x", table, busiest.EncodedName, loads[string(busiest.Name)].WriteRequests, at)
			time.Sleep(time.Second)
			if round == 2 {
				continue
			}
			// Close another region for a moment.
			target := serving[1+rng.IntN(len(serving)-1)]
			if err := adm.UnassignRegion(ctx, target.Name); err != nil {
				t.Fatalf("unassign %s: %v", target.Name, err)
			}
			time.Sleep(time.Duration(1000+rng.IntN(2000)) * time.Millisecond)
			if err := adm.AssignRegion(ctx, target.Name); err != nil {
				t.Fatalf("assign %s: %v", target.Name, err)
			}
			bounces++
			time.Sleep(time.Second)
		}
	}
	p.endStream()
	waitForSlow(t, "the pipeline to drain", 5*time.Minute, p.drained)
	p.checkStayed("a split or a moved region")
	p.stop()
	for name, c := range map[string]*hbase.Client{"facts": p.factsC, "aggregates": p.aggC} {
		st := c.Stats()
		t.Logf("%s sink: %d actions sent, %d of them resends; %d regions refused (relocated), %d meta lookups",
			name, st.ActionsSent, st.ActionsResent, st.Relocations, st.RegionLookups)
		if st.Relocations == 0 {
			t.Errorf("%s sink never met a split or closed region: the test proves nothing about it", name)
		}
		if st.ActionsResent*10 > st.ActionsSent {
			t.Errorf("%s sink resent %d of %d actions: more than the ones that failed", name, st.ActionsResent, st.ActionsSent)
		}
	}
	for _, table := range []string{p.factsTable, p.aggTable} {
		rs, err := adm.Regions(ctx, table)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, r := range rs {
			if r.Serving() {
				n++
			}
		}
		if n != pipelineBuckets+3 {
			t.Errorf("%s: %d regions serve after three splits of %d, want %d", table, n, pipelineBuckets, pipelineBuckets+3)
		}
	}
	p.verify()
	t.Logf("%d splits and %d unassign/assigns while the pipeline ran %d events", splits, bounces, p.produced.Load())
}
