package engine_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/abacus-stream/abacus/abacustest"
	"github.com/abacus-stream/abacus/topology"
	"github.com/abacus-stream/abacus/windows"
)

func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	return sumMetric(t, reg, name)
}

// sumMetric sums the series of a gauge or counter.
func sumMetric(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += m.GetGauge().GetValue() + m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// TestStateFollowsOpenWindows (DESIGN invariant 11): a pipeline runs for years; its table must
// follow the open windows, not every entity ever seen. 200,000 distinct entities over an hour of
// event time with 1-minute windows leave, at the end, only those whose windows are open or closed
// within the last retention; the close schedule has one entry per entity with an open window.
func TestStateFollowsOpenWindows(t *testing.T) {
	n := 200_000
	if testing.Short() {
		n = 20_000
	}
	b := topology.New("many")
	topology.NewSource(b, "readings", topology.JSON[reading](),
		func(r reading) string { return r.Device },
		func(r reading) time.Time { return time.UnixMilli(r.TS) }).
		Aggregate("minute", windows.Tumbling(time.Minute)).Grace(5 * time.Second).Count("n")
	topo, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	d := abacustest.New(t, topo, abacustest.Options{Start: at(t0), Partitions: 4, FinalRetention: 30 * time.Second})
	step := time.Hour.Milliseconds() / int64(n)
	for i := range n {
		ts := t0 + int64(i)*step
		dev := fmt.Sprintf("dev-%07d", i) // every event a new entity
		d.Pipe("readings", dev, reading{Device: dev, TS: ts, Temp: 1}, abacustest.At(at(ts)))
		if i%(n/120) == 0 {
			d.Advance(30 * time.Second) // the wall clock moves with the stream: ticks prune
		}
	}
	d.Advance(time.Minute)
	perMinute := n / 60
	if got := d.Entities(); got > 3*perMinute {
		t.Fatalf("%d entities in the table after %d seen; the open and recently closed windows hold about %d", got, n, 2*perMinute)
	}
	if got := gauge(t, d.Registry(), "abacus_processor_close_schedule_entries"); got > float64(2*perMinute) {
		t.Fatalf("close schedule holds %v entries, more than the entities with open windows (~%d)", got, perMinute)
	}
	if got := len(d.Finals()); got < n-2*perMinute {
		t.Fatalf("%d finals for %d entity-windows", got, n)
	}
}

// TestSessionScheduleOneEntryPerEntity (DESIGN invariant 11): many events into few long sessions
// keep one schedule entry per entity, not one per event.
func TestSessionScheduleOneEntryPerEntity(t *testing.T) {
	b := topology.New("sessions")
	topology.NewSource(b, "readings", topology.JSON[reading](),
		func(r reading) string { return r.Device },
		func(r reading) time.Time { return time.UnixMilli(r.TS) }).
		Aggregate("s", windows.Session(30*time.Minute)).Grace(0).Count("n")
	topo, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	d := abacustest.New(t, topo, abacustest.Options{Start: at(t0), Partitions: 2})
	const entities, events = 200, 20_000
	for i := range events {
		dev := fmt.Sprintf("d%d", i%entities)
		d.Pipe("readings", dev, reading{Device: dev, TS: t0 + int64(i)*100})
	}
	if got := gauge(t, d.Registry(), "abacus_processor_close_schedule_entries"); got != entities {
		t.Fatalf("close schedule holds %v entries for %d entities with open sessions", got, entities)
	}
}

// TestRepartitionFencesBounded (DESIGN invariant 11): an entity fed by re-keyed events from many
// source partitions keeps fences only for the sources whose records its open windows may still
// see replayed, not for every source it ever heard from.
func TestRepartitionFencesBounded(t *testing.T) {
	b := topology.New("rekeyed")
	topology.NewSource(b, "readings", topology.JSON[reading](),
		func(r reading) string { return r.Device },
		func(r reading) time.Time { return time.UnixMilli(r.TS) }).Repartition().
		Aggregate("minute", windows.Tumbling(time.Minute)).Grace(0).Count("n")
	topo, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	const parts = 16
	d := abacustest.New(t, topo, abacustest.Options{Start: at(t0), Partitions: parts})
	send := func(p int32, ts int64) {
		d.Pipe("readings", fmt.Sprint(p), reading{Device: "hot", TS: ts}, abacustest.ToPartition(p), abacustest.At(at(ts)))
	}
	// Half an hour of events from every source partition, then half an hour from one only; the
	// wall clock keeps up with event time, so quiet sources are passed by the idle timeout.
	for m := range int64(60) {
		for p := range int32(parts) {
			if m < 30 || p == 0 {
				send(p, t0+m*60_000+int64(p)*100)
			}
		}
		d.Advance(time.Minute)
		if m == 29 {
			if got := d.Fences("hot"); got != parts {
				t.Fatalf("while every source sends: %d fences, want %d", got, parts)
			}
		}
	}
	if got := d.Fences("hot"); got > 2 {
		t.Fatalf("after the other sources went quiet, the entity keeps %d fences, want its live source's", got)
	}
	for m := range int64(59) {
		want := float64(parts)
		if m >= 30 {
			want = 1
		}
		if got := d.Final("minute", "hot", at(t0+m*60_000)).Float("n"); got != want {
			t.Fatalf("minute %d: count %v, want %v", m, got, want)
		}
	}
}

// TestRollupStateFollowsOpenWindows (DESIGN invariant 11, for rollups): entities that come and
// go leave the table with their contributions once the partials are acknowledged, and the owners
// keep only the windows not yet pruned: the table, the windows held and the open windows follow
// the stream, not the entities or windows ever seen.
func TestRollupStateFollowsOpenWindows(t *testing.T) {
	const n = 20_000
	b := topology.New("many")
	src := topology.NewSource(b, "readings", topology.JSON[reading](),
		func(r reading) string { return r.Device },
		func(r reading) time.Time { return time.UnixMilli(r.TS) })
	src.Aggregate("region", windows.Tumbling(time.Minute)).Grace(5*time.Second).
		By("region", func(r reading) string { return r.Device[len(r.Device)-1:] }).Count("n")
	src.Aggregate("all", windows.Tumbling(time.Minute)).Grace(5 * time.Second).Global().Count("n")
	topo, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	d := abacustest.New(t, topo, abacustest.Options{Start: at(t0), Partitions: 4, FinalRetention: 30 * time.Second, IdleTimeout: 2 * time.Minute})
	step := time.Hour.Milliseconds() / int64(n)
	for i := range n {
		ts := t0 + int64(i)*step
		dev := fmt.Sprintf("dev-%07d", i) // every event a new entity
		d.Pipe("readings", dev, reading{Device: dev, TS: ts, Temp: 1}, abacustest.At(at(ts)))
		if i%(n/120) == 0 {
			d.Advance(30 * time.Second) // the wall clock moves with the stream: ticks prune
		}
	}
	d.Advance(6 * time.Minute) // idle: the last windows close, and the retention passes
	if got := d.Entities(); got != 0 {
		t.Fatalf("%d entities in the table after %d seen, all windows closed and pruned", got, n)
	}
	if got := gauge(t, d.Registry(), "abacus_processor_entities"); got != 0 {
		t.Fatalf("%v keys in the table (entities and rollup owners) after every window was pruned", got)
	}
	if held := gauge(t, d.Registry(), "abacus_processor_windows_held"); held != 0 {
		t.Fatalf("%v windows held after every window closed and was pruned", held)
	}
	if open := gauge(t, d.Registry(), "abacus_processor_windows_open"); open != 0 {
		t.Fatalf("%v windows open after every window closed", open)
	}
	total := 0.0
	for _, f := range d.FinalsOf("all", topology.GlobalKey) {
		total += f.Float("n")
	}
	if total != n {
		t.Log("late", sumMetric(t, d.Registry(), "abacus_processor_late_dropped_total"))
		t.Fatalf("fleet-wide finals count %v events, want %d", total, n)
	}
}
