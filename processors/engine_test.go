package processors_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/abacus-stream/abacus/deadletter"
	"github.com/abacus-stream/abacus/internal/engine"
	"github.com/abacus-stream/abacus/internal/localtable"
	"github.com/abacus-stream/abacus/internal/plan"
	"github.com/abacus-stream/abacus/internal/testenv"
	"github.com/abacus-stream/abacus/processors"
	"github.com/abacus-stream/abacus/state"
	"github.com/abacus-stream/abacus/topology"
	"github.com/abacus-stream/abacus/windows"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The engine's guarantees, each as a scenario run on the in-memory driver, on kfake and on the
// real broker (runner_test.go): one final per window whatever restarts happen, idleness that only
// events end, results independent of how inputs interleave, and bad records or user code that
// never stop the processor.

type ev struct {
	Entity string  `json:"e"`
	TS     int64   `json:"ts"`
	V      float64 `json:"v"`
	Type   string  `json:"type,omitempty"`
}

var (
	// base is an event time far from the tests' wall clock, which only ticks and idle timeouts use.
	base  = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	start = base.Add(time.Hour) // the wall clock when a scenario begins
)

func ms(d time.Duration) int64 { return base.Add(d).UnixMilli() }

func (e ev) json() []byte {
	b, _ := json.Marshal(e)
	return b
}

func source(b *topology.Builder, topic string) *topology.Source[ev] {
	return topology.NewSource(b, topic, topology.JSON[ev](),
		func(e ev) string { return e.Entity },
		func(e ev) time.Time { return time.UnixMilli(e.TS) }).
		EventType(func(e ev) string { return e.Type })
}

func build(t *testing.T, b *topology.Builder) *topology.Topology {
	t.Helper()
	topo, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	return topo
}

// send produces an event with its record timestamp at the event time (as a producer does when it
// sends as the event happens).
func send(r runner, topic string, e ev) {
	r.send(topic, e.Entity, e.json(), time.UnixMilli(e.TS))
}

// TestIdleNotStarvedByRecordsThatDoNotAdvance (DESIGN invariant 10): a partition that keeps receiving
// records that move no stream time (undecodable, late, from the future, of a type no set takes,
// keyed wrongly) is idle all the same: its quiet entity's window closes after the idle timeout,
// while that traffic goes on.
func TestIdleNotStarvedByRecordsThatDoNotAdvance(t *testing.T) {
	eachRunner(t, func(t *testing.T) (*topology.Topology, runnerOptions) {
		name := uniqueTopology(t, "idle")
		b := topology.New(name)
		source(b, name+"-in").Aggregate("m", windows.Tumbling(time.Minute)).Grace(0).Types("reading").Count("n")
		return build(t, b), runnerOptions{partitions: 1, start: start, idleTimeout: 4 * time.Second, sources: []string{name + "-in"}}
	}, func(t *testing.T, r runner, topo *topology.Topology) {
		in := topo.SourceTopics()[0]
		send(r, in, ev{Entity: "quiet", TS: ms(10 * time.Second), Type: "reading"})
		send(r, in, ev{Entity: "busy", TS: ms(30 * time.Second), Type: "reading"})
		for i := range 8 { // 8 × 2 s of traffic, twice the idle timeout
			r.advance(2 * time.Second)
			switch i % 4 {
			case 0:
				r.send(in, "busy", []byte("{not json"), r.now())
			case 1:
				send(r, in, ev{Entity: "busy", TS: ms(-time.Hour), Type: "reading"}) // late
			case 2:
				send(r, in, ev{Entity: "busy", TS: ms(10 * time.Minute), Type: "other"}) // no set takes it
			case 3:
				r.send(in, "busy", ev{Entity: "busy", TS: ms(time.Hour), Type: "reading"}.json(), base) // from the future
			}
		}
		if got := oneFinal(t, r, "m", "quiet", base).Float("n"); got != 1 {
			t.Fatalf("count %v, want 1", got)
		}
	})
}

// TestOneFinalAcrossRestarts (DESIGN invariant 10): stream time that moved by an idle advance, or
// past events of a type no set takes, is the stream time a restarted partition resumes from; a
// straggler for a window already final is late, and the window keeps its one final total.
func TestOneFinalAcrossRestarts(t *testing.T) {
	for _, lose := range []bool{false, true} {
		t.Run(map[bool]string{false: "keep", true: "lose"}[lose], func(t *testing.T) {
			eachRunner(t, func(t *testing.T) (*topology.Topology, runnerOptions) {
				name := uniqueTopology(t, "restart")
				b := topology.New(name)
				source(b, name+"-in").Aggregate("m", windows.Tumbling(time.Minute)).Grace(0).Types("reading").Count("n")
				return build(t, b), runnerOptions{partitions: 2, start: start, idleTimeout: 4 * time.Second}
			}, func(t *testing.T, r runner, topo *topology.Topology) {
				in := topo.SourceTopics()[0]
				send(r, in, ev{Entity: "a", TS: ms(10 * time.Second), Type: "reading"})
				// An event no set takes, far ahead: it must not close the window.
				send(r, in, ev{Entity: "a", TS: ms(500 * time.Second), Type: "other"})
				if fs := finalsOf(r.finals(), "m", "a", base); len(fs) != 0 {
					t.Fatalf("a type no set takes closed the window: %v", fs)
				}
				r.advance(10 * time.Second) // idle: the window closes with one event
				if got := oneFinal(t, r, "m", "a", base).Float("n"); got != 1 {
					t.Fatalf("final count %v, want 1", got)
				}
				r.restart(lose)
				send(r, in, ev{Entity: "a", TS: ms(20 * time.Second), Type: "reading"}) // a straggler
				r.advance(10 * time.Second)
				if got := oneFinal(t, r, "m", "a", base).Float("n"); got != 1 {
					t.Fatalf("after restart the final count is %v, want 1", got)
				}
				if late := r.counter("abacus_processor_late_dropped_total"); late != 1 {
					t.Fatalf("late dropped %v, want the straggler", late)
				}
			})
		})
	}
}

// TestTwoSourcesIndependentOfInterleaving (DESIGN invariant 10): two sources, each in event-time
// order, read one whole topic before the other (the worst interleaving a catch-up can give): no
// event is late, and every window's final holds all its events.
func TestTwoSourcesIndependentOfInterleaving(t *testing.T) {
	const n = 30 // one event a minute, per source
	eachRunner(t, func(t *testing.T) (*topology.Topology, runnerOptions) {
		name := uniqueTopology(t, "two")
		b := topology.New(name)
		source(b, name+"-a").Aggregate("a", windows.Tumbling(time.Minute)).Grace(30*time.Second).Count("n").Sum("sum", "V")
		source(b, name+"-b").Aggregate("b", windows.Tumbling(time.Minute)).Grace(30*time.Second).Count("n").Sum("sum", "V")
		return build(t, b), runnerOptions{partitions: 1, start: start, idleTimeout: 4 * time.Second}
	}, func(t *testing.T, r runner, topo *topology.Topology) {
		for _, topic := range topo.SourceTopics() {
			for i := range n {
				send(r, topic, ev{Entity: "x", TS: ms(time.Duration(i)*time.Minute + 5*time.Second), V: float64(i)})
			}
		}
		r.advance(10 * time.Second)
		if late := r.counter("abacus_processor_late_dropped_total"); late != 0 {
			t.Fatalf("%v in-order events dropped as late", late)
		}
		for _, set := range []string{"a", "b"} {
			for i := range n {
				f := oneFinal(t, r, set, "x", base.Add(time.Duration(i)*time.Minute))
				if f.Float("n") != 1 || f.Float("sum") != float64(i) {
					t.Fatalf("window %d of %s: %s", i, set, f)
				}
			}
		}
	})
}

// TestLastAgreesAcrossWindowKinds (DESIGN invariant 10): among events at one event time, Last keeps
// the one applied last, in session windows as in tumbling ones.
func TestLastAgreesAcrossWindowKinds(t *testing.T) {
	eachRunner(t, func(t *testing.T) (*topology.Topology, runnerOptions) {
		name := uniqueTopology(t, "last")
		b := topology.New(name)
		src := source(b, name+"-in")
		src.Aggregate("tumbling", windows.Tumbling(time.Minute)).Grace(0).Last("last", "V")
		src.Aggregate("session", windows.Session(10*time.Second)).Grace(0).Last("last", "V")
		return build(t, b), runnerOptions{partitions: 1, start: start, idleTimeout: 4 * time.Second}
	}, func(t *testing.T, r runner, topo *topology.Topology) {
		in := topo.SourceTopics()[0]
		for _, v := range []float64{1, 2, 3} {
			send(r, in, ev{Entity: "s", TS: ms(5 * time.Second), V: v})
		}
		r.advance(10 * time.Second)
		tu := oneFinal(t, r, "tumbling", "s", base)
		se := oneFinal(t, r, "session", "s", base.Add(5*time.Second))
		if tu.Float("last") != 3 || se.Float("last") != 3 {
			t.Fatalf("last: tumbling %v, session %v, want 3 and 3", tu.Float("last"), se.Float("last"))
		}
	})
}

// TestIdleClosesEveryOpenWindow (DESIGN invariant 6): an idle partition's advance closes every
// window its entities hold open up to the wall clock at once, not one window per entity per tick:
// a quiet topic with hourly hopping windows would otherwise take sixty ticks to emit its last hour.
func TestIdleClosesEveryOpenWindow(t *testing.T) {
	eachRunner(t, func(t *testing.T) (*topology.Topology, runnerOptions) {
		name := uniqueTopology(t, "idleall")
		b := topology.New(name)
		src := source(b, name+"-in")
		src.Aggregate("hop", windows.Hopping(10*time.Minute, time.Minute)).Grace(0).Count("n")
		src.Aggregate("session", windows.Session(10*time.Second)).Grace(0).Count("n")
		return build(t, b), runnerOptions{partitions: 1, start: start, idleTimeout: 4 * time.Second}
	}, func(t *testing.T, r runner, topo *topology.Topology) {
		in := topo.SourceTopics()[0]
		send(r, in, ev{Entity: "q", TS: ms(5 * time.Second)})
		send(r, in, ev{Entity: "q", TS: ms(6 * time.Second)})
		r.advance(5 * time.Second) // the idle timeout and a tick or two past it
		for i := range 10 {
			oneFinal(t, r, "hop", "q", base.Add(time.Duration(i-9)*time.Minute)).Expect(t, map[string]float64{"n": 2})
		}
		oneFinal(t, r, "session", "q", base.Add(5*time.Second)).Expect(t, map[string]float64{"n": 2})
	})
}

// TestFutureJudgedByRecordTime (DESIGN invariants 1 and 7): an event is from the future when its time is
// ahead of its own record's timestamp by more than MaxFutureSkew, whatever the processor's clock
// says, so a replay next week judges it alike.
func TestFutureJudgedByRecordTime(t *testing.T) {
	eachRunner(t, func(t *testing.T) (*topology.Topology, runnerOptions) {
		name := uniqueTopology(t, "future")
		b := topology.New(name).MaxFutureSkew(5 * time.Minute)
		source(b, name+"-in").Aggregate("m", windows.Tumbling(time.Minute)).Grace(0).Count("n")
		// The processor's clock lies a week before the events: a clock rule would refuse them all.
		return build(t, b), runnerOptions{partitions: 1, start: base.Add(-7 * 24 * time.Hour), idleTimeout: 4 * time.Second}
	}, func(t *testing.T, r runner, topo *topology.Topology) {
		in := topo.SourceTopics()[0]
		r.send(in, "f", ev{Entity: "f", TS: ms(time.Second)}.json(), base)                        // on time
		r.send(in, "f", ev{Entity: "f", TS: ms(4 * time.Minute)}.json(), base)                    // within the skew
		r.send(in, "f", ev{Entity: "f", TS: ms(6 * time.Minute)}.json(), base)                    // from the future
		r.send(in, "f", ev{Entity: "f", TS: ms(4*time.Minute + time.Second)}.json(), time.Time{}) // no record time: not judged
		dls := r.deadLetters()
		if len(dls) != 1 || dls[0].Reason != deadletter.Future {
			t.Fatalf("dead letters %+v, want the one from the future", dls)
		}
		r.send(in, "f", ev{Entity: "f", TS: ms(10 * time.Minute)}.json(), base.Add(10*time.Minute)) // closes both windows
		oneFinal(t, r, "m", "f", base).Expect(t, map[string]float64{"n": 1})
		oneFinal(t, r, "m", "f", base.Add(4*time.Minute)).Expect(t, map[string]float64{"n": 2})
	})
}

// TestHoppingLateForSomeWindows (DESIGN invariants 7 and 10): a hopping event late for one of its windows
// and on time for another is applied to the open one and counted (and routed) late for the set.
func TestHoppingLateForSomeWindows(t *testing.T) {
	eachRunner(t, func(t *testing.T) (*topology.Topology, runnerOptions) {
		name := uniqueTopology(t, "hop")
		b := topology.New(name).LateTopic(name + "-late")
		source(b, name+"-in").Aggregate("h", windows.Hopping(2*time.Minute, time.Minute)).Grace(0).Count("n")
		return build(t, b), runnerOptions{partitions: 1, start: start, idleTimeout: 4 * time.Second}
	}, func(t *testing.T, r runner, topo *topology.Topology) {
		in := topo.SourceTopics()[0]
		send(r, in, ev{Entity: "h", TS: ms(2*time.Minute + 30*time.Second)}) // closes [0, 2m)
		// At 1m30s: in [0, 2m) (closed) and [1m, 3m) (open).
		send(r, in, ev{Entity: "h", TS: ms(90 * time.Second)})
		if late := r.counter("abacus_processor_late_routed_total"); late != 1 {
			t.Fatalf("late routed %v, want 1", late)
		}
		lt := r.late()
		if len(lt) != 1 || lt[0].Set != "h" || lt[0].Reason != deadletter.Late {
			t.Fatalf("late records %+v", lt)
		}
		r.advance(10 * time.Second)
		oneFinal(t, r, "h", "h", base.Add(time.Minute)).Expect(t, map[string]float64{"n": 2})
	})
}

// TestBadKeysDeadLettered (DESIGN invariants 7 and 12): an entity that is a key the state keeps for
// itself (goka's "__offset", a partition's tick key), an empty key and a key too long go to the
// dead-letter topic, and the processor goes on.
func TestBadKeysDeadLettered(t *testing.T) {
	eachRunner(t, func(t *testing.T) (*topology.Topology, runnerOptions) {
		name := uniqueTopology(t, "keys")
		b := topology.New(name).Limits(1<<20, 32)
		source(b, name+"-in").Aggregate("m", windows.Tumbling(time.Minute)).Grace(0).Count("n")
		return build(t, b), runnerOptions{partitions: 2, start: start, idleTimeout: 4 * time.Second}
	}, func(t *testing.T, r runner, topo *topology.Topology) {
		in := topo.SourceTopics()[0]
		long := strings.Repeat("x", 33)
		for _, k := range []string{"__offset", "abacus-tick-0", "abacus-tick-1", "", long} {
			send(r, in, ev{Entity: k, TS: ms(time.Second)})
		}
		send(r, in, ev{Entity: "ok", TS: ms(time.Second)})
		reasons := map[deadletter.Reason]int{}
		for _, d := range r.deadLetters() {
			reasons[d.Reason]++
		}
		if reasons[deadletter.ReservedKey] != 3 || reasons[deadletter.NoEntity] != 1 || reasons[deadletter.TooLarge] != 1 {
			t.Fatalf("dead letters by reason %v", reasons)
		}
		r.restart(false) // nothing poisoned the state
		r.advance(10 * time.Second)
		oneFinal(t, r, "m", "ok", base).Expect(t, map[string]float64{"n": 1})
	})
}

// panicky is a user-defined aggregation that panics on a value, as buggy user code does.
var panicky = topology.UserDefined[ev, float64]{
	Init: func() float64 { return 0 },
	Add: func(a float64, e ev, _ int64) float64 {
		if e.V < 0 {
			panic("negative value")
		}
		return a + e.V
	},
	Merge:  func(a, b float64) float64 { return a + b },
	Encode: func(a float64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(a)) },
	Decode: func(b []byte) (float64, error) {
		if len(b) != 8 {
			return 0, errors.New("bad sum")
		}
		return float64(binary.BigEndian.Uint64(b)), nil
	},
}

// TestUserCodePanicDeadLetters (DESIGN invariant 12): a panic in user code (an extractor, an
// aggregation) dead-letters the record with reason panic; the processor goes on, and a restart
// does not crash-loop on it.
func TestUserCodePanicDeadLetters(t *testing.T) {
	eachRunner(t, func(t *testing.T) (*topology.Topology, runnerOptions) {
		name := uniqueTopology(t, "panic")
		b := topology.New(name)
		src := topology.NewSource(b, name+"-in", topology.JSON[ev](),
			func(e ev) string {
				if e.Type == "boom" {
					panic("entity extractor: boom")
				}
				return e.Entity
			},
			func(e ev) time.Time { return time.UnixMilli(e.TS) })
		src.Aggregate("m", windows.Tumbling(time.Minute)).Grace(0).Count("n").Custom("sum", panicky)
		return build(t, b), runnerOptions{partitions: 1, start: start, idleTimeout: 4 * time.Second}
	}, func(t *testing.T, r runner, topo *topology.Topology) {
		in := topo.SourceTopics()[0]
		send(r, in, ev{Entity: "p", TS: ms(time.Second), V: 2})
		send(r, in, ev{Entity: "p", TS: ms(2 * time.Second), V: -1}) // the aggregation panics
		send(r, in, ev{Entity: "p", TS: ms(3 * time.Second), Type: "boom"})
		send(r, in, ev{Entity: "p", TS: ms(4 * time.Second), V: 3})
		dls := r.deadLetters()
		if len(dls) != 2 || dls[0].Reason != deadletter.Panic || !strings.Contains(dls[0].Detail, "negative value") ||
			dls[1].Reason != deadletter.Panic || !strings.Contains(dls[1].Detail, "boom") {
			t.Fatalf("dead letters %+v, want the two panics", dls)
		}
		r.restart(false)
		r.advance(10 * time.Second)
		f := oneFinal(t, r, "m", "p", base)
		if f.Float("n") != 2 {
			t.Fatalf("final %s, want the two good events only", f)
		}
		if got := r.counter("abacus_processor_user_code_panics_total"); got != 2 {
			t.Fatalf("panics counted %v, want 2", got)
		}
	})
}

// TestTopologyChangeKeepsState (DESIGN invariant 14): a new version of the topology that reorders its
// sets, removes one, adds one, and adds and removes aggregations keeps the state of what stays
// (state refers to sets and aggregations by name); a window open at the upgrade has no value of
// an aggregation added since (it missed the events before), and a set added gets no total of a
// window that started before; a set whose window changed is refused at start, with an error
// naming it.
func TestTopologyChangeKeepsState(t *testing.T) {
	var name string
	version := func(t *testing.T, v int) *topology.Topology {
		b := topology.New(name)
		src := source(b, name+"-in")
		switch v {
		case 1:
			src.Aggregate("a", windows.Tumbling(time.Minute)).Grace(0).Count("n").Max("max", "V")
			src.Aggregate("b", windows.Tumbling(time.Minute)).Grace(0).Sum("sum", "V")
			src.Aggregate("gone", windows.Tumbling(time.Minute)).Grace(0).Count("n")
		case 2:
			src.Aggregate("b", windows.Tumbling(time.Minute)).Grace(0).Sum("sum", "V")
			src.Aggregate("new", windows.Tumbling(time.Minute)).Grace(0).Count("n")
			src.Aggregate("a", windows.Tumbling(time.Minute)).Grace(0).Min("min", "V").Count("n")
		case 3:
			src.Aggregate("b", windows.Tumbling(time.Minute)).Grace(0).Sum("sum", "V")
			src.Aggregate("a", windows.Tumbling(2*time.Minute)).Grace(0).Count("n")
		}
		return build(t, b)
	}
	eachRunner(t, func(t *testing.T) (*topology.Topology, runnerOptions) {
		name = uniqueTopology(t, "upgrade")
		return version(t, 1), runnerOptions{partitions: 1, start: start, idleTimeout: 4 * time.Second}
	}, func(t *testing.T, r runner, topo *topology.Topology) {
		in := topo.SourceTopics()[0]
		send(r, in, ev{Entity: "u", TS: ms(10 * time.Second), V: 5})
		send(r, in, ev{Entity: "u", TS: ms(20 * time.Second), V: 7})
		if err := r.restartWith(version(t, 2), false); err != nil {
			t.Fatalf("version 2 refused: %v", err)
		}
		send(r, in, ev{Entity: "u", TS: ms(30 * time.Second), V: 6})
		send(r, in, ev{Entity: "u", TS: ms(2 * time.Minute), V: 1}) // closes the first minute
		a := oneFinal(t, r, "a", "u", base)
		a.Expect(t, map[string]float64{"n": 3})
		if _, ok := a.Values["min"]; ok {
			t.Fatalf("final %s: a min of the events after the upgrade only", a)
		}
		oneFinal(t, r, "b", "u", base).Expect(t, map[string]float64{"sum": 18})
		if fs := finalsOf(r.finals(), "new", "u", base); len(fs) != 0 {
			t.Fatalf("a set added while the window was open emitted %v (of part of its events)", fs)
		}
		if fs := finalsOf(r.finals(), "gone", "u", base); len(fs) != 0 {
			t.Fatalf("a removed set emitted %v", fs)
		}
		send(r, in, ev{Entity: "u", TS: ms(4 * time.Minute), V: 1}) // closes [2:00, 3:00)
		oneFinal(t, r, "a", "u", base.Add(2*time.Minute)).Expect(t, map[string]float64{"n": 1, "min": 1})
		oneFinal(t, r, "new", "u", base.Add(2*time.Minute)).Expect(t, map[string]float64{"n": 1})
		err := r.restartWith(version(t, 3), false)
		if err == nil || !strings.Contains(err.Error(), `aggregate set "a" changed its window`) {
			t.Fatalf("a changed window: %v, want a refusal naming set a", err)
		}
	})
}

// TestStorageFolderLocked (DESIGN invariant 5): a second processor on a storage folder another
// process uses is refused at start, naming the folder, instead of taking the first one's tables
// for a crashed run's and deleting them.
func TestStorageFolderLocked(t *testing.T) {
	brokers := kfakeBrokers(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	name := uniqueTopology(t, "lock")
	createTopic(ctx, t, brokers, name+"-in", 2)
	b := topology.New(name)
	source(b, name+"-in").Aggregate("m", windows.Tumbling(time.Minute)).Grace(0).Count("n")
	topo := build(t, b)
	storage := t.TempDir()
	first, err := processors.New(topo, processors.Config{Brokers: brokers, StoragePath: storage, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	firstCtx, stopFirst := context.WithCancel(ctx)
	firstDone := make(chan error, 1)
	go func() { firstDone <- first.Run(firstCtx) }()
	defer func() { stopFirst(); <-firstDone }()
	// The lock file appears when the first processor takes the lock; try the second only then,
	// so that a refusal cannot come from anything else.
	lockFile := filepath.Join(filepath.Dir(storage), "."+filepath.Base(storage)+".lock")
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(lockFile); err == nil {
			break
		}
		select {
		case err := <-firstDone:
			t.Fatalf("first processor stopped before taking the lock: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("first processor never took the storage lock")
		}
	}
	for {
		p, err := processors.New(topo, processors.Config{Brokers: brokers, StoragePath: storage, Logger: testLogger(t), Group: name + "-other"})
		if err != nil {
			t.Fatal(err)
		}
		runCtx, runCancel := context.WithTimeout(ctx, 10*time.Second)
		err = p.Run(runCtx)
		runCancel()
		if err != nil && strings.Contains(err.Error(), "is in use by another process") && strings.Contains(err.Error(), storage) {
			return
		}
		select {
		case ferr := <-firstDone:
			t.Fatalf("first processor stopped (%v); second one on the same folder: %v", ferr, err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("second processor on %s: %v, want a refusal naming the folder", storage, err)
		}
	}
}

// TestEntitiesDescribeLayoutOnlyAtFirst: an entity carries its topology layout's description only
// until its partition's record, which describes it once for all, is acknowledged. A new partition
// writes that record at once, not at its first tick (here a minute away), so that a fresh
// processor's table does not hold the description in every entity it writes in its first minute.
func TestEntitiesDescribeLayoutOnlyAtFirst(t *testing.T) {
	brokers := testenv.Kafka(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	name := uniqueTopology(t, "describe")
	createTopic(ctx, t, brokers, name+"-in", 1)
	b := topology.New(name)
	source(b, name+"-in").Aggregate("m", windows.Tumbling(time.Minute)).Grace(0).Count("n").Sum("s", "V")
	topo := build(t, b)
	storage := t.TempDir()
	reg := prometheus.NewRegistry()
	var logs testenv.SyncBuffer
	logger := slog.New(slog.NewTextHandler(io.MultiWriter(t.Output(), &logs), &slog.HandlerOptions{Level: slog.LevelDebug}))
	stop := runProcessor(t, topo, processors.Config{Brokers: brokers, StoragePath: storage, Logger: logger,
		Registerer: reg, IdleTimeout: 5 * time.Minute, TickInterval: time.Minute})
	waitIn := func(n float64) {
		t.Helper()
		for counter(t, reg, "abacus_processor_events_in_total") < n {
			if ctx.Err() != nil {
				t.Fatalf("processor took %v of %v events", counter(t, reg, "abacus_processor_events_in_total"), n)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	var ins []input
	ins = append(ins, input{key: "first", value: ev{Entity: "first", TS: ms(0), V: 1}.json()})
	produce(ctx, t, brokers, name+"-in", ins)
	waitIn(1)
	for !strings.Contains(logs.String(), "partition record describing the topology layout acknowledged") {
		if ctx.Err() != nil {
			t.Fatal("the partition's record was never acknowledged")
		}
		time.Sleep(20 * time.Millisecond)
	}
	ins = ins[:0]
	for i := range 50 {
		k := fmt.Sprintf("e%02d", i)
		ins = append(ins, input{key: k, value: ev{Entity: k, TS: ms(time.Second), V: 2}.json()})
	}
	produce(ctx, t, brokers, name+"-in", ins)
	waitIn(51)
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	tbl, err := localtable.Open(filepath.Join(storage, name+"-table.0"), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer tbl.Close()
	it, err := tbl.Iterator()
	if err != nil {
		t.Fatal(err)
	}
	defer it.Release()
	entities, described := 0, []string{}
	for it.Next() {
		k := string(it.Key())
		if strings.HasPrefix(k, "abacus-tick-") {
			continue
		}
		v, _ := it.Value()
		e, err := state.Decode(append([]byte(nil), v...))
		if err != nil {
			t.Fatalf("%s: %v", k, err)
		}
		entities++
		if d, _ := e.Described(); d != nil {
			described = append(described, k)
		}
	}
	if entities != 51 {
		t.Fatalf("%d entities in the table, want 51", entities)
	}
	if len(described) > 1 || (len(described) == 1 && described[0] != "first") {
		t.Fatalf("entities written after the partition's record carry the layout: %v", described)
	}
}

// TestLayoutDescribedByOneEntity: until a partition's record describing its topology layout is
// acknowledged, one entity (the first written) describes it for all. A changelog that holds
// entities under an old layout, only the last of them (in key order) describing it, and no
// record (a crash before the record landed) is read by a new version of the topology: every
// entity is converted, none refused.
func TestLayoutDescribedByOneEntity(t *testing.T) {
	name := uniqueTopology(t, "describer")
	version := func(v int) *topology.Topology {
		b := topology.New(name)
		src := source(b, name+"-in")
		if v == 1 {
			src.Aggregate("a", windows.Tumbling(time.Minute)).Grace(0).Count("n").Sum("s", "V")
		} else {
			src.Aggregate("new", windows.Tumbling(time.Minute)).Grace(0).Count("n")
			src.Aggregate("a", windows.Tumbling(time.Minute)).Grace(0).Sum("s", "V").Count("n")
		}
		return build(t, b)
	}
	v1 := version(1)
	brokers := testenv.Kafka(t)
	r := newKafkaRunner(t, brokers, v1, runnerOptions{partitions: 1, start: start, idleTimeout: time.Minute})
	in := name + "-in"
	keys := []string{"k1", "k2", "k3"}
	for _, k := range keys {
		send(r, in, ev{Entity: k, TS: ms(10 * time.Second), V: 2})
	}
	// The changelog as a crash before the record landed leaves it: the record gone, and only k3
	// describing the layout its entities follow.
	r.beforeRestart = func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		tbl, err := localtable.Open(filepath.Join(r.storage, name+"-table.0"), 0)
		if err != nil {
			t.Fatal(err)
		}
		layout := plan.Of(v1).Layout()
		var recs []*kgo.Record
		for _, k := range keys {
			v, err := tbl.Get(k)
			if err != nil || v == nil {
				t.Fatalf("entity %s in the table: %q, %v", k, v, err)
			}
			e, err := state.Decode(append([]byte(nil), v...))
			if err != nil {
				t.Fatal(err)
			}
			e.Undescribe()
			if k == keys[len(keys)-1] {
				e.LayoutDesc = &layout
			}
			recs = append(recs, &kgo.Record{Topic: name + "-table", Partition: 0, Key: []byte(k), Value: e.Append(nil)})
		}
		for _, k := range engine.TickKeys(1) {
			recs = append(recs, &kgo.Record{Topic: name + "-table", Partition: 0, Key: []byte(k)})
		}
		tbl.Close()
		cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.restartWith(version(2), true); err != nil {
		t.Fatalf("version 2 refused the changelog: %v", err)
	}
	send(r, in, ev{Entity: "k1", TS: ms(20 * time.Second), V: 3})
	send(r, in, ev{Entity: "k1", TS: ms(2 * time.Minute), V: 1}) // closes the first minute
	oneFinal(t, r, "a", "k1", base).Expect(t, map[string]float64{"n": 2, "s": 5})
}

// TestMissingSourceTopic: a processor whose source topic does not exist waits a moment for it (a
// topic just created reaches every broker's metadata a little later), starts when it appears,
// and otherwise fails naming the topic and how to create it.
func TestMissingSourceTopic(t *testing.T) {
	brokers := kfakeBrokers(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var logs testenv.SyncBuffer
	newProc := func(name string) *processors.Processor {
		b := topology.New(name)
		source(b, name+"-in").Aggregate("m", windows.Tumbling(time.Minute)).Grace(0).Count("n")
		logger := slog.New(slog.NewTextHandler(io.MultiWriter(t.Output(), &logs), &slog.HandlerOptions{Level: slog.LevelInfo}))
		p, err := processors.New(build(t, b), processors.Config{Brokers: brokers, StoragePath: t.TempDir(), Logger: logger})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}

	name := uniqueTopology(t, "nosource")
	start := time.Now()
	err := newProc(name).Run(ctx)
	if err == nil || !strings.Contains(err.Error(), "source topic "+name+"-in does not exist") || !strings.Contains(err.Error(), "abacus admin create") {
		t.Fatalf("Run with a missing source returned %v, want an error naming the topic and abacus admin create", err)
	}
	t.Logf("refused after %v: %v", time.Since(start).Round(time.Millisecond), err)

	// Created while the processor waits: it starts.
	name = uniqueTopology(t, "latesource")
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	p := newProc(name)
	logs.Reset()
	go func() { done <- p.Run(runCtx) }()
	for !strings.Contains(logs.String(), "source topic "+name+"-in does not exist") { // it waits for it
		select {
		case err := <-done:
			t.Fatalf("processor stopped before it waited for its source: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	createTopic(ctx, t, brokers, name+"-in", 2)
	deadline := time.Now().Add(30 * time.Second)
	for p.Status().Partitions == 0 {
		select {
		case err := <-done:
			t.Fatalf("processor stopped although its source appeared within the grace: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("processor never took the partitions of its late source")
		}
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("stop: %v", err)
	}
}
