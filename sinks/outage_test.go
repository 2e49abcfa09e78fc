package sinks

import (
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/abacus-stream/abacus/internal/testenv/gate"
)

// outageDuration is how long TestDisruptiveHBaseDownFiveMinutes keeps HBase down: five minutes,
// or ABACUS_OUTAGE_TEST_DURATION (a Go duration) to try the test quickly by hand.
func outageDuration(t *testing.T) time.Duration {
	if v := os.Getenv("ABACUS_OUTAGE_TEST_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("ABACUS_OUTAGE_TEST_DURATION: %v", err)
		}
		return d
	}
	return 5 * time.Minute
}

// outageSample is one reading of the pipeline while HBase is down.
type outageSample struct {
	at                     time.Duration // since HBase stopped
	heap                   uint64        // live heap after a GC
	factsHeld, aggHeld     float64
	factsCommit, aggCommit float64
	totalsEnd              int64 // records in the totals topic: what the processor has emitted
	procLag                int64 // source records the processor has not committed
	produced               int64
}

// TestDisruptiveHBaseDownFiveMinutes runs the whole pipeline in process (the processor of the
// chaos topology, the aggregates sink and the facts sink) on a steady stream of 1 KB events and
// stops HBase for five minutes. While HBase is away: no sink leaves its group (no partition
// revoked or lost), nothing is committed, both sinks hold their poll (held_partitions > 0), the
// processor keeps up with the stream and keeps emitting totals, and the live heap stays within a
// fixed bound while a backlog several times larger builds up in Kafka. After: the lag drains,
// held_partitions returns to 0, the commits cover the backlog, and both tables hold exactly the
// cells the stream's oracle (package internal/chaos/stream) computes, one version each.
func TestDisruptiveHBaseDownFiveMinutes(t *testing.T) {
	gate.Disruptive(t)
	outage := outageDuration(t)
	const rate = 400 // events a second of ~1.1 KB: about 26 MB of backlog a minute
	p := startPipeline(t, "outage", rate, 1000)
	liveHeap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}

	waitFor(t, "both sinks to commit", 2*time.Minute, func() bool {
		return testutil.ToFloat64(p.factsM.commits) > 0 && testutil.ToFloat64(p.aggM.commits) > 0
	})
	time.Sleep(10 * time.Second) // a steady state before the outage
	gate.StopService(t, "hbase")
	stopped := time.Now()
	restarted := false
	defer func() {
		if !restarted { // never leave the shared HBase down
			gate.StartService(t, "hbase")
		}
	}()
	waitFor(t, "both sinks to hold their poll", 90*time.Second, func() bool {
		return testutil.ToFloat64(p.factsM.held) > 0 && testutil.ToFloat64(p.aggM.held) > 0
	})
	t.Logf("both sinks hold their poll %v after HBase stopped", time.Since(stopped).Round(time.Second))
	var samples []outageSample
	sample := func() outageSample {
		s := outageSample{at: time.Since(stopped), heap: liveHeap(),
			factsHeld: testutil.ToFloat64(p.factsM.held), aggHeld: testutil.ToFloat64(p.aggM.held),
			factsCommit: testutil.ToFloat64(p.factsM.commits), aggCommit: testutil.ToFloat64(p.aggM.commits),
			totalsEnd: p.totalsEnd(), procLag: p.lag(p.prefix+"processor", p.source), produced: p.produced.Load()}
		t.Logf("%4.0fs down: live heap %3d MiB; held partitions: facts %v, aggregates %v; committed records: facts %v, aggregates %v; totals emitted %d; processor lag %d; produced %d",
			s.at.Seconds(), s.heap>>20, s.factsHeld, s.aggHeld, s.factsCommit, s.aggCommit, s.totalsEnd, s.procLag, s.produced)
		samples = append(samples, s)
		return s
	}
	// Commits may still land for a moment after the stop (writes acknowledged just before it);
	// from the first sample on, none may.
	time.Sleep(5 * time.Second)
	first := sample()
	bytesAtFirst := p.producedBytes.Load()
	for time.Since(stopped) < outage-5*time.Second {
		time.Sleep(min(15*time.Second, outage-5*time.Second-time.Since(stopped)))
		sample()
	}
	last := samples[len(samples)-1]
	backlog := p.producedBytes.Load() - bytesAtFirst
	gate.StartService(t, "hbase")
	restarted = true
	t.Logf("HBase back after %v down", time.Since(stopped).Round(time.Second))

	// While HBase was away.
	for _, s := range samples {
		if s.factsHeld == 0 || s.aggHeld == 0 {
			t.Errorf("%v into the outage a sink took records again (held partitions: facts %v, aggregates %v)", s.at, s.factsHeld, s.aggHeld)
		}
		if s.factsCommit != first.factsCommit || s.aggCommit != first.aggCommit {
			t.Errorf("%v into the outage commits went on: facts %v -> %v, aggregates %v -> %v", s.at, first.factsCommit, s.factsCommit, first.aggCommit, s.aggCommit)
		}
		if s.procLag < 0 || s.procLag > 10*rate {
			t.Errorf("%v into the outage the processor lags %d records: it stalled", s.at, s.procLag)
		}
	}
	if last.totalsEnd <= first.totalsEnd {
		t.Errorf("the processor emitted no totals while HBase was down (%d -> %d)", first.totalsEnd, last.totalsEnd)
	}
	var maxHeap uint64
	for _, s := range samples {
		maxHeap = max(maxHeap, s.heap)
	}
	// A held sink keeps at most a fetch per partition and its batches; the backlog stays in Kafka.
	const heapBound = 48 << 20
	if growth := int64(maxHeap) - int64(first.heap); growth > heapBound {
		t.Errorf("live heap grew by %d MiB over the outage (bound %d MiB) while %d MiB of backlog built up: it follows the backlog",
			growth>>20, heapBound>>20, backlog>>20)
	}
	if outage >= 5*time.Minute && backlog < 2*heapBound {
		t.Errorf("only %d MiB of backlog built up: too little to tell a bounded heap from one that follows the backlog", backlog>>20)
	}

	// After: the lag drains and the metrics show it.
	p.endStream()
	back := time.Now()
	waitForSlow(t, "the lag to drain after HBase returned", 10*time.Minute, p.drained)
	t.Logf("lag drained %v after HBase returned", time.Since(back).Round(time.Second))
	waitFor(t, "the polls to be released", 30*time.Second, func() bool {
		return testutil.ToFloat64(p.factsM.held) == 0 && testutil.ToFloat64(p.aggM.held) == 0
	})
	if got := testutil.ToFloat64(p.factsM.commits) - last.factsCommit; got < float64(last.produced-first.produced) {
		t.Errorf("facts sink committed %v records after the outage, fewer than the %d produced during it", got, last.produced-first.produced)
	}
	if testutil.ToFloat64(p.aggM.commits) <= last.aggCommit {
		t.Errorf("aggregates sink committed nothing after the outage")
	}
	for name, m := range map[string]*Metrics{"facts": p.factsM, "aggregates": p.aggM} {
		for _, kind := range []string{"revoked", "lost"} {
			if n := testutil.ToFloat64(m.rebalances.WithLabelValues(kind)); n != 0 {
				t.Errorf("%s sink: %v partitions %s: it left its group", name, n, kind)
			}
		}
		if n := testutil.ToFloat64(m.dead.WithLabelValues("rejected")); n != 0 {
			t.Errorf("%s sink dead-lettered %v records as rejected: an outage is not a permanent failure", name, n)
		}
		if n := testutil.ToFloat64(m.failed.WithLabelValues("unavailable")) + testutil.ToFloat64(m.failed.WithLabelValues("retriable")); n == 0 {
			t.Errorf("%s sink counted no failed writes: the outage never reached it", name)
		}
	}
	p.stop()
	p.verify()
	t.Logf("%d events (%d MiB) produced; %d MiB of backlog built up while HBase was down; live heap %d..%d MiB",
		p.produced.Load(), p.producedBytes.Load()>>20, backlog>>20, first.heap>>20, maxHeap>>20)
}
