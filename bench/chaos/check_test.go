package main

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/abacus-stream/abacus/deadletter"
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
