package engine_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/abacus-stream/abacus/abacustest"
	"github.com/abacus-stream/abacus/topology"
	"github.com/abacus-stream/abacus/windows"
)

// coarserTopology has an entity set of minute windows with coarser forms of 10 minutes and (of
// those) an hour, a region rollup of minutes with a coarser form of 10 minutes, and beside them
// "ten": a set of its own with the same 10-minute windows and grace, which judges lateness by its
// own windows and so takes events the minute windows refused.
func coarserTopology(t testing.TB) *topology.Topology {
	t.Helper()
	b := topology.New("coarse")
	b.LateTopic("coarse-late")
	src := topology.NewSource(b, "readings", topology.JSON[reading](),
		func(r reading) string { return r.Device },
		func(r reading) time.Time { return time.UnixMilli(r.TS) })
	minute := src.Aggregate("minute", windows.Tumbling(time.Minute)).Grace(10*time.Second).
		Where(func(r reading) bool { return r.Temp != 13 }).
		Count("count").Sum("sum", "Temp").Min("min", "Temp").Max("max", "Temp").Last("last", "Temp").Mean("mean", "Temp")
	minute.Coarser("ten", 10*time.Minute).Coarser("hour", time.Hour)
	src.Aggregate("region", windows.Tumbling(time.Minute)).Grace(10*time.Second).
		By("region", func(r reading) string { return regionOf(r.Device) }).Count("count").Max("max", "Temp").
		Coarser("region-ten", 10*time.Minute, "max")
	src.Aggregate("own-ten", windows.Tumbling(10*time.Minute)).Grace(10 * time.Second).Count("count")
	return build(t, b)
}

func build(t testing.TB, b *topology.Builder) *topology.Topology {
	t.Helper()
	topo, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	return topo
}

// TestCoarserSetIsTheMergeOfItsFinerSet runs seeded random streams (out of order, some events
// late for their minute, some left out by Where) with restarts keeping or losing the local state
// and redeliveries, and checks that every final of a coarser set is the merge of its finer set's
// finals inside it: the count and sum their sums, min and max their extremes, last the last
// one's, the mean their sum over their count; and that a coarser window exists exactly where a
// finer final does. The set "own-ten", 10-minute windows of its own, counts events the minute
// windows refused as late: without the rule (a coarser set takes only what its finer set took),
// "ten" would too.
func TestCoarserSetIsTheMergeOfItsFinerSet(t *testing.T) {
	refusedSomewhere := false
	for seed := range uint64(20) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			if coarserRun(t, seed) {
				refusedSomewhere = true
			}
		})
	}
	if !refusedSomewhere {
		t.Error("no seed sent an event late for its minute and taken by own-ten: the test shows nothing about lateness")
	}
}

// coarserRun runs one seed and reports whether "own-ten" took events the minute set refused.
func coarserRun(t *testing.T, seed uint64) bool {
	rng := rand.New(rand.NewPCG(seed, 7))
	topo := coarserTopology(t)
	d := abacustest.New(t, topo, abacustest.Options{Start: at(t0), Partitions: 2, IdleTimeout: time.Minute,
		TickInterval: 5 * time.Second, OnFail: noStop(t)})
	clock := t0
	for range 1500 {
		dev := allDevices[rng.IntN(len(allDevices))]
		clock += int64(rng.IntN(5000))
		ts := clock - int64(rng.IntN(30_000)) // up to 30 s out of order: late for some minutes
		d.Pipe("readings", dev, reading{Device: dev, TS: ts, Temp: float64(rng.IntN(30))})
		if lag := time.Duration(clock-d.Now().UnixMilli()) * time.Millisecond; lag > 0 {
			d.Advance(lag)
		}
		switch r := rng.IntN(1000); {
		case r < 5:
			d.Restart(rng.IntN(2) == 0)
		case r < 8:
			d.Redeliver("readings", int32(rng.IntN(2)), 0)
		}
	}
	d.Advance(2 * time.Hour)
	checkOneFinal(t, d)
	type key struct {
		set, entity string
		start       int64
	}
	// A final sent again after a restart is the same one (checkOneFinal): each counts once.
	byKey := map[key]abacustest.Total{}
	for _, f := range d.Finals() {
		byKey[key{f.Set, f.Entity, f.Start.UnixMilli()}] = f
	}
	finals := make([]abacustest.Total, 0, len(byKey))
	for _, f := range byKey {
		finals = append(finals, f)
	}
	// merged[coarser window] is the merge of the finer set's finals inside it.
	type merge struct {
		count, sum, min, max, last float64
		lastStart                  int64
	}
	check := func(fine, coarse string, size int64, aggs ...string) {
		merged := map[key]*merge{}
		for _, f := range finals {
			if f.Set != fine {
				continue
			}
			s := f.Start.UnixMilli()
			k := key{coarse, f.Entity, s - s%size}
			m := merged[k]
			if m == nil {
				m = &merge{min: math.Inf(1), max: math.Inf(-1), lastStart: math.MinInt64}
				merged[k] = m
			}
			m.count += f.Float("count")
			m.sum += f.Float("sum")
			m.min = math.Min(m.min, f.Float("min"))
			m.max = math.Max(m.max, f.Float("max"))
			if s > m.lastStart {
				m.last, m.lastStart = f.Float("last"), s
			}
		}
		n := 0
		for _, f := range finals {
			if f.Set != coarse {
				continue
			}
			n++
			k := key{f.Set, f.Entity, f.Start.UnixMilli()}
			m := merged[k]
			if m == nil {
				t.Errorf("%s %s window at +%ds: a final %v, and no final of %s inside it", coarse, f.Entity, (k.start-t0)/1000, f, fine)
				continue
			}
			for _, a := range aggs {
				var want float64
				switch a {
				case "count":
					want = m.count
				case "sum":
					want = m.sum
				case "min":
					want = m.min
				case "max":
					want = m.max
				case "last":
					want = m.last
				case "mean":
					want = m.sum / m.count
				}
				if got := f.Float(a); math.Abs(got-want) > 1e-9*math.Max(1, math.Abs(want)) {
					t.Errorf("%s %s window at +%ds: %s %v, the merge of %s's finals %v", coarse, f.Entity, (k.start-t0)/1000, a, got, fine, want)
				}
			}
		}
		if n != len(merged) {
			t.Errorf("%s: %d finals, %s has finals in %d of its windows", coarse, n, fine, len(merged))
		}
	}
	check("minute", "ten", 600_000, "count", "sum", "min", "max", "last", "mean")
	check("ten", "hour", 3_600_000, "count", "sum", "min", "max", "last", "mean")
	check("region", "region-ten", 600_000, "max")
	// Where the minute set refused an event as late, its own 10-minute set may have taken it.
	differs := false
	for _, f := range finals {
		if f.Set == "own-ten" && !strings.HasPrefix(f.Entity, "_") {
			if c, ok := byKey[key{"ten", f.Entity, f.Start.UnixMilli()}]; !ok || c.Float("count") < f.Float("count") {
				differs = true
			}
		}
	}
	return differs
}

// TestCoarserRefusesWhatItCannotBe: a coarser set declares nothing of its own but its emission,
// and its window is a larger multiple of a tumbling one.
func TestCoarserRefusesWhatItCannotBe(t *testing.T) {
	cases := map[string]struct {
		decl func(src *topology.Source[reading])
		want string
	}{
		"own aggregation": {func(src *topology.Source[reading]) {
			src.Aggregate("m", windows.Tumbling(time.Minute)).Grace(0).Count("n").Coarser("h", time.Hour).Sum("s", "Temp")
		}, `a coarser set of "m" takes its aggregations`},
		"not a multiple": {func(src *topology.Source[reading]) {
			src.Aggregate("m", windows.Tumbling(time.Minute)).Grace(0).Count("n").Coarser("h", 90*time.Second)
		}, "not a multiple"},
		"smaller": {func(src *topology.Source[reading]) {
			src.Aggregate("m", windows.Tumbling(time.Minute)).Grace(0).Count("n").Coarser("h", time.Minute)
		}, "not a multiple"},
		"keeps what the finer set lacks": {func(src *topology.Source[reading]) {
			src.Aggregate("m", windows.Tumbling(time.Minute)).Grace(0).Count("n").Coarser("h", time.Hour, "n", "s")
		}, `Coarser keeps "s", which "m" does not declare`},
		"hopping": {func(src *topology.Source[reading]) {
			src.Aggregate("m", windows.Hopping(time.Minute, 30*time.Second)).Grace(0).Count("n").Coarser("h", time.Hour)
		}, "needs a set of tumbling windows"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			b := topology.New("bad")
			src := topology.NewSource(b, "readings", topology.JSON[reading](),
				func(r reading) string { return r.Device }, func(r reading) time.Time { return time.UnixMilli(r.TS) })
			c.decl(src)
			_, err := b.Build()
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Build: %v, want an error saying %q", err, c.want)
			}
		})
	}
	// Compiling changes no declaration: a builder builds the same topology twice.
	b := topology.New("twice")
	src := topology.NewSource(b, "readings", topology.JSON[reading](),
		func(r reading) string { return r.Device }, func(r reading) time.Time { return time.UnixMilli(r.TS) })
	src.Aggregate("m", windows.Tumbling(time.Minute)).Grace(0).Count("n").Coarser("t", 10*time.Minute).Coarser("h", time.Hour)
	for i := range 2 {
		if _, err := b.Build(); err != nil {
			t.Fatalf("build %d: %v", i+1, err)
		}
	}
	topo := coarserTopology(t)
	info, _ := topo.Set("hour")
	if info.Coarsens != "ten" || len(info.Aggregations) != 6 || info.Kinds[0] != "count" {
		t.Errorf("hour: %+v, want a coarser form of ten with its 6 aggregations", info)
	}
	if info, _ := topo.Set("region-ten"); !slices.Equal(info.Aggregations, []string{"max"}) || info.Dimension != "region" {
		t.Errorf("region-ten: %+v, want the region rollup's max alone", info)
	}
}
