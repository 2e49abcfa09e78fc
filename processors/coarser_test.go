package processors_test

import (
	"testing"
	"time"

	"github.com/abacus-stream/abacus/topology"
	"github.com/abacus-stream/abacus/windows"
)

// TestCoarserSetTakesWhatItsFinerSetTook: a 5-minute coarser set of a minute set counts and sums
// exactly the events the minute windows took: an event late for its minute (its 5-minute window
// still open) is late for both, a restart losing the local state in the middle changes nothing,
// and the 5-minute final is the sum of the minute finals inside it. On the driver, kfake and the
// real broker.
func TestCoarserSetTakesWhatItsFinerSetTook(t *testing.T) {
	eachRunner(t, func(t *testing.T) (*topology.Topology, runnerOptions) {
		name := uniqueTopology(t, "coarser")
		b := topology.New(name).LateTopic(name + "-late")
		source(b, name+"-in").Aggregate("m", windows.Tumbling(time.Minute)).Grace(5*time.Second).Count("n").Sum("v", "V").
			Coarser("m5", 5*time.Minute)
		return build(t, b), runnerOptions{partitions: 1, start: start, idleTimeout: 4 * time.Second}
	}, func(t *testing.T, r runner, topo *topology.Topology) {
		in := topo.SourceTopics()[0]
		send(r, in, ev{Entity: "c", TS: ms(10 * time.Second), V: 1})
		send(r, in, ev{Entity: "c", TS: ms(70 * time.Second), V: 2}) // closes minute 0 at 65 s
		send(r, in, ev{Entity: "c", TS: ms(30 * time.Second), V: 4}) // late for minute 0, not for [0, 5m)
		r.restart(true)
		send(r, in, ev{Entity: "c", TS: ms(200 * time.Second), V: 8})
		send(r, in, ev{Entity: "c", TS: ms(6 * time.Minute), V: 16}) // closes [0, 5m) at 5m05s
		r.advance(10 * time.Second)
		oneFinal(t, r, "m", "c", base).Expect(t, map[string]float64{"n": 1, "v": 1})
		oneFinal(t, r, "m", "c", base.Add(time.Minute)).Expect(t, map[string]float64{"n": 1, "v": 2})
		oneFinal(t, r, "m", "c", base.Add(3*time.Minute)).Expect(t, map[string]float64{"n": 1, "v": 8})
		oneFinal(t, r, "m5", "c", base).Expect(t, map[string]float64{"n": 3, "v": 11})
		sets := map[string]int{}
		for _, l := range r.late() {
			sets[l.Set]++
		}
		if sets["m"] != 1 || sets["m5"] != 1 || len(sets) != 2 {
			t.Fatalf("late records by set %v, want the late event once for m and once for m5", sets)
		}
	})
}
