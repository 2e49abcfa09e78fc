package engine_test

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/abacus-stream/abacus/abacustest"
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
	topo := sensors(b, false)
	const n, devices = 100_000, 1000
	vals := make([][]byte, n)
	keys := make([]string, n)
	for i := range n {
		keys[i] = fmt.Sprintf("dev-%04d", i%devices)
		vals[i] = fmt.Appendf(nil, `{"device":%q,"ts":%d,"temp":%d}`, keys[i], t0+int64(i)*60, i%40)
	}
	b.ResetTimer()
	cpu0 := cpuTime()
	for range b.N {
		d := abacustest.New(b, topo, abacustest.Options{Start: at(t0)})
		for i := range n {
			d.Send("readings", keys[i], vals[i], abacustest.At(at(t0+int64(i)*60)))
		}
		d.Advance(10 * time.Minute)
		if len(d.Finals()) == 0 {
			b.Fatal("no finals")
		}
	}
	b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "events/s")
	// CPU time (all threads, GC included) per op: on a shared machine, wall time per op says more
	// about the neighbours than about the driver.
	b.ReportMetric((cpuTime()-cpu0).Seconds()/float64(b.N), "cpu-s/op")
}
