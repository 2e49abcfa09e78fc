package sinks

import (
	"context"
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/abacus-stream/abacus/hbase"
	"github.com/abacus-stream/abacus/internal/testenv"
)

// TestSinksFollowSplitsAndMoves runs both sinks on a large backlog while each table's busiest
// region is split three times and regions of both tables are unassigned and assigned again. The
// sinks must follow every split (the parent's NotServingRegion, then the daughters) and every
// closed region, resend only what failed, dead-letter nothing, and leave exactly the expected
// cells, one version each.
func TestSinksFollowSplitsAndMoves(t *testing.T) {
	if testing.Short() {
		t.Skip("splits regions of real tables while sinks write")
	}
	e := newE2E(t)
	e.MaxBatch = 150
	good, finals := e.produceWorkload(t, 24, 2500)
	admin := testenv.HBaseClient(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	type running struct {
		kind, group, topic string
		m                  *Metrics
		c                  *hbase.Client
		errc               chan error
	}
	var sinks []*running
	for _, kind := range []string{"facts", "aggregates"} {
		r := &running{kind: kind, group: e.FactsGroup, topic: e.Events, m: NewMetrics(prometheus.NewRegistry(), kind), errc: make(chan error, 1)}
		if kind == "aggregates" {
			r.group, r.topic = e.AggGroup, e.Totals
		}
		s, c, err := e.sink(ctx, kind, func(cfg *Config) {
			cfg.Metrics = r.m
			cfg.Logger = testLogger(t)
			cfg.FlushInterval = 50 * time.Millisecond
			cfg.MaxRetryBackoff = time.Second
		})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		r.c = c
		go func() { r.errc <- s.Run(ctx) }()
		sinks = append(sinks, r)
	}

	// The region operations, each while both sinks still have a backlog to write.
	rng := rand.New(rand.NewPCG(3, 4))
	adm := admin.Admin()
	lagged := func() bool {
		for _, r := range sinks {
			if e.lag(t, r.group, r.topic) == 0 {
				return false
			}
		}
		return true
	}
	waitFor(t, "both sinks to write", time.Minute, func() bool {
		return testutil.ToFloat64(sinks[0].m.commits) > 0 && testutil.ToFloat64(sinks[1].m.commits) > 0
	})
	splits, bounces, during := 0, 0, 0
	for round := range 3 {
		for _, table := range []string{e.FactsTable, e.AggTable} {
			if lagged() {
				during++
			}
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
			busiest := serving[0]
			at, err := adm.SplitPoint(ctx, busiest)
			if err != nil {
				t.Fatalf("split point of %s's busiest region: %v", table, err)
			}
			if err := adm.SplitRegion(ctx, busiest, at); err != nil {
				t.Fatalf("split %d of %s: %v", round, table, err)
			}
			splits++
			if round == 2 {
				continue
			}
			// Close another region for a moment.
			target := serving[1+rng.IntN(len(serving)-1)]
			if err := adm.UnassignRegion(ctx, target.Name); err != nil {
				t.Fatalf("unassign %s: %v", target.Name, err)
			}
			time.Sleep(time.Duration(500+rng.IntN(1500)) * time.Millisecond)
			if err := adm.AssignRegion(ctx, target.Name); err != nil {
				t.Fatalf("assign %s: %v", target.Name, err)
			}
			bounces++
		}
	}
	if during < 4 {
		t.Fatalf("only %d of the region operations found both sinks with a backlog: the test proves too little (a larger workload?)", during)
	}
	for _, r := range sinks {
		waitFor(t, r.kind+" sink to drain", 3*time.Minute, func() bool { return e.lag(t, r.group, r.topic) == 0 })
	}
	cancel()
	for _, r := range sinks {
		if err := <-r.errc; err != nil {
			t.Fatal(err)
		}
		st := r.c.Stats()
		t.Logf("%s sink: %d actions sent, %d resent, %d regions relocated, %d meta lookups; %v cells failed and were retried",
			r.kind, st.ActionsSent, st.ActionsResent, st.Relocations, st.RegionLookups,
			testutil.ToFloat64(r.m.failed.WithLabelValues("retriable"))+testutil.ToFloat64(r.m.failed.WithLabelValues("unavailable")))
		if st.Relocations == 0 {
			t.Errorf("%s sink never met a moved or split region: the test proves nothing about it", r.kind)
		}
		if st.ActionsResent >= st.ActionsSent/2 {
			t.Errorf("%s sink resent %d of %d actions: more than what failed", r.kind, st.ActionsResent, st.ActionsSent)
		}
		if n := testutil.ToFloat64(r.m.dead.WithLabelValues("rejected")); n != 0 {
			t.Errorf("%s sink dead-lettered %v records during splits and moves", r.kind, n)
		}
	}
	for _, table := range []string{e.FactsTable, e.AggTable} {
		rs, err := adm.Regions(context.Background(), table)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, r := range rs {
			if r.Serving() {
				n++
			}
		}
		if n != e.Buckets+3 {
			t.Errorf("%s: %d regions serve after three splits of %d, want %d", table, n, e.Buckets, e.Buckets+3)
		}
	}
	checkTables(t, e, admin, good, finals)
	t.Logf("%d splits and %d unassign/assigns while the sinks wrote %d events and %d windows", splits, bounces, good, len(finals))
}
