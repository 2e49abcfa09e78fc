package abacustest

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/abacus-stream/abacus/topology"
	"github.com/abacus-stream/abacus/windows"
)

// TestLateRecordsSentDurably: an event late for one set and applied to another is fenced by the
// entity's state write, so a replay after a crash skips it; its late records must therefore be in
// Kafka before that write, and the engine sends them through engine.DurableSender (the processor
// waits for Kafka's acknowledgement). A record late for every set writes no state and goes out
// with the others.
func TestLateRecordsSentDurably(t *testing.T) {
	topo := strictAndLenient(t, "durable")
	const t0 = 1_767_225_600_000 // a minute boundary
	d := New(t, topo, Options{Start: time.UnixMilli(t0)})
	d.Pipe("in", "a", tsEvent{TS: t0 + 1000})
	d.Pipe("in", "a", tsEvent{TS: t0 + 65_000})
	// Stream time 65 s: 50 s is late for strict [0, 60 s) and on time for lenient (grace 30 s).
	d.Pipe("in", "a", tsEvent{TS: t0 + 50_000})
	if n := len(d.Messages("durable-late")); n != 1 || d.durable != 1 {
		t.Fatalf("after an event late for one set and applied to the other: %d late records, %d sent durably; want 1 and 1", n, d.durable)
	}
	// Stream time 100 s: 20 s is late for both (lenient [0, 60 s) closed at 90 s).
	d.Pipe("in", "a", tsEvent{TS: t0 + 100_000})
	d.Pipe("in", "a", tsEvent{TS: t0 + 20_000})
	if n := len(d.Messages("durable-late")); n != 3 || d.durable != 1 {
		t.Fatalf("after an event late for both sets: %d late records, %d sent durably; want 3 and still 1", n, d.durable)
	}
}

// TestPendingLateResentAfterCrash (DESIGN invariant 13): an event late for every window writes no
// state; the next applied event of its entity fences it. Kafka acknowledges messages to different
// brokers in any order, so a crash can keep that state write and lose the late record: the replay
// then finds the late event below the fence. The write lists it as pending, and the replay sends
// its late record again. Acknowledgements lag here far behind, so nothing counts as done.
func TestPendingLateResentAfterCrash(t *testing.T) {
	b := topology.New("pending")
	b.LateTopic("pending-late")
	topology.NewSource(b, "in", topology.JSON[tsEvent](), func(tsEvent) string { return "a" },
		func(e tsEvent) time.Time { return time.UnixMilli(e.TS) }).
		Aggregate("m", windows.Tumbling(time.Minute)).Grace(0).Count("n")
	topo, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	const t0 = 1_767_225_600_000 // a minute boundary
	for _, lose := range []bool{false, true} {
		d := New(t, topo, Options{Start: time.UnixMilli(t0), Partitions: 1, AckLag: 1000})
		d.Pipe("in", "a", tsEvent{TS: t0 + 10_000})
		d.Pipe("in", "a", tsEvent{TS: t0 + 70_000}) // closes [0, 60 s)
		d.Pipe("in", "a", tsEvent{TS: t0 + 20_000}) // offset 2: late for every window
		d.Pipe("in", "a", tsEvent{TS: t0 + 80_000}) // offset 3: applied, its write fences offset 2
		if n := len(d.Late()); n != 1 {
			t.Fatalf("%d late records before the crash, want 1", n)
		}
		// The crash: Kafka kept the state write of offset 3 and lost the late record of offset 2.
		kept := d.out[:0]
		for _, m := range d.out {
			if m.Topic != "pending-late" {
				kept = append(kept, m)
			}
		}
		d.out = kept
		d.done["in"][0] = d.done["in"][0][:2] // and the group had committed offsets 0 and 1 only
		d.Restart(lose)
		d.Redeliver("in", 0, 2)
		late := d.Late()
		if len(late) != 1 || late[0].Source.Offset != 2 {
			t.Fatalf("lose storage %v: after the replay, late records %+v; want the one of offset 2", lose, late)
		}
		if f := d.Final("m", "a", time.UnixMilli(t0)); f.Float("n") != 1 {
			t.Fatalf("final %s, want n 1", f)
		}
	}
}

// TestFailThatReturnsLosesNothing: a late record that Kafka refuses stops the processor before
// the event's state write. goka's Fail returns, rather than panics, once its processor is
// stopping (another partition failed a moment before, as in TestClusterTwoBrokersDown); the
// engine must still leave the callback as failed, or goka commits the record as processed and a
// restart skips it. Here the record stays uncommitted, and the restarted processor applies the
// event once and writes its late record.
func TestFailThatReturnsLosesNothing(t *testing.T) {
	topo := strictAndLenient(t, "failing")
	const t0 = 1_767_225_600_000 // a minute boundary
	var stopped error
	d := New(t, topo, Options{Start: time.UnixMilli(t0), Partitions: 1, OnFail: func(err error) { stopped = err }})
	d.Pipe("in", "a", tsEvent{TS: t0 + 1000})
	d.Pipe("in", "a", tsEvent{TS: t0 + 65_000})
	d.failReturns, d.durableErr = true, errors.New("dial tcp 127.0.0.1:19193: connect: connection refused")
	d.Pipe("in", "a", tsEvent{TS: t0 + 50_000}) // late for strict, applied to lenient: its late record first
	if stopped == nil || !strings.Contains(stopped.Error(), "connection refused") {
		t.Fatalf("the processor did not stop on the refused late record: %v", stopped)
	}
	if c := d.committed("in", 0); c != 2 {
		t.Fatalf("the group would resume from offset %d, want 2: the record whose writes failed must not count as processed", c)
	}
	d.failReturns, d.durableErr = false, nil
	d.Restart(true)
	d.Pipe("in", "a", tsEvent{TS: t0 + 200_000}) // closes [0, 60 s) for both sets
	if got := d.Final("lenient", "a", time.UnixMilli(t0)).Values["n"].Int; got != 2 {
		t.Errorf("lenient [0, 60 s) counted %d events, want 2: the event at 50 s is lost", got)
	}
	if n := len(d.Late()); n != 1 {
		t.Errorf("%d late records, want 1 (the event at 50 s, for strict)", n)
	}
}

// tsEvent is the events of strictAndLenient's topology.
type tsEvent struct {
	TS int64 `json:"ts"`
}

// strictAndLenient is a topology named name whose one entity's events go to two sets of one-minute
// windows, one with no grace and one with 30 s, with a late topic: an event can be late for the
// first and applied to the second.
func strictAndLenient(t *testing.T, name string) *topology.Topology {
	t.Helper()
	b := topology.New(name)
	b.LateTopic(name + "-late")
	src := topology.NewSource(b, "in", topology.JSON[tsEvent](), func(tsEvent) string { return "a" },
		func(e tsEvent) time.Time { return time.UnixMilli(e.TS) })
	src.Aggregate("strict", windows.Tumbling(time.Minute)).Grace(0).Count("n")
	src.Aggregate("lenient", windows.Tumbling(time.Minute)).Grace(30 * time.Second).Count("n")
	topo, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	return topo
}
