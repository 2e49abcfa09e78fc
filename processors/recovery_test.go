package processors_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/abacus-stream/abacus/deadletter"
	"github.com/abacus-stream/abacus/topology"
	"github.com/abacus-stream/abacus/windows"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The engine's second correctness pass (DESIGN invariants 7, 10, 12-14): windows that go on closing after a restart,
// user code and oversized records that never stop the processor, and topology upgrades that
// never reopen a window already final. Each scenario runs on the driver, kfake and the real
// broker (runner_test.go).

// TestWindowsCloseAfterRestart (DESIGN invariants 10 and 11): an event at 0:10 and one at 1:10 (which closes
// [0:00, 1:00)), a restart, then quiet: [1:00, 2:00) still gets its final by the idle timeout, as
// it does without the restart. After a restart the rebuilt schedule held the entity at its
// window already final, at or before stream time, so the idle tick found nothing to advance to.
func TestWindowsCloseAfterRestart(t *testing.T) {
	for _, lose := range []bool{false, true} {
		t.Run(map[bool]string{false: "keep", true: "lose"}[lose], func(t *testing.T) {
			eachRunner(t, func(t *testing.T) (*topology.Topology, runnerOptions) {
				name := uniqueTopology(t, "reclose")
				b := topology.New(name)
				source(b, name+"-in").Aggregate("m", windows.Tumbling(time.Minute)).Grace(0).Count("n")
				return build(t, b), runnerOptions{partitions: 1, start: start, idleTimeout: 4 * time.Second}
			}, func(t *testing.T, r runner, topo *topology.Topology) {
				in := topo.SourceTopics()[0]
				send(r, in, ev{Entity: "w", TS: ms(10 * time.Second)})
				send(r, in, ev{Entity: "w", TS: ms(70 * time.Second)})
				oneFinal(t, r, "m", "w", base)
				r.restart(lose)
				r.advance(10 * time.Second) // quiet for more than the idle timeout
				if got := oneFinal(t, r, "m", "w", base.Add(time.Minute)).Float("n"); got != 1 {
					t.Fatalf("final of [1:00, 2:00) counts %v, want 1", got)
				}
				if got := oneFinal(t, r, "m", "w", base).Float("n"); got != 1 {
					t.Fatalf("final of [0:00, 1:00) counts %v, want 1", got)
				}
			})
		})
	}
}

// failingDecode is a custom count whose Decode refuses the state it wrote at 2: the window's
// state can no more be read, as after a change of the user's encoding.
var failingDecode = topology.UserDefined[ev, int]{
	Init:   func() int { return 0 },
	Add:    func(n int, _ ev, _ int64) int { return n + 1 },
	Merge:  func(a, b int) int { return a + b },
	Encode: func(n int) []byte { return []byte(strconv.Itoa(n)) },
	Decode: func(b []byte) (int, error) {
		if string(b) == "2" {
			return 0, errors.New("cannot read 2")
		}
		return strconv.Atoi(string(b))
	},
}

// TestUserDecodeErrorDeadLetters (DESIGN invariant 12): an aggregation whose Decode fails on a
// window's state, when an event is applied to it, dead-letters that event with reason user-error
// and does not stop the processor; other windows and entities go on. At the window's close the
// same failure dead-letters the window's final, with the set's name.
func TestUserDecodeErrorDeadLetters(t *testing.T) {
	eachRunner(t, func(t *testing.T) (*topology.Topology, runnerOptions) {
		name := uniqueTopology(t, "usererr")
		b := topology.New(name)
		source(b, name+"-in").Aggregate("m", windows.Tumbling(time.Minute)).Grace(0).Custom("c", failingDecode)
		return build(t, b), runnerOptions{partitions: 1, start: start, idleTimeout: 4 * time.Second}
	}, func(t *testing.T, r runner, topo *topology.Topology) {
		in := topo.SourceTopics()[0]
		for i := range 3 { // the third finds the state "2"
			send(r, in, ev{Entity: "bad", TS: ms(time.Duration(i+1) * time.Second)})
		}
		send(r, in, ev{Entity: "good", TS: ms(5 * time.Second)})
		send(r, in, ev{Entity: "good", TS: ms(70 * time.Second)}) // closes the first minute
		var atApply, atClose []deadletter.Record
		for _, dl := range r.deadLetters() {
			switch {
			case dl.Reason != deadletter.UserError:
				t.Fatalf("dead letter %+v, want only user errors", dl)
			case dl.Source.Topic == in:
				atApply = append(atApply, dl)
			default:
				atClose = append(atClose, dl)
			}
		}
		if len(atApply) != 1 || atApply[0].Source.Offset != 2 || !strings.Contains(atApply[0].Detail, "cannot read 2") {
			t.Fatalf("dead letters of events %+v, want the record at offset 2 with the aggregation's error", atApply)
		}
		if len(atClose) != 1 || atClose[0].Set != "m" || string(atClose[0].Key) != "bad" || !strings.Contains(atClose[0].Detail, "final total") {
			t.Fatalf("dead letters of finals %+v, want the final of bad's window of set m", atClose)
		}
		if got := oneFinal(t, r, "m", "good", base); string(got.Values["c"].Bytes) != "1" {
			t.Fatalf("final of good %s, want c 1", got)
		}
		send(r, in, ev{Entity: "bad", TS: ms(80 * time.Second)}) // the processor still runs
		send(r, in, ev{Entity: "good", TS: ms(130 * time.Second)})
		if got := oneFinal(t, r, "m", "bad", base.Add(time.Minute)); string(got.Values["c"].Bytes) != "1" {
			t.Fatalf("final of bad's second minute %s, want c 1", got)
		}
	})
}

// TestGraceRaiseKeepsFinals (DESIGN invariant 14): a new build of the topology raises a set's grace.
// Windows that had their final under the old grace stay final: a straggler inside the new grace is
// late, and no second final is emitted. A window not final at the upgrade follows the new grace.
func TestGraceRaiseKeepsFinals(t *testing.T) {
	var name string
	version := func(t *testing.T, grace time.Duration) *topology.Topology {
		b := topology.New(name)
		source(b, name+"-in").Aggregate("m", windows.Tumbling(time.Minute)).Grace(grace).Count("n")
		return build(t, b)
	}
	for _, lose := range []bool{false, true} {
		t.Run(map[bool]string{false: "keep", true: "lose"}[lose], func(t *testing.T) {
			eachRunner(t, func(t *testing.T) (*topology.Topology, runnerOptions) {
				name = uniqueTopology(t, "grace")
				return version(t, 0), runnerOptions{partitions: 1, start: start, idleTimeout: 4 * time.Second}
			}, func(t *testing.T, r runner, topo *topology.Topology) {
				in := topo.SourceTopics()[0]
				send(r, in, ev{Entity: "g", TS: ms(10 * time.Second)})
				send(r, in, ev{Entity: "g", TS: ms(80 * time.Second)}) // [0, 1m) final; [1m, 2m) open
				oneFinal(t, r, "m", "g", base)
				if err := r.restartWith(version(t, 5*time.Minute), lose); err != nil {
					t.Fatalf("grace raised: refused: %v", err)
				}
				send(r, in, ev{Entity: "g", TS: ms(150 * time.Second)}) // [1m, 2m) closes at 7m now
				send(r, in, ev{Entity: "g", TS: ms(20 * time.Second)})  // inside the new grace, but final
				send(r, in, ev{Entity: "g", TS: ms(90 * time.Second)})  // inside the new grace, not final
				send(r, in, ev{Entity: "g", TS: ms(10 * time.Minute)})  // closes [1m, 2m) and [2m, 3m)
				if got := oneFinal(t, r, "m", "g", base).Float("n"); got != 1 {
					t.Fatalf("final of [0, 1m) counts %v, want 1: a window already final took a straggler", got)
				}
				if got := oneFinal(t, r, "m", "g", base.Add(time.Minute)).Float("n"); got != 2 {
					t.Fatalf("final of [1m, 2m) counts %v, want 2: it was open at the upgrade, and takes the new grace", got)
				}
				if got := r.counter("abacus_processor_late_dropped_total"); got != 1 {
					t.Fatalf("late events %v, want 1 (the straggler for the final window)", got)
				}
			})
		})
	}
}

// TestAggregationKindChangeRefused (DESIGN invariant 14): an aggregation whose kind changed under the
// same name (count to sum here; the driver tests the others) is refused at start, naming the set
// and the aggregation, as a changed window is: reading one kind's state as another stopped the
// processor or emitted garbage.
func TestAggregationKindChangeRefused(t *testing.T) {
	var name string
	version := func(t *testing.T, sum bool) *topology.Topology {
		b := topology.New(name)
		set := source(b, name+"-in").Aggregate("m", windows.Tumbling(time.Minute)).Grace(0).Max("top", "V")
		if sum {
			set.Sum("x", "V")
		} else {
			set.Count("x")
		}
		return build(t, b)
	}
	eachRunner(t, func(t *testing.T) (*topology.Topology, runnerOptions) {
		name = uniqueTopology(t, "kind")
		return version(t, false), runnerOptions{partitions: 1, start: start, idleTimeout: 4 * time.Second}
	}, func(t *testing.T, r runner, topo *topology.Topology) {
		in := topo.SourceTopics()[0]
		send(r, in, ev{Entity: "k", TS: ms(10 * time.Second), V: 6})
		r.advance(time.Second) // the partition's record holds the layout
		err := r.restartWith(version(t, true), false)
		if err == nil || !strings.Contains(err.Error(), `aggregation "x" of set "m" changed its kind from count to sum`) {
			t.Fatalf("count changed to sum: %v, want a refusal naming set m and aggregation x", err)
		}
	})
}

// keepType is a custom aggregation that keeps the last event's Type: a way to give an entity as
// much state as a test wants.
var keepType = topology.UserDefined[ev, string]{
	Init:   func() string { return "" },
	Add:    func(_ string, e ev, _ int64) string { return e.Type },
	Merge:  func(a, b string) string { return a + b },
	Encode: func(s string) []byte { return []byte(s) },
	Decode: func(b []byte) (string, error) { return string(b), nil },
}

// TestOversizedNeverStops (DESIGN invariants 7 and 13): an undecodable record just under Kafka's
// default 1 MB message limit, whose dead letter with its headers would be over it, and an event
// of 200 kB in ten hopping windows, whose entity's state would be 2 MB, are both dead-lettered
// (the first cut to fit, the second as too large, naming the limit), and the processor goes on:
// before, its producer's write failed, the processor stopped, and a restart skipped the record.
func TestOversizedNeverStops(t *testing.T) {
	eachRunner(t, func(t *testing.T) (*topology.Topology, runnerOptions) {
		name := uniqueTopology(t, "oversized")
		b := topology.New(name)
		source(b, name+"-in").Aggregate("hop", windows.Hopping(10*time.Minute, time.Minute)).Grace(0).
			Count("n").Custom("last", keepType)
		return build(t, b), runnerOptions{partitions: 1, start: start, idleTimeout: 4 * time.Second}
	}, func(t *testing.T, r runner, topo *topology.Topology) {
		in := topo.SourceTopics()[0]
		send(r, in, ev{Entity: "o", TS: ms(1 * time.Second), Type: "small"})
		nearly := append([]byte("{not json"), strings.Repeat("z", 990_000)...)
		r.send(in, "o", nearly, base)                                                             // offset 1
		send(r, in, ev{Entity: "o", TS: ms(2 * time.Second), Type: strings.Repeat("x", 200_000)}) // offset 2
		send(r, in, ev{Entity: "o", TS: ms(3 * time.Second), Type: "small"})
		send(r, in, ev{Entity: "o", TS: ms(20 * time.Minute)})
		if got := oneFinal(t, r, "hop", "o", base.Add(-9*time.Minute)).Float("n"); got != 2 {
			t.Fatalf("final count %v, want the two small events", got)
		}
		dls := map[int64]deadletter.Record{}
		for _, dl := range r.deadLetters() {
			dls[dl.Source.Offset] = dl
		}
		if dl, ok := dls[1]; !ok || dl.Reason != deadletter.Undecodable || dl.ValueBytes != len(nearly) || len(dl.Value) >= len(nearly) {
			t.Fatalf("dead letter of the undecodable record: %+v (found %v), want it cut, with its length", dl.Source, ok)
		}
		if dl, ok := dls[2]; !ok || dl.Reason != deadletter.TooLarge || !strings.Contains(dl.Detail, "limit of") {
			t.Fatalf("dead letter of the 200 kB event: %v %q (found %v), want too-large naming the limit", dl.Reason, dl.Detail, ok)
		}
		if len(dls) != 2 {
			t.Fatalf("dead letters at offsets %v, want 1 and 2", dls)
		}
	})
}

// TestSetAsideKeepsRecordTime (DESIGN invariant 12): a dead letter or late record names its original
// record's timestamp (header abacus.timestamp), for a re-keyed event too, whose record the loop
// topic carried; and it is produced with the time it was written as its Kafka timestamp, by which
// a restarted processor finds what it wrote (aside.go), and by which the topic's retention
// counts: a late record of an event a month old is not deleted at once.
func TestSetAsideKeepsRecordTime(t *testing.T) {
	for _, rekey := range []bool{false, true} {
		t.Run(map[bool]string{false: "keyed", true: "rekeyed"}[rekey], func(t *testing.T) {
			eachRunner(t, func(t *testing.T) (*topology.Topology, runnerOptions) {
				name := uniqueTopology(t, "asidetime")
				b := topology.New(name)
				b.LateTopic(name + "-late")
				src := source(b, name+"-in")
				if rekey {
					src.Repartition()
				}
				src.Aggregate("m", windows.Tumbling(time.Minute)).Grace(0).Count("n")
				return build(t, b), runnerOptions{partitions: 1, start: start, idleTimeout: 4 * time.Second}
			}, func(t *testing.T, r runner, topo *topology.Topology) {
				in := topo.SourceTopics()[0]
				began := time.Now()
				send(r, in, ev{Entity: "s", TS: ms(70 * time.Second)})
				lateAt := base.Add(-42 * time.Second)
				r.send(in, "s", ev{Entity: "s", TS: ms(10 * time.Second)}.json(), lateAt) // late
				badAt := base.Add(-17 * time.Second)
				r.send(in, "s", []byte("{not json"), badAt)
				// The header that names the original timestamp, on every runner.
				if l := awaited(1, r.late); len(l) != 1 || !l[0].Timestamp.Equal(lateAt) {
					t.Fatalf("late records %+v, want one naming its record's timestamp %v", l, lateAt)
				}
				if d := awaited(1, r.deadLetters); len(d) != 1 || !d[0].Timestamp.Equal(badAt) {
					t.Fatalf("dead letters %+v, want one naming its record's timestamp %v", d, badAt)
				}
				kr, ok := r.(*kafkaRunner)
				if !ok {
					return // the in-memory driver keeps no Kafka timestamps
				}
				lates, dls := kr.read(topo.LateTopic()), kr.read(topo.DeadLetterTopic())
				written := func(recs []*kgo.Record) bool {
					return len(recs) == 1 && !recs[0].Timestamp.Before(began.Truncate(time.Millisecond)) && !recs[0].Timestamp.After(time.Now())
				}
				if !written(lates) {
					t.Fatalf("late records %d at %v; want one at the time it was written (after %v)", len(lates), timestamps(lates), began)
				}
				if !written(dls) {
					t.Fatalf("dead letters %d at %v; want one at the time it was written (after %v)", len(dls), timestamps(dls), began)
				}
			})
		})
	}
}

func timestamps(recs []*kgo.Record) []time.Time {
	var out []time.Time
	for _, r := range recs {
		out = append(out, r.Timestamp)
	}
	return out
}

// TestStateLeavesAfterRestart (invariant 11): a restart right after the events, before the
// partition's record says they are done, keeping the local table or losing it, and then no
// record ever again: once every window closed and retention passed, every entity leaves the
// table. The restarted processor learns from the group's committed offsets (engine.Engine.Resumed) that
// the records its entities' fences name are done; before, the entities stayed for good.
func TestStateLeavesAfterRestart(t *testing.T) {
	for _, lose := range []bool{false, true} {
		t.Run(map[bool]string{false: "keep", true: "lose"}[lose], func(t *testing.T) {
			eachRunner(t, func(t *testing.T) (*topology.Topology, runnerOptions) {
				name := uniqueTopology(t, "leave")
				b := topology.New(name)
				source(b, name+"-in").Aggregate("m", windows.Tumbling(time.Minute)).Grace(0).Count("n")
				return build(t, b), runnerOptions{partitions: 2, start: start, idleTimeout: 4 * time.Second}
			}, func(t *testing.T, r runner, topo *topology.Topology) {
				in := topo.SourceTopics()[0]
				for _, e := range []string{"a", "b", "c", "d", "e", "f"} {
					send(r, in, ev{Entity: e, TS: ms(10 * time.Second)})
				}
				if _, onKafka := r.(*kafkaRunner); onKafka && r.gauge("abacus_processor_state_bytes") <= 0 {
					t.Fatal("abacus_processor_state_bytes is 0 with six entities in the tables")
				}
				r.restart(lose)
				for range 4 { // idle: the windows close, their finals go out, retention passes
					r.advance(time.Minute)
				}
				if got := oneFinal(t, r, "m", "a", base).Float("n"); got != 1 {
					t.Fatalf("final of a counts %v, want 1", got)
				}
				if n := r.gauge("abacus_processor_entities"); n != 0 {
					t.Fatalf("%v entities in the table after every window closed and retention passed, want 0", n)
				}
			})
		})
	}
}
