package sinks

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/abacus-stream/abacus/hbase"
	"github.com/abacus-stream/abacus/internal/testenv"
)

// The TestHBaseCluster* tests run the whole pipeline (processor, aggregates sink, facts sink) on
// the real HBase cluster of testenv/services.sh (HBASE_REGIONSERVERS=3) while region servers die,
// pause, restart and regions move, then compare both tables with the stream's oracle: every cell
// final, one version, nothing dead-lettered, no sink partition revoked or lost.

// clusterRate is the events per second the cluster tests produce: enough that every region of
// both tables takes writes all the time, little enough for two cores running five JVMs.
const clusterRate = 1500

// clusterPipeline starts the pipeline on the HBase cluster and waits until both sinks commit.
func clusterPipeline(t *testing.T, name string) (*pipeline, *testenv.HBaseCluster) {
	t.Helper()
	c := testenv.HBaseClusterFor(t)
	if zk := testenv.HBaseConfig(t).ZooKeeper; zk != c.ZooKeeper {
		t.Fatalf("the pipeline would write to the HBase at %s, not the cluster at %s: evaluate the cluster's `env`", zk, c.ZooKeeper)
	}
	p := startPipeline(t, name, clusterRate, 0)
	waitFor(t, "both sinks to commit", 2*time.Minute, func() bool {
		return testutil.ToFloat64(p.factsM.commits) > 0 && testutil.ToFloat64(p.aggM.commits) > 0
	})
	p.watch = watchQueries(t, p)
	return p, c
}

// regionsPerServer counts the serving regions of the pipeline's two tables per server number.
func regionsPerServer(t *testing.T, p *pipeline, c *testenv.HBaseCluster) map[int]int {
	t.Helper()
	out, err := tryRegionsPerServer(t, p, c)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// tryRegionsPerServer is regionsPerServer, failing with the error instead of the test: while
// hbase:meta itself moves, reading it fails for a while.
func tryRegionsPerServer(t *testing.T, p *pipeline, c *testenv.HBaseCluster) (map[int]int, error) {
	out := map[int]int{}
	for _, table := range []string{p.factsTable, p.aggTable} {
		rs, err := p.hb.Admin().Regions(setupCtx(t), table)
		if err != nil {
			return nil, err
		}
		for _, r := range rs {
			if r.Serving() {
				out[c.Number(r.Server)]++
			}
		}
	}
	return out, nil
}

// busiest is the region server, other than those in not, holding most of the tables' regions.
func busiest(t *testing.T, p *pipeline, c *testenv.HBaseCluster, not ...int) int {
	t.Helper()
	per := regionsPerServer(t, p, c)
	best, most := 0, -1
	for n := 1; n <= c.Servers; n++ {
		skip := false
		for _, x := range not {
			skip = skip || x == n
		}
		if !skip && per[n] > most {
			best, most = n, per[n]
		}
	}
	t.Logf("regions per server %v: region server %d holds %d", per, best, most)
	return best
}

// waitOffServer waits until every region of the tables is open on a server other than n, and
// returns how long that took from since.
func waitOffServer(t *testing.T, p *pipeline, c *testenv.HBaseCluster, n int, since time.Time) time.Duration {
	t.Helper()
	waitForSlow(t, "every region open away from the dead server", 3*time.Minute, func() bool {
		per, err := tryRegionsPerServer(t, p, c)
		if err != nil {
			t.Logf("regions not readable yet: %v", err)
			return false
		}
		total := 0
		for _, k := range per {
			total += k
		}
		return per[n] == 0 && per[0] == 0 && total == 2*pipelineBuckets
	})
	return time.Since(since)
}

// commitsResumed waits until both sinks committed again after at, and returns how long after at.
func commitsResumed(t *testing.T, p *pipeline, at time.Time) time.Duration {
	t.Helper()
	f0, a0 := testutil.ToFloat64(p.factsM.commits), testutil.ToFloat64(p.aggM.commits)
	// A commit that was already under way at `at` may land just after it: two more make sure the
	// sinks wrote batches taken after the failure.
	waitFor(t, "both sinks to commit again", 5*time.Minute, func() bool {
		return testutil.ToFloat64(p.factsM.commits) >= f0+2 && testutil.ToFloat64(p.aggM.commits) >= a0+2
	})
	return time.Since(at)
}

// finishCluster ends the stream, waits for the pipeline to drain and checks what every cluster
// test promises: nothing dead-lettered, no partition revoked or lost, every query asked meanwhile
// answered whole or refused with a 503 in time, every cell as the oracle computes it, one version
// each.
func finishCluster(t *testing.T, p *pipeline) {
	t.Helper()
	p.endStream()
	start := time.Now()
	waitForSlow(t, "the pipeline to drain", 5*time.Minute, p.drained)
	t.Logf("drained %v after the stream ended", time.Since(start).Round(time.Millisecond))
	p.checkStayed("a region server failure")
	if p.watch != nil {
		p.watch.finish()
	}
	p.stop()
	for name, c := range map[string]*hbase.Client{"facts": p.factsC, "aggregates": p.aggC} {
		st := c.Stats()
		t.Logf("%s sink's client: %+v", name, st)
		for _, s := range c.ServerStats() {
			t.Logf("%s sink's client, server %s: %d requests (%d failed, %d dials), %d actions sent (%d resent, %d refused), %d relocations, %v in requests; last error %q",
				name, s.Server, s.Requests, s.Errors, s.DialErrors, s.ActionsSent, s.ActionsResent, s.ActionErrors, s.Relocations, s.RequestTime.Round(time.Millisecond), s.LastError)
		}
	}
	p.verify()
	t.Logf("%d events", p.produced.Load())
}

// serverStats is a client's per-server stats by address.
func serverStats(c *hbase.Client) map[string]hbase.ServerStats {
	out := map[string]hbase.ServerStats{}
	for _, s := range c.ServerStats() {
		out[s.Server] = s
	}
	return out
}

// vecSum is the sum of a counter vector over its labels.
func vecSum(cv *prometheus.CounterVec) float64 {
	ch := make(chan prometheus.Metric, 64)
	go func() { cv.Collect(ch); close(ch) }()
	var sum float64
	for m := range ch {
		var d dto.Metric
		if m.Write(&d) == nil && d.Counter != nil {
			sum += d.Counter.GetValue()
		}
	}
	return sum
}

// TestHBaseClusterRegionServerKilled SIGKILLs the region server holding most of the tables'
// regions (not hbase:meta's: that is the next test) while both sinks write: its regions reopen
// elsewhere once its ZooKeeper session expires and its WAL is split; the sinks follow them.
func TestHBaseClusterRegionServerKilled(t *testing.T) {
	p, c := clusterPipeline(t, "rskill")
	time.Sleep(5 * time.Second)
	n := busiest(t, p, c, c.MetaServer(t))
	killed := time.Now()
	c.Kill(t, n)
	moved := waitOffServer(t, p, c, n, killed)
	resumed := commitsResumed(t, p, killed)
	t.Logf("region server %d SIGKILLed: its regions open elsewhere after %v, both sinks committing again after %v",
		n, moved.Round(time.Millisecond), resumed.Round(time.Millisecond))
	c.Start(t, n)
	time.Sleep(5 * time.Second)
	finishCluster(t, p)
	failed := int64(0)
	for name, cl := range map[string]*hbase.Client{"facts": p.factsC, "aggregates": p.aggC} {
		if cl.Stats().Relocations == 0 && cl.Stats().ActionsResent == 0 {
			t.Errorf("%s sink met nothing of the kill: the test proves nothing about it", name)
		}
		failed += serverStats(cl)[c.Addr(n)].Errors
	}
	if failed == 0 {
		t.Errorf("no failed request to the killed region server %d in either sink's per-server stats", n)
	}
}

// TestHBaseClusterMetaServerKilled SIGKILLs the region server holding hbase:meta (and the tables'
// regions it has) while both sinks write: meta reopens elsewhere, the clients read its new
// location from ZooKeeper and find the tables' regions through it.
func TestHBaseClusterMetaServerKilled(t *testing.T) {
	p, c := clusterPipeline(t, "metakill")
	time.Sleep(5 * time.Second)
	n := c.MetaServer(t)
	killed := time.Now()
	c.Kill(t, n)
	moved := waitOffServer(t, p, c, n, killed)
	if m := c.MetaServer(t); m == n {
		t.Fatalf("hbase:meta still on the killed region server %d", n)
	}
	resumed := commitsResumed(t, p, killed)
	t.Logf("region server %d (hbase:meta) SIGKILLed: meta on %d, regions open elsewhere after %v, both sinks committing again after %v",
		n, c.MetaServer(t), moved.Round(time.Millisecond), resumed.Round(time.Millisecond))
	c.Start(t, n)
	finishCluster(t, p)
}

// TestHBaseClusterRegionsMoved moves regions of both tables between servers and runs the balancer
// while the sinks write: each request to a region's old server gets RegionMovedException (or
// NotServingRegion) and goes to the new one.
func TestHBaseClusterRegionsMoved(t *testing.T) {
	p, c := clusterPipeline(t, "moves")
	adm := p.hb.Admin()
	ctx := context.Background()
	if _, err := adm.SetBalancerRunning(ctx, false); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = adm.SetBalancerRunning(context.Background(), true) })
	moves := 0
	for round := range 3 {
		for _, table := range []string{p.factsTable, p.aggTable} {
			rs, err := adm.Regions(ctx, table)
			if err != nil {
				t.Fatal(err)
			}
			live := c.Live(t)
			for i, r := range rs {
				if !r.Serving() || i%2 != round%2 {
					continue
				}
				to := c.Number(r.Server)%c.Servers + 1 // the next server
				if err := adm.MoveRegion(ctx, r.Name, live[to]); err != nil {
					t.Fatalf("move %s of %s to %d: %v", r.EncodedName, table, to, err)
				}
				moves++
			}
			time.Sleep(time.Second)
		}
	}
	// Everything on one server, then the balancer spreads it again. A move is asynchronous and
	// a region in transition cannot be moved, so stragglers are moved again until every region
	// of both tables serves from the target: otherwise the balancer may find nothing to do.
	target := c.MetaServer(t)
	live := c.Live(t)
	deadline := time.Now().Add(90 * time.Second)
	for {
		elsewhere := 0
		for _, table := range []string{p.factsTable, p.aggTable} {
			rs, err := adm.Regions(ctx, table)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rs {
				if r.Serving() && c.Number(r.Server) == target {
					continue
				}
				elsewhere++
				if !r.Serving() {
					continue // in transition: look again next round
				}
				if err := adm.MoveRegion(ctx, r.Name, live[target]); err != nil {
					t.Logf("move %s of %s to %d: %v (tried again)", r.EncodedName, table, target, err)
					continue
				}
				moves++
			}
		}
		if elsewhere == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d regions still not serving from region server %d after 90 s of moves: %v",
				elsewhere, target, regionsPerServer(t, p, c))
		}
		time.Sleep(2 * time.Second)
	}
	if _, err := adm.SetBalancerRunning(ctx, true); err != nil {
		t.Fatal(err)
	}
	res, err := adm.Balance(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("balancer: %+v; regions per server after it: %v", res, regionsPerServer(t, p, c))
	if !res.Ran || res.MovesExecuted == 0 {
		t.Errorf("the balancer moved nothing off the one server holding every region: %+v", res)
	}
	finishCluster(t, p)
	for name, cl := range map[string]*hbase.Client{"facts": p.factsC, "aggregates": p.aggC} {
		if cl.Stats().Relocations == 0 {
			t.Errorf("%s sink met no moved region in %d moves: the test proves nothing about it", name, moves)
		}
	}
	t.Logf("%d regions moved by hand, %d by the balancer", moves, res.MovesExecuted)
}

// TestHBaseClusterRegionServerPaused SIGSTOPs the region server holding most regions for 20 s (a
// long GC pause, a hung disk): its sockets stay open and nothing answers, within its ZooKeeper
// session (30 s on the test cluster; 90 s is HBase's default), so it keeps its regions. Requests to
// the other servers must keep flowing, the sinks hold their poll without leaving their groups, and
// nothing is lost or duplicated once it resumes. (A pause past the session makes a zombie that
// only HDFS fences: see testenv/services.sh.)
func TestHBaseClusterRegionServerPaused(t *testing.T) {
	p, c := clusterPipeline(t, "pause")
	time.Sleep(5 * time.Second)
	n := busiest(t, p, c, c.MetaServer(t))
	f0 := p.factsC.Stats().ActionsSent
	before := serverStats(p.factsC)
	paused := time.Now()
	c.Pause(t, n)
	time.Sleep(20 * time.Second)
	during := p.factsC.Stats().ActionsSent - f0
	after := serverStats(p.factsC)
	c.Resume(t, n)
	if during == 0 {
		t.Errorf("the facts sink sent nothing to any server while region server %d was paused", n)
	}
	// What an operator's dashboard shows (abacus_hbase_* per server): requests to the paused
	// server hang in flight, while the others keep taking actions.
	sick := after[c.Addr(n)]
	if sick.InFlight == 0 {
		t.Errorf("region server %d paused 20 s, yet the facts sink's client shows nothing in flight to it: %+v", n, sick)
	}
	for m := 1; m <= c.Servers; m++ {
		a := c.Addr(m)
		t.Logf("facts sink's client, region server %d (%s) during the pause: %d actions sent, %d requests, %d in flight, %d waiting",
			m, a, after[a].ActionsSent-before[a].ActionsSent, after[a].Requests-before[a].Requests, after[a].InFlight, after[a].Waiting)
	}
	resumed := commitsResumed(t, p, paused)
	t.Logf("region server %d paused 20 s: the facts sink sent %d actions meanwhile; both sinks committing again %v after the pause began; regions per server now %v",
		n, during, resumed.Round(time.Millisecond), regionsPerServer(t, p, c))
	finishCluster(t, p)
}

// TestHBaseClusterRollingRestart stops and starts each region server in turn under load, as an
// upgrade does: a clean stop closes its regions, which open elsewhere, then it comes back.
func TestHBaseClusterRollingRestart(t *testing.T) {
	p, c := clusterPipeline(t, "rolling")
	for n := 1; n <= c.Servers; n++ {
		at := time.Now()
		c.Stop(t, n)
		c.Start(t, n)
		t.Logf("region server %d restarted in %v; sinks committing again %v after its stop began",
			n, time.Since(at).Round(time.Millisecond), commitsResumed(t, p, at).Round(time.Millisecond))
	}
	finishCluster(t, p)
}
