package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/abacus-stream/abacus/deadletter"
	"github.com/abacus-stream/abacus/internal/chaos/stream"
	"github.com/abacus-stream/abacus/schema"
)

// TestCheckDeadLetters: one dead letter per bad record passes; identical repeats are told from
// differing ones (and those differing only in header order); missing, unexpected and wrongly
// reasoned dead letters are counted.
func TestCheckDeadLetters(t *testing.T) {
	src := func(off int64) deadletter.Source { return deadletter.Source{Topic: "s", Partition: 0, Offset: off} }
	rec := func(off int64, reason, detail string, swap bool) *kgo.Record {
		hs := []kgo.RecordHeader{{Key: deadletter.HeaderReason, Value: []byte(reason)}, {Key: deadletter.HeaderDetail, Value: []byte(detail)}}
		if swap {
			hs[0], hs[1] = hs[1], hs[0]
		}
		return &kgo.Record{Key: []byte(src(off).String()), Value: []byte("v"), Headers: hs}
	}
	d := &deadLetters{bySource: map[string][]*kgo.Record{}}
	add := func(r *kgo.Record) {
		d.records++
		d.bySource[string(r.Key)] = append(d.bySource[string(r.Key)], r)
	}
	add(rec(1, "undecodable", "x", false))          // once
	add(rec(2, "future", "x", false))               // twice, identical
	add(rec(2, "future", "x", false))               //
	add(rec(3, "future", "x", false))               // twice, header order
	add(rec(3, "future", "x", true))                //
	add(rec(4, "undecodable", "processor", false))  // twice, different
	add(rec(4, "undecodable", "facts sink", false)) //
	add(rec(6, "undecodable", "x", false))          // not bad
	add(rec(7, "future", "x", false))               // wrong reason
	bad := map[deadletter.Source]deadletter.Reason{src(1): deadletter.Undecodable, src(2): deadletter.Future,
		src(3): deadletter.Future, src(4): deadletter.Undecodable, src(5): deadletter.Future, src(7): deadletter.Undecodable}
	c := checkDeadLetters(d, bad)
	if c.Once != 2 || c.Identical != 1 || c.Different != 2 || c.OrderOnly != 1 || c.Missing != 1 || c.Unexpected != 1 || c.WrongReason != 1 {
		t.Fatalf("%+v", c)
	}
	if c.Distinct[1] != 4 || c.Distinct[2] != 1 {
		t.Fatalf("distinct dead letters per bad record: %v", c.Distinct)
	}
}

// TestCheckLateRecords: one late record per late (event, set) passes; a missing one, an
// unexpected one (another set, or an event not late), a differing repeat and a record with the
// wrong content are each counted and fail the check; repeats whose timestamps differ are only
// counted.
func TestCheckLateRecords(t *testing.T) {
	src := func(off int64) deadletter.Source { return deadletter.Source{Topic: "s", Partition: 0, Offset: off} }
	value := func(off int64) []byte { return fmt.Appendf(nil, `{"e":"a","seq":%d}`, off) }
	late := map[deadletter.Source]stream.LateSource{}
	for off := int64(1); off <= 6; off++ {
		late[src(off)] = stream.LateSource{Key: "a", Value: stream.ValueHash(value(off)), Timestamp: 1000 + off, Sets: []string{"tumble"}}
	}
	ls := late[src(1)]
	ls.Sets = append(ls.Sets, "hop")
	late[src(1)] = ls
	rec := func(off int64, set string, ts int64) *kgo.Record {
		r := deadletter.Record{Source: src(off), Reason: deadletter.Late, Detail: "late for " + set, Set: set,
			Key: []byte("a"), Value: value(off), Timestamp: time.UnixMilli(1000 + off),
			Group: "proc", By: src(off)}
		var hs []kgo.RecordHeader
		for _, h := range r.RecordHeaders() {
			hs = append(hs, kgo.RecordHeader{Key: h.Key, Value: h.Value})
		}
		return &kgo.Record{Key: r.RecordKey(), Value: r.Value, Headers: hs, Timestamp: time.UnixMilli(ts)}
	}
	// check fills a late topic that is right in every way, lets change spoil it and checks it.
	check := func(change func(l *lateRecords)) lateCheck {
		l := newLateRecords()
		l.add(rec(1, "tumble", 1001))
		l.add(rec(1, "hop", 1001))
		for off := int64(2); off <= 6; off++ {
			l.add(rec(off, "tumble", 1000+off))
		}
		l.add(rec(2, "tumble", 1002)) // an identical repeat
		change(l)
		return checkLateRecords(l, late)
	}
	fails := func(c lateCheck) bool { return c.Missing+c.Unexpected+c.Different+c.WrongContent > 0 }

	c := check(func(*lateRecords) {})
	if fails(c) || c.Expected != 7 || c.Once != 6 || c.Identical != 1 || c.Found() != 7 || c.SourceTimestamp != 8 || c.TimestampDiffers != 0 {
		t.Fatalf("a right late topic: %+v", c)
	}
	c = check(func(l *lateRecords) { delete(l.byKey, lateKey{src(1).String(), "hop"}) })
	if !fails(c) || c.Missing != 1 || c.Found() != 6 {
		t.Fatalf("a missing late record: %+v", c)
	}
	c = check(func(l *lateRecords) {
		l.add(rec(2, "hop", 1002)) // late for the tumbling set only
		l.add(rec(7, "tumble", 1007))
	})
	if !fails(c) || c.Unexpected != 2 {
		t.Fatalf("unexpected late records: %+v", c)
	}
	c = check(func(l *lateRecords) {
		// Right in content (the detail's wording is not checked), but not the same record.
		r := rec(3, "tumble", 1003)
		for i := range r.Headers {
			if r.Headers[i].Key == deadletter.HeaderDetail {
				r.Headers[i].Value = []byte("another detail")
			}
		}
		l.add(r)
	})
	if !fails(c) || c.Different != 1 || c.WrongContent != 0 {
		t.Fatalf("a differing repeat: %+v", c)
	}
	c = check(func(l *lateRecords) {
		r := rec(3, "tumble", 1003)
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: "x", Value: []byte("y")})
		l.add(r)
	})
	if !fails(c) || c.Different != 1 || c.WrongContent != 1 {
		t.Fatalf("a repeat with a header of its own: %+v", c)
	}
	c = check(func(l *lateRecords) {
		r := rec(4, "tumble", 1004)
		r.Value = value(5)
		l.byKey[lateKey{src(4).String(), "tumble"}][0] = r
		r = rec(5, "tumble", 1005)
		r.Headers[0].Value = []byte(deadletter.Undecodable)
		l.byKey[lateKey{src(5).String(), "tumble"}][0] = r
	})
	if !fails(c) || c.WrongContent != 2 || c.Different != 0 {
		t.Fatalf("late records with the wrong content: %+v", c)
	}
	// The Kafka timestamp is the time of the write: a repeat may have another.
	c = check(func(l *lateRecords) { l.add(rec(6, "tumble", 99_999)) })
	if fails(c) || c.TimestampDiffers != 0 || c.Identical != 2 {
		t.Fatalf("a repeat written at another time: %+v", c)
	}
	// The timestamp it names is its source record's.
	c = check(func(l *lateRecords) {
		r := rec(6, "tumble", 1006)
		for i, h := range r.Headers {
			if h.Key == deadletter.HeaderTimestamp {
				r.Headers[i].Value = []byte("99999")
			}
		}
		l.add(r)
	})
	if !fails(c) || c.TimestampDiffers != 1 || c.SourceTimestamp != 8 {
		t.Fatalf("a repeat naming another timestamp: %+v", c)
	}
}

// TestPrintBySet: the by-set tally passes a table whose cells are the oracle's, counting its
// rollup cells; it fails the run for a rollup cell not right, naming the set, and when the oracle
// expects no rollup cell at all (a check that would vouch for nothing).
func TestPrintBySet(t *testing.T) {
	const buckets = 8
	base := int64(3000 * 60_000)
	o := stream.NewOracle(stream.Layout{AggregatesBuckets: buckets, FactsBuckets: buckets, Family: "d"})
	now := time.UnixMilli(base + 3*24*3600_000)
	v, _ := json.Marshal(stream.Event{Entity: "ent-001", Time: base + 1000, Kind: stream.TypeMeasurement, V: 3})
	o.Feed(stream.SourceRecord{Topic: "src", Offset: 0, Key: []byte("ent-001"), Value: v, Timestamp: now})
	flush := stream.FlushRecords(1, base+24*3600_000)[0]
	o.Feed(stream.SourceRecord{Topic: "src", Offset: 1, Key: flush.Key, Value: flush.Value, Timestamp: now})
	if o.Open() != 0 {
		t.Fatalf("%d windows open after the flush", o.Open())
	}
	// One event: a tumbling window (n, sum, max, _meta), 5 hopping ones (n, min, _meta), its
	// region's window (n, sum, min, max, last, _meta) and the global one (and mean).
	rows := map[string][]byte{
		stream.SetTumble: schema.AggregateRow("ent-001", stream.SetTumble, base, buckets),
		stream.SetRegion: schema.AggregateRow(stream.Region("ent-001"), stream.SetRegion, base, buckets),
		stream.SetGlobal: schema.AggregateRow("all", stream.SetGlobal, base, buckets),
	}
	counts := map[string]int{stream.SetTumble: 4, stream.SetRegion: 6, stream.SetGlobal: 7}
	tally := func(wrong string) *setTally {
		tl := newSetTally()
		for set, n := range counts {
			for i := range n {
				tl.cell(rows[set], !(set == wrong && i == 0))
			}
		}
		for i := range 5 {
			row := schema.AggregateRow("ent-001", stream.SetHop, base-int64(i)*60_000, buckets)
			for range 3 {
				tl.cell(row, true)
			}
		}
		return tl
	}
	s := &summary{oracle: o}
	if n := s.printBySet(io.Discard, "aggregates", tally(""), true); n != 13 || len(s.failures) != 0 {
		t.Fatalf("a right table: %d rollup cells right, failures %v", n, s.failures)
	}
	if n := s.printBySet(io.Discard, "aggregates", tally(stream.SetGlobal), true); n != 12 || len(s.failures) != 1 ||
		!strings.Contains(s.failures[0], "set "+stream.SetGlobal) {
		t.Fatalf("a wrong global cell: %d rollup cells right, failures %v", n, s.failures)
	}
	empty := &summary{oracle: stream.NewOracle(stream.Layout{AggregatesBuckets: buckets, FactsBuckets: buckets, Family: "d"})}
	empty.printBySet(io.Discard, "aggregates", newSetTally(), true)
	if len(empty.failures) != len(stream.RollupSets()) || len(stream.RollupSets()) != 2 {
		t.Fatalf("no rollup cells expected: failures %v", empty.failures)
	}
}
