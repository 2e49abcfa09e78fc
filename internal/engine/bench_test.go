package engine_test

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/abacus-stream/abacus/abacustest"
	"github.com/abacus-stream/abacus/topology"
	"github.com/abacus-stream/abacus/windows"
)

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkDriver100k runs 100,000 events of 1,000 devices through a topology with three windowed
// sets (tumbling, hopping, session) in memory, closing every window: the cost of a user's
// topology test. Goal: under 2 s per op on a 2-core machine.
func BenchmarkDriver100k(b *testing.B) {
	benchDriver(b, sensors(b, false), 60, 10*time.Minute, func(d *abacustest.Driver) bool { return len(d.Finals()) > 0 })
}

// benchDriver runs 100,000 readings of 1,000 devices, step ms apart in event time, through topo
// in memory per op, then moves the clock by idle; done must hold at the end of each op.
func benchDriver(b *testing.B, topo *topology.Topology, step int64, idle time.Duration, done func(*abacustest.Driver) bool) {
	const n, devices = 100_000, 1000
	vals := make([][]byte, n)
	keys := make([]string, n)
	for i := range n {
		keys[i] = fmt.Sprintf("dev-%04d", i%devices)
		vals[i] = fmt.Appendf(nil, `{"device":%q,"ts":%d,"temp":%d}`, keys[i], t0+int64(i)*step, i%40)
	}
	b.ResetTimer()
	cpu0 := cpuTime()
	for range b.N {
		d := abacustest.New(b, topo, abacustest.Options{Start: at(t0)})
		for i := range n {
			d.Send("readings", keys[i], vals[i], abacustest.At(at(t0+int64(i)*step)))
		}
		d.Advance(idle)
		if !done(d) {
			b.Fatal("the run did not emit what it should")
		}
	}
	b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "events/s")
	// CPU time (all threads, GC included) per op: on a shared machine, wall time per op says more
	// about the neighbours than about the driver.
	b.ReportMetric((cpuTime()-cpu0).Seconds()/float64(b.N), "cpu-s/op")
}

// BenchmarkRollups compares, in one run, a topology of one per-entity set, of three per-entity
// sets, and of the per-entity set beside a per-region rollup (100 regions) and a global one: what
// rollups cost the processor per event beyond the sets they add (issue 24's goal: at least 0.7 of
// the entity-only throughput).
func BenchmarkRollups(b *testing.B) {
	for _, variant := range []string{"entity-only", "three-entity-sets", "entity+region+global"} {
		withRollups := variant == "entity+region+global"
		b.Run(variant, func(b *testing.B) {
			bld := topology.New("bench")
			src := topology.NewSource(bld, "readings", topology.JSON[reading](),
				func(r reading) string { return r.Device },
				func(r reading) time.Time { return time.UnixMilli(r.TS) })
			src.Aggregate("minute", windows.Tumbling(time.Minute)).Grace(0).Count("count").Sum("sum", "Temp").Max("max", "Temp")
			if variant == "three-entity-sets" { // the same work per event, without rollups
				src.Aggregate("minute2", windows.Tumbling(time.Minute)).Grace(0).Count("count").Sum("sum", "Temp").Max("max", "Temp")
				src.Aggregate("minute3", windows.Tumbling(time.Minute)).Grace(0).Count("count").Sum("sum", "Temp").Max("max", "Temp")
			}
			if withRollups {
				src.Aggregate("region", windows.Tumbling(time.Minute)).Grace(0).
					By("region", func(r reading) string { return "r" + r.Device[len(r.Device)-2:] }).
					Count("count").Sum("sum", "Temp").Max("max", "Temp")
				src.Aggregate("all", windows.Tumbling(time.Minute)).Grace(0).Global().Count("count").Sum("sum", "Temp").Max("max", "Temp")
			}
			topo, err := bld.Build()
			if err != nil {
				b.Fatal(err)
			}
			benchDriver(b, topo, 6, 3*time.Minute, func(d *abacustest.Driver) bool {
				return !withRollups || len(d.FinalsOf("all", topology.GlobalKey)) > 0
			})
		})
	}
}
