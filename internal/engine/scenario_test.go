// The engine's guarantees, scenario by scenario, with no broker: abacustest's in-memory driver runs
// the engine as a processor would (stream time, idle closes, acknowledgements that lag, restarts
// that keep or lose the local table). The same scenarios against kfake and a real broker are in
// processors.
package engine_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/abacus-stream/abacus/abacustest"
	"github.com/abacus-stream/abacus/deadletter"
	"github.com/abacus-stream/abacus/topology"
	"github.com/abacus-stream/abacus/windows"
)

type reading struct {
	Device string  `json:"device"`
	TS     int64   `json:"ts"`
	Temp   float64 `json:"temp"`
	Kind   string  `json:"kind,omitempty"`
}

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()

func sensors(t testing.TB, late bool) *topology.Topology {
	t.Helper()
	b := topology.New("sensors")
	if late {
		b.LateTopic("sensors-late")
	}
	src := topology.NewSource(b, "readings", topology.JSON[reading](),
		func(r reading) string { return r.Device },
		func(r reading) time.Time { return time.UnixMilli(r.TS) }).
		EventType(func(r reading) string { return r.Kind })
	src.Aggregate("minute", windows.Tumbling(time.Minute)).Grace(10*time.Second).
		Count("count").Max("max_temp", "Temp").Last("last_temp", "Temp")
	src.Aggregate("hop", windows.Hopping(2*time.Minute, time.Minute)).Grace(0).Count("count")
	src.Aggregate("session", windows.Session(30*time.Second)).Grace(0).Count("count").Last("last_temp", "Temp")
	topo, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	return topo
}

func at(ms int64) time.Time { return time.UnixMilli(ms) }

func TestFinalsOnStreamTime(t *testing.T) {
	d := abacustest.New(t, sensors(t, false), abacustest.Options{Start: at(t0)})
	d.Pipe("readings", "a", reading{Device: "a", TS: t0 + 1000, Temp: 20})
	d.Pipe("readings", "a", reading{Device: "a", TS: t0 + 2000, Temp: 25})
	if len(d.Finals()) != 0 {
		t.Fatalf("finals before stream time passed the window: %v", d.Finals())
	}
	d.Pipe("readings", "a", reading{Device: "a", TS: t0 + 71_000, Temp: 1}) // closes [t0, t0+60s) at +70s
	d.Final("minute", "a", at(t0)).Expect(t, map[string]float64{"count": 2, "max_temp": 25, "last_temp": 25})
	if w := d.Windows("minute", "a"); len(w) == 0 {
		t.Fatal("open window not held")
	}
}

func TestIdleCloseAndDeadLetters(t *testing.T) {
	d := abacustest.New(t, sensors(t, false), abacustest.Options{Start: at(t0 + 5000)})
	d.Pipe("readings", "b", reading{Device: "b", TS: t0 + 1000, Temp: 3})
	d.Send("readings", "b", []byte("{not json"))
	d.Pipe("readings", "b", reading{Device: "b", TS: t0 + 10*60_000, Temp: 3}) // from the future
	d.Send("readings", "", []byte(`{"device":"","ts":1}`))
	if got := len(d.DeadLetters()); got != 3 {
		t.Fatalf("%d dead letters, want 3: %+v", got, d.DeadLetters())
	}
	reasons := map[deadletter.Reason]int{}
	for _, r := range d.DeadLetters() {
		reasons[r.Reason]++
		if string(r.Source.Topic) != "readings" {
			t.Fatalf("dead letter source %v", r.Source)
		}
	}
	if reasons[deadletter.Undecodable] != 1 || reasons[deadletter.Future] != 1 || reasons[deadletter.NoEntity] != 1 {
		t.Fatalf("reasons %v", reasons)
	}
	d.Advance(3 * time.Minute) // idle: stream time follows the clock, in two ticks
	d.Final("minute", "b", at(t0)).Expect(t, map[string]float64{"count": 1})
	d.Advance(5 * time.Minute)
	if n := d.Entities(); n != 0 {
		t.Fatalf("%d entities left after every window closed and retention passed", n)
	}
}

func TestRedeliveryAndRestart(t *testing.T) {
	for _, lose := range []bool{false, true} {
		d := abacustest.New(t, sensors(t, false), abacustest.Options{Start: at(t0), Partitions: 1})
		for i := range 5 {
			d.Pipe("readings", "c", reading{Device: "c", TS: t0 + int64(i)*1000, Temp: float64(i)})
		}
		d.Restart(lose)
		d.Redeliver("readings", 0, 0)
		d.Pipe("readings", "c", reading{Device: "c", TS: t0 + 80_000})
		d.Final("minute", "c", at(t0)).Expect(t, map[string]float64{"count": 5, "max_temp": 4})
	}
}

// TestPruneWithAckLag: with acknowledgements lagging, every window still closes once and every
// closed window leaves the table.
func TestPruneWithAckLag(t *testing.T) {
	for _, lag := range []int{1, 3, 10} {
		d := abacustest.New(t, sensors(t, false), abacustest.Options{Start: at(t0), AckLag: lag, FinalRetention: time.Millisecond, Partitions: 2})
		for i := range 200 {
			dev := string(rune('a' + i%7))
			d.Pipe("readings", dev, reading{Device: dev, TS: t0 + int64(i)*1500, Temp: float64(i % 13)})
		}
		d.Advance(10 * time.Minute)
		if n := d.Entities(); n != 0 {
			t.Fatalf("lag %d: %d entities left", lag, n)
		}
		seen := map[string]int{}
		for _, f := range d.Finals() {
			seen[f.String()]++
		}
		for _, f := range d.Finals() {
			d.Final(f.Set, f.Entity, f.Start) // fails on two different finals
		}
	}
}

// TestDeterministic (DESIGN invariant 10): the same test run 50 times gives the same output, message for
// message: totals, late records, dead letters (run it under -race too: run-tests.sh does).
func TestDeterministic(t *testing.T) {
	run := func() string {
		d := abacustest.New(t, sensors(t, true), abacustest.Options{Start: at(t0), AckLag: 3})
		for i := range 600 {
			dev := fmt.Sprintf("d%d", i%13)
			ts := t0 + int64(i)*700
			switch {
			case i%97 == 0:
				d.Send("readings", dev, []byte("garbage"))
			case i%31 == 0:
				ts -= 5 * 60_000 // late
			case i%53 == 0:
				d.Pipe("readings", dev, reading{Device: dev, TS: ts, Temp: float64(i % 17)}) // a duplicate event
			}
			d.Pipe("readings", dev, reading{Device: dev, TS: ts, Temp: float64(i % 17)}, abacustest.At(at(ts)))
			if i%50 == 0 {
				d.Advance(20 * time.Second)
			}
		}
		d.Advance(10 * time.Minute)
		var b strings.Builder
		for _, topic := range []string{"sensors-totals", "sensors-late", "sensors-dead-letter"} {
			for _, m := range d.Messages(topic) {
				fmt.Fprintf(&b, "%s %s %x %v\n", topic, m.Key, m.Value, m.Headers)
			}
		}
		return b.String()
	}
	first := run()
	if len(first) < 1000 {
		t.Fatalf("too little output to compare: %q", first)
	}
	for i := 1; i < 50; i++ {
		if got := run(); got != first {
			t.Fatalf("run %d differs from run 0", i)
		}
	}
}
