package tables_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/abacus-stream/abacus/abacustest"
	"github.com/abacus-stream/abacus/deadletter"
	"github.com/abacus-stream/abacus/topology"
	"github.com/abacus-stream/abacus/windows"
)

// reading is an event of the join tests: a device's value at a time; Region is filled in by the
// join from the devices table.
type reading struct {
	Device string `json:"device"`
	Time   int64  `json:"ts"`
	Value  int64  `json:"value"`
	Region string `json:"region,omitempty"`
}

// device is a value of the devices table.
type device struct {
	Region string `json:"region"`
}

const (
	readingsTopic = "readings"
	devicesTopic  = "devices"
)

// joinTopology counts readings per region by the region their device had at the reading's time
// (a rollup), and per device with the region as a type (so that the entity set shows what each
// reading was joined with). strict sends a reading of an unknown device to the dead-letter
// topic; otherwise it counts under "unknown".
func joinTopology(t testing.TB, name string, strict bool) *topology.Topology {
	t.Helper()
	b := topology.New(name)
	src := topology.NewSource(b, readingsTopic, topology.JSON[reading](),
		func(r reading) string { return r.Device },
		func(r reading) time.Time { return time.UnixMilli(r.Time) }).
		EventType(func(r reading) string { return r.Region })
	devices := topology.NewTable[device](b, "devices", devicesTopic, topology.JSON[device]())
	topology.Join(src, devices, func(r reading) string { return r.Device },
		func(r reading, d device, found bool) (reading, error) {
			switch {
			case found:
				r.Region = d.Region
			case strict:
				return r, errors.New("device " + r.Device + " is not in the registry")
			default:
				r.Region = "unknown"
			}
			return r, nil
		})
	src.Aggregate("region-minute", windows.Tumbling(time.Minute)).Grace(10*time.Second).
		By("region", func(r reading) string { return r.Region }).Count("count").Sum("sum", "Value")
	src.Aggregate("device-minute", windows.Tumbling(time.Minute)).Grace(10 * time.Second).Count("count")
	topo, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	return topo
}

var t0 = time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)

// finalCounts renders every final of a set as "entity@minute=count/sum", sorted, once each: a
// restart may emit a final again, the same; two different finals of one window fail the test.
func finalCounts(t *testing.T, finals []abacustest.Total, set string) []string {
	t.Helper()
	seen := map[string]string{}
	var out []string
	for _, f := range finals {
		if f.Set != set {
			continue
		}
		w := fmt.Sprintf("%s@%d", f.Entity, f.Start.Sub(t0)/time.Minute)
		s := fmt.Sprintf("%s=%d", w, f.Values["count"].Int)
		if v, ok := f.Values["sum"]; ok {
			s += fmt.Sprintf("/%g", v.Number())
		}
		if prev, ok := seen[w]; ok {
			if prev != s {
				t.Errorf("set %s window %s: two finals, %s and %s", set, w, prev, s)
			}
			continue
		}
		seen[w] = s
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// TestJoinByEventTime: an event sees the version valid at its event time, whatever was read
// after it, before it or between; a deletion and a key never seen give the join's choice.
func TestJoinByEventTime(t *testing.T) {
	topo := joinTopology(t, "join", false)
	d := abacustest.New(t, topo, abacustest.Options{Partitions: 2, Start: t0})
	// d1 is in eu from minute 0, in us from minute 2, deleted from minute 4; d2 is in ap from
	// minute 1. d3 is never registered.
	d.PutTable("devices", "d1", device{"eu"}, t0)
	d.PutTable("devices", "d1", device{"us"}, t0.Add(2*time.Minute))
	d.PutTable("devices", "d2", device{"ap"}, t0.Add(time.Minute))
	d.PutTable("devices", "d1", nil, t0.Add(4*time.Minute))
	send := func(dev string, at time.Duration, v int64) {
		d.Pipe(readingsTopic, dev, reading{Device: dev, Time: t0.Add(at).UnixMilli(), Value: v}, abacustest.At(t0.Add(at)))
	}
	send("d1", 30*time.Second, 1)                // eu
	send("d2", 40*time.Second, 2)                // before d2 was registered: unknown
	send("d1", 2*time.Minute+time.Second, 4)     // us
	send("d1", 2*time.Minute-time.Second, 8)     // still eu (out of order, within grace)
	send("d2", 2*time.Minute+10*time.Second, 16) // ap
	send("d3", 3*time.Minute, 32)                // never registered: unknown
	send("d1", 4*time.Minute, 64)                // deleted at exactly its time: unknown
	d.Advance(10 * time.Minute)
	got := finalCounts(t, d.Finals(), "region-minute")
	want := []string{"eu@0=1/1", "eu@1=1/8", "unknown@0=1/2", "unknown@3=1/32", "unknown@4=1/64", "us@2=1/4", "ap@2=1/16"}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("region finals\n got %v\nwant %v", got, want)
	}
	if dls := d.DeadLetters(); len(dls) != 0 {
		t.Fatalf("dead letters: %v", dls)
	}
}

// TestJoinArrivalOrderDoesNotMatter: the table's versions read before, between or after the
// events (as long as before each event that needs them) give the same finals; and a replay with
// the state lost gives them again.
func TestJoinArrivalOrderDoesNotMatter(t *testing.T) {
	type update struct {
		key    string
		region string
		at     time.Duration
	}
	updates := []update{{"d1", "eu", 0}, {"d2", "us", 0}, {"d1", "ap", 90 * time.Second}, {"d2", "", 150 * time.Second}, {"d2", "eu", 200 * time.Second}}
	var events []reading
	for i := range 40 {
		events = append(events, reading{Device: fmt.Sprintf("d%d", 1+i%2), Time: t0.Add(time.Duration(i) * 7 * time.Second).UnixMilli(), Value: int64(i)})
	}
	run := func(lazy bool, replay bool) []string {
		d := abacustest.New(t, joinTopology(t, "join", false), abacustest.Options{Partitions: 2, Start: t0})
		put := func(u update) {
			var v any
			if u.region != "" {
				v = device{u.region}
			}
			d.PutTable("devices", u.key, v, t0.Add(u.at))
		}
		next := 0
		for _, e := range events {
			// Lazy: each version is read just before the first event at or past its time.
			for lazy && next < len(updates) && t0.Add(updates[next].at).UnixMilli() <= e.Time {
				put(updates[next])
				next++
			}
			if !lazy && next == 0 {
				for _, u := range updates {
					put(u)
				}
				next = len(updates)
			}
			d.Pipe(readingsTopic, e.Device, e, abacustest.At(time.UnixMilli(e.Time)))
		}
		if replay {
			d.Restart(true)
			for p := range int32(2) {
				d.Redeliver(readingsTopic, p, 0)
			}
		}
		d.Advance(10 * time.Minute)
		return append(finalCounts(t, d.Finals(), "region-minute"), finalCounts(t, d.Finals(), "device-minute")...)
	}
	eager := run(false, false)
	if len(eager) == 0 || !slices.ContainsFunc(eager, func(s string) bool { return strings.HasPrefix(s, "unknown@") }) {
		t.Fatalf("finals %v: want some, and the deletion of d2 to show as unknown", eager)
	}
	if lazy := run(true, false); !slices.Equal(lazy, eager) {
		t.Fatalf("versions read just in time\n got %v\nwant %v (all read first)", lazy, eager)
	}
	if replayed := run(true, true); !slices.Equal(replayed, eager) {
		t.Fatalf("after a replay with the state lost\n got %v\nwant %v", replayed, eager)
	}
}

// TestJoinErrorDeadLetters: a join that refuses an event (a missing key, in strict mode) sends
// its record to the dead-letter topic, once, with its reason; the other events are counted.
func TestJoinErrorDeadLetters(t *testing.T) {
	d := abacustest.New(t, joinTopology(t, "strict", true), abacustest.Options{Partitions: 2, Start: t0})
	d.PutTable("devices", "d1", device{"eu"}, t0)
	d.Pipe(readingsTopic, "d1", reading{Device: "d1", Time: t0.Add(time.Second).UnixMilli(), Value: 1}, abacustest.At(t0))
	d.Pipe(readingsTopic, "d9", reading{Device: "d9", Time: t0.Add(time.Second).UnixMilli(), Value: 2}, abacustest.At(t0))
	d.Advance(5 * time.Minute)
	dls := d.DeadLetters()
	if len(dls) != 1 || dls[0].Reason != deadletter.Unjoined || !strings.Contains(dls[0].Detail, `table "devices"`) ||
		!strings.Contains(dls[0].Detail, "d9 is not in the registry") {
		t.Fatalf("dead letters %+v: want one, unjoined, naming the table and the error", dls)
	}
	if got := finalCounts(t, d.Finals(), "region-minute"); !slices.Equal(got, []string{"eu@0=1/1"}) {
		t.Fatalf("region finals %v", got)
	}
}
