package engine_test

import (
	"testing"
	"time"

	"github.com/abacus-stream/abacus/abacustest"
	"github.com/abacus-stream/abacus/topology"
	"github.com/abacus-stream/abacus/windows"
)

// TestEarlyFiresOnWallClock: an EarlyEvery window that held back a running total (its interval
// had not passed when the event came) emits it once the interval passes, at a tick, though no
// other event comes; a window with nothing held back emits nothing more; the final still comes
// once. Before, the held-back total waited for the entity's next event, so on a quiet entity
// the totals (and the table) lagged the processor's open window for as long as it stayed quiet.
func TestEarlyFiresOnWallClock(t *testing.T) {
	b := topology.New("early")
	topology.NewSource(b, "readings", topology.JSON[reading](),
		func(r reading) string { return r.Device },
		func(r reading) time.Time { return time.UnixMilli(r.TS) }).
		Aggregate("hour", windows.Tumbling(time.Hour)).Grace(0).Emit(topology.EarlyEvery(10 * time.Second)).
		Count("count")
	topo, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	d := abacustest.New(t, topo, abacustest.Options{Start: time.UnixMilli(t0), Partitions: 1})
	early := func() (n int, last float64) {
		for _, tot := range d.Totals() {
			if !tot.Final && tot.Entity == "quiet" {
				n, last = n+1, tot.Float("count")
			}
		}
		return n, last
	}
	d.Pipe("readings", "quiet", reading{Device: "quiet", TS: t0 + 1000})
	if n, c := early(); n != 1 || c != 1 {
		t.Fatalf("after the first event: %d early totals, last count %v; want the first at once", n, c)
	}
	d.Advance(time.Second)
	d.Pipe("readings", "quiet", reading{Device: "quiet", TS: t0 + 2000})
	d.Pipe("readings", "quiet", reading{Device: "quiet", TS: t0 + 3000})
	if n, _ := early(); n != 1 {
		t.Fatalf("%d early totals within the interval, want 1", n)
	}
	d.Advance(5 * time.Second)
	d.Tick()
	if n, _ := early(); n != 1 {
		t.Fatalf("an early total before its interval passed: %d", n)
	}
	d.Advance(5 * time.Second) // 11 s after the first firing, no event since the third
	d.Tick()
	if n, c := early(); n != 2 || c != 3 {
		t.Fatalf("after the interval passed on a quiet entity: %d early totals, last count %v; want the held-back 3", n, c)
	}
	d.Advance(time.Minute)
	d.Tick()
	if n, _ := early(); n != 2 {
		t.Fatalf("nothing held back, yet %d early totals", n)
	}
	// One event fires at once (its interval passed), the next is held back; then an event two
	// hours on closes the window before the held-back total is due: one final counting the
	// five, and no early total after it.
	d.Pipe("readings", "quiet", reading{Device: "quiet", TS: t0 + 4000})
	d.Pipe("readings", "quiet", reading{Device: "quiet", TS: t0 + 5000})
	d.Pipe("readings", "other", reading{Device: "other", TS: t0 + 2*3600_000}, abacustest.At(time.UnixMilli(t0+2*3600_000)))
	for range 3 {
		d.Advance(10 * time.Second)
		d.Tick()
	}
	finals := d.FinalsOf("hour", "quiet")
	if len(finals) != 1 || finals[0].Float("count") != 5 {
		t.Fatalf("finals %v, want one counting 5", finals)
	}
	seenFinal := false
	for _, tot := range d.Totals() {
		if tot.Entity != "quiet" {
			continue
		}
		if seenFinal {
			t.Fatalf("%v after the window's final", tot)
		}
		seenFinal = tot.Final
	}
}
