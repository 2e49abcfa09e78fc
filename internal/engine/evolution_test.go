package engine_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/abacus-stream/abacus/abacustest"
	"github.com/abacus-stream/abacus/internal/plan"
	"github.com/abacus-stream/abacus/partitioner"
	"github.com/abacus-stream/abacus/topology"
	"github.com/abacus-stream/abacus/windows"
)

// evo is one version of the topology that the evolution tests upgrade: which sets, in which order,
// with which aggregations and grace. Sets: "minute" (per entity), "region" (By region), "all"
// (Global), "extra" (Global, cold readings only).
type evo struct {
	order []string
	aggs  []string // of every set: count, sum, max, mean
	grace time.Duration
}

func (v evo) topology(t testing.TB) *topology.Topology {
	t.Helper()
	b := topology.New("evo")
	b.LateTopic("evo-late")
	src := topology.NewSource(b, "readings", topology.JSON[reading](),
		func(r reading) string { return r.Device },
		func(r reading) time.Time { return time.UnixMilli(r.TS) })
	grace := v.grace
	if grace == 0 {
		grace = 10 * time.Second
	}
	aggs := v.aggs
	if aggs == nil {
		aggs = []string{"count", "sum"}
	}
	for _, name := range v.order {
		s := src.Aggregate(name, windows.Tumbling(time.Minute)).Grace(grace)
		switch name {
		case "region":
			s.By("region", func(r reading) string { return regionOf(r.Device) })
		case "all":
			s.Global()
		case "extra":
			s.Global().Where(func(r reading) bool { return r.Temp < 10 })
		}
		for _, a := range aggs {
			switch a {
			case "count":
				s.Count("count")
			case "sum":
				s.Sum("sum", "Temp")
			case "max":
				s.Max("max", "Temp")
			case "mean":
				s.Mean("mean", "Temp")
			}
		}
	}
	topo, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	return topo
}

// noStop fails the test when the processor stops: no topology change of these tests may stop it.
func noStop(t *testing.T) func(error) {
	return func(err error) { t.Errorf("the processor stopped: %v", err) }
}

// checkOneFinal fails on two finals of one window that disagree (abacustest.Total.Agrees), and
// on a final keyed by an internal state key. A final emitted again the same after a restart is
// one final: whether the first reached Kafka is unknown at a restart, and a sink writes the same
// cells again.
func checkOneFinal(t *testing.T, d *abacustest.Driver) {
	t.Helper()
	seen := map[string]abacustest.Total{}
	for _, f := range d.Finals() {
		if strings.Contains(f.Entity, "abacus-") {
			t.Errorf("a final keyed by an internal key: %v", f)
		}
		k := fmt.Sprintf("%s/%s/%d", f.Set, f.Entity, f.Start.UnixMilli())
		if prev, ok := seen[k]; ok && !prev.Agrees(f) {
			t.Errorf("two finals of %s: %v and %v", k, prev, f)
		}
		seen[k] = f
	}
}

// The evolution tests run two partitions, and four devices on each, so that each partition's
// stream time is the test's to move: devices[p] are the devices goka's partitioner puts on
// partition p.
var devices = func() [2][]string {
	var ds [2][]string
	for i := 0; len(ds[0]) < 4 || len(ds[1]) < 4; i++ {
		dev := fmt.Sprintf("d%d", i)
		if p := partitioner.Partition([]byte(dev), 2); len(ds[p]) < 4 {
			ds[p] = append(ds[p], dev)
		}
	}
	return ds
}()

// allDevices are the devices of both partitions.
var allDevices = append(append([]string(nil), devices[0]...), devices[1]...)

// sendAll sends a reading of every device of partition p (or of both, p < 0) at t0+ms.
func sendAll(d *abacustest.Driver, p int32, ms int64, temp float64) {
	for q, ds := range devices {
		if p >= 0 && int32(q) != p {
			continue
		}
		for _, dev := range ds {
			d.Pipe("readings", dev, reading{Device: dev, TS: t0 + ms, Temp: temp})
		}
	}
}

// TestRollupPartialsFollowSetsByName reorders the sets and adds one before the rollups while
// partials are in flight (sent by the old version, read by the new one) and windows are half
// closed (one partition past them, the other not): the partials find their set by name, the
// processor does not stop, and each rollup window gets one final, whole.
func TestRollupPartialsFollowSetsByName(t *testing.T) {
	for _, lose := range []bool{false, true} {
		t.Run(fmt.Sprintf("lose=%v", lose), func(t *testing.T) {
			v1 := evo{order: []string{"minute", "region", "all"}}.topology(t)
			v2 := evo{order: []string{"extra", "all", "region", "minute"}}.topology(t)
			d := abacustest.New(t, v1, abacustest.Options{Start: at(t0), Partitions: 2, IdleTimeout: time.Hour, OnFail: noStop(t)})
			for i, dev := range allDevices {
				d.Pipe("readings", dev, reading{Device: dev, TS: t0 + int64(i)*1000, Temp: float64(i)})
			}
			// Partition 0 passes the first window's close and sends its final partials; partition 1
			// does not.
			sendAll(d, 0, 75_000, 1)
			d.RestartWith(v2, lose)
			d.Redeliver("evo-loop", 0, 0) // the old version's partials, read again by the new one
			d.Redeliver("evo-loop", 1, 0)
			sendAll(d, 1, 75_000, 1)
			sendAll(d, -1, 200_000, 1)
			checkOneFinal(t, d)
			if got := d.Final("all", topology.GlobalKey, at(t0)).Float("count"); got != float64(len(allDevices)) {
				t.Errorf("fleet count of the first window: %v, want %d", got, len(allDevices))
			}
			want := map[string]float64{}
			for _, dev := range allDevices {
				want[regionOf(dev)]++
			}
			for region, n := range want {
				if got := d.Final("region", region, at(t0)).Float("count"); got != n {
					t.Errorf("region %s count of the first window: %v, want %v", region, got, n)
				}
			}
		})
	}
}

// TestRollupGraceLoweredKeepsEveryShare lowers a rollup's grace across a restart while its window
// is final at one partition (its share merged at the owner) and open at the other, whose progress
// is past the new close already: the window's final still counts both partitions' shares.
func TestRollupGraceLoweredKeepsEveryShare(t *testing.T) {
	for _, lose := range []bool{false, true} {
		t.Run(fmt.Sprintf("lose=%v", lose), func(t *testing.T) {
			v1 := evo{order: []string{"minute", "all"}, grace: 40 * time.Second}.topology(t)
			v2 := evo{order: []string{"minute", "all"}, grace: 5 * time.Second}.topology(t)
			d := abacustest.New(t, v1, abacustest.Options{Start: at(t0), Partitions: 2, IdleTimeout: time.Hour, OnFail: noStop(t)})
			sendAll(d, -1, 1000, 1)
			sendAll(d, 0, 105_000, 1)   // partition 0 closes the first window (60 s + 40 s)
			sendAll(d, 1, 80_000, 1)    // partition 1 is 20 s past its end: open under 40 s, not under 5 s
			d.Advance(20 * time.Minute) // ticks: the owner's record holds both partitions' progress
			d.RestartWith(v2, lose)
			sendAll(d, -1, 200_000, 1)
			checkOneFinal(t, d)
			if got := d.Final("all", topology.GlobalKey, at(t0)).Float("count"); got != float64(len(allDevices)) {
				t.Errorf("fleet count of the first window: %v, want %d (every partition's share)", got, len(allDevices))
			}
		})
	}
}

// TestAggregationAddedKeepsOneFinal adds an aggregation while a window's final is retained: the
// window is not emitted again, for an entity set and a rollup set alike.
func TestAggregationAddedKeepsOneFinal(t *testing.T) {
	for _, lose := range []bool{false, true} {
		t.Run(fmt.Sprintf("lose=%v", lose), func(t *testing.T) {
			v1 := evo{order: []string{"minute", "all"}, aggs: []string{"count"}}.topology(t)
			v2 := evo{order: []string{"minute", "all"}, aggs: []string{"count", "mean"}}.topology(t)
			d := abacustest.New(t, v1, abacustest.Options{Start: at(t0), Partitions: 2, IdleTimeout: time.Hour,
				FinalRetention: time.Hour, OnFail: noStop(t)})
			sendAll(d, -1, 1000, 4)
			sendAll(d, -1, 75_000, 4)
			if n := len(d.FinalsOf("all", topology.GlobalKey)); n != 1 {
				t.Fatalf("%d fleet finals before the upgrade, want 1", n)
			}
			d.RestartWith(v2, lose)
			sendAll(d, -1, 200_000, 4)
			d.Redeliver("evo-loop", 0, 0)
			d.Redeliver("evo-loop", 1, 0)
			sendAll(d, -1, 300_000, 4)
			checkOneFinal(t, d)
			// A window open at the upgrade has no value of the new aggregation (its events before
			// the upgrade were not fed to it); the windows after it have.
			for _, w := range []abacustest.Total{d.Final("minute", allDevices[0], at(t0+60_000)), d.Final("all", topology.GlobalKey, at(t0+60_000))} {
				if _, ok := w.Values["mean"]; ok {
					t.Errorf("a window open at the upgrade has a mean of part of its events: %v", w)
				}
			}
			d.Final("minute", allDevices[0], at(t0+180_000)).Expect(t, map[string]float64{"count": 1, "mean": 4})
			d.Final("all", topology.GlobalKey, at(t0+180_000)).Expect(t, map[string]float64{"count": 8, "mean": 4})
		})
	}
}

// TestRollupGraceRaisedDoesNotReopen raises a rollup's grace after a window was final and pruned
// at its owner: neither the contributions its entities still hold nor one partition's partial
// read again (the owner's consumer resumes between the two partitions' partials) open it again.
func TestRollupGraceRaisedDoesNotReopen(t *testing.T) {
	for _, lose := range []bool{false, true} {
		t.Run(fmt.Sprintf("lose=%v", lose), func(t *testing.T) {
			v1 := evo{order: []string{"minute", "all"}, grace: 5 * time.Second}.topology(t)
			v2 := evo{order: []string{"minute", "all"}, grace: 5 * time.Minute}.topology(t)
			d := abacustest.New(t, v1, abacustest.Options{Start: at(t0), Partitions: 2, IdleTimeout: time.Hour,
				TickInterval: 5 * time.Second, FinalRetention: time.Second, OnFail: noStop(t)})
			sendAll(d, -1, 1000, 4)
			sendAll(d, 1, 70_000, 4) // partition 1's final partial first,
			sendAll(d, 0, 70_000, 4) // then partition 0's: the window is final at its owner
			d.Advance(time.Minute)   // retention passes: the final window leaves the owner's state
			if n := len(d.FinalsOf("all", topology.GlobalKey)); n != 1 {
				t.Fatalf("%d fleet finals before the upgrade, want 1", n)
			}
			if w := d.Windows("all", topology.GlobalKey); len(w) != 0 {
				t.Fatalf("the owner holds %v after retention", w)
			}
			var last abacustest.Message
			for _, m := range d.Messages("evo-loop") {
				if m.Key == "abacus-rollup/all/all" && (m.Value[0] == 6 || m.Value[0] == 8) { // a partial total
					last = m
				}
			}
			d.RestartWith(v2, lose)
			d.Redeliver("evo-loop", last.Partition, last.Offset)
			sendAll(d, -1, 900_000, 4)
			d.Advance(10 * time.Minute)
			checkOneFinal(t, d)
			for _, w := range d.Windows("all", topology.GlobalKey) {
				if w.Start.Equal(at(t0)) {
					t.Errorf("the owner opened the final window again: %v", w)
				}
			}
		})
	}
}

// TestStatePrunedAfterRestart restarts (keeping and losing the local table) at every tick while
// windows close, their finals are emitted and retention passes: whatever the moment, once every
// window is closed and retention has passed, no entity is left in the table.
func TestStatePrunedAfterRestart(t *testing.T) {
	for _, lose := range []bool{false, true} {
		for restartAt := range 31 { // 30: no restart
			t.Run(fmt.Sprintf("lose=%v/tick=%d", lose, restartAt), func(t *testing.T) {
				topo := evo{order: []string{"minute", "all"}}.topology(t)
				d := abacustest.New(t, topo, abacustest.Options{Start: at(t0), Partitions: 2, IdleTimeout: time.Minute,
					TickInterval: 5 * time.Second, FinalRetention: 30 * time.Second, OnFail: noStop(t)})
				sendAll(d, -1, 1000, 4)
				for i := range 30 {
					if i == restartAt {
						d.Restart(lose)
					}
					d.Advance(5 * time.Second)
				}
				d.Advance(10 * time.Minute)
				if len(d.FinalsOf("minute", allDevices[0])) == 0 {
					t.Fatal("no final of a device")
				}
				if n := d.Entities(); n != 0 {
					t.Fatalf("%d entities left in the table 10 minutes after every window closed, want 0", n)
				}
				checkOneFinal(t, d)
			})
		}
	}
}

// TestSetAddedWhileWindowsOpen adds an entity set and a rollup set to a running topology while
// windows are open: those windows missed the events before the upgrade, and get no total (the
// backfill's to compute); every window that starts after the upgrade gets its whole total.
func TestSetAddedWhileWindowsOpen(t *testing.T) {
	for _, lose := range []bool{false, true} {
		t.Run(fmt.Sprintf("lose=%v", lose), func(t *testing.T) {
			v1 := evo{order: []string{"minute"}}.topology(t)
			v2 := evo{order: []string{"minute", "all", "region"}}.topology(t)
			d := abacustest.New(t, v1, abacustest.Options{Start: at(t0), Partitions: 2, IdleTimeout: time.Hour, OnFail: noStop(t)})
			sendAll(d, -1, 1000, 4)
			d.RestartWith(v2, lose)
			sendAll(d, -1, 2000, 4)  // the first window, open at the upgrade
			sendAll(d, -1, 61000, 4) // the second, after it
			sendAll(d, -1, 200_000, 4)
			checkOneFinal(t, d)
			for _, f := range d.Finals() {
				if (f.Set == "all" || f.Set == "region") && f.Start.Equal(at(t0)) {
					t.Errorf("a window of a set added while it was open has a total (of part of its events): %v", f)
				}
			}
			d.Final("minute", allDevices[0], at(t0)).Expect(t, map[string]float64{"count": 2, "sum": 8})
			d.Final("all", topology.GlobalKey, at(t0+60_000)).Expect(t, map[string]float64{"count": 8, "sum": 32})
			if n := sumMetric(t, d.Registry(), "abacus_processor_windows_before_set_total"); n == 0 {
				t.Error("no window counted as started before its set")
			}
		})
	}
}

// TestRollingRolloutAddsRollup adds a rollup set in a rolling rollout: for a while one partition
// runs the version with the set and the other the version without, each as source and as the
// owner of the set's key. A final partial sent to an owner that does not know the set yet cannot
// be kept there: the window it belongs to gets no total (it is counted as started before the
// set), never a total short of that share; the windows after the rollout are whole, whichever
// partition upgrades first.
func TestRollingRolloutAddsRollup(t *testing.T) {
	owner := partitioner.Partition([]byte(plan.RollupStateKey("all", topology.GlobalKey)), 2)
	for _, first := range []string{"sender", "owner"} {
		for _, lose := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s-first/lose=%v", first, lose), func(t *testing.T) {
				v1 := evo{order: []string{"minute"}}.topology(t)
				v2 := evo{order: []string{"minute", "all"}}.topology(t)
				d := abacustest.New(t, v1, abacustest.Options{Start: at(t0), Partitions: 2, IdleTimeout: time.Hour,
					TickInterval: 5 * time.Second, OnFail: noStop(t)})
				up, later := 1-owner, owner
				if first == "owner" {
					up, later = owner, 1-owner
				}
				sendAll(d, -1, 1000, 4)
				d.RollOut(v2, lose, up)
				// The upgraded partition runs the set from stream time t0+1s: its second window
				// [t0+60s, t0+120s) is whole there, closes, and its final partial goes out.
				sendAll(d, up, 61_000, 4)
				sendAll(d, up, 200_000, 4)
				d.Advance(20 * time.Second)
				d.RollOut(v2, lose, later)
				// The other partition runs it from the same stream time, and has the window too.
				sendAll(d, later, 61_000, 4)
				sendAll(d, later, 200_000, 4)
				// A window after the rollout, on both (the wall clock moves on, so that these events
				// are not from the future).
				d.Advance(5 * time.Minute)
				sendAll(d, -1, 250_000, 4)
				sendAll(d, -1, 400_000, 4)
				d.Advance(time.Minute)
				checkOneFinal(t, d)
				all := d.FinalsOf("all", topology.GlobalKey)
				for _, f := range all {
					if f.Start.Equal(at(t0+60_000)) && f.Float("count") != float64(len(allDevices)) {
						t.Errorf("the window the rollout crossed has a total short of a partition's share: %v", f)
					}
				}
				d.Final("all", topology.GlobalKey, at(t0+240_000)).Expect(t, map[string]float64{"count": 8, "sum": 32})
				if first == "sender" && len(all) > 0 && all[0].Start.Equal(at(t0+60_000)) {
					t.Errorf("a window whose partial reached an owner without the set has a total: %v", all[0])
				}
			})
		}
	}
}
