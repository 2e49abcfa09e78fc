package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/abacus-stream/abacus/deadletter"
	"github.com/abacus-stream/abacus/totals"
)

func TestAbacusTopologyBuilds(t *testing.T) {
	if _, err := abacusTopology("g", "in", "out", "late", false, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := abacusTopology("g", "in", "out", "", true, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := abacusTopology("g", "in", "out", "", true, "registry"); err != nil {
		t.Fatal(err)
	}
}

func TestDecodeAbacus(t *testing.T) {
	r := totals.Record{Topology: "g", Set: "minute", Entity: "dev-0000001", Start: 60_000, End: 120_000, Final: true, Revision: 3,
		Values: []totals.Value{
			{Name: "count", Kind: totals.KindInt, Int: 3},
			{Name: "sum", Kind: totals.KindFloat, Float: 12},
			{Name: "max", Kind: totals.KindFloat, Float: 7},
		}}
	f, isFinal, err := decodeAbacus(&kgo.Record{Value: r.Encode()})
	if err != nil || !isFinal {
		t.Fatalf("decode: final %v, %v", isFinal, err)
	}
	if f != (final{set: "minute", entity: "dev-0000001", start: 60_000, agg: winAgg{count: 3, sum: 12, max: 7}}) {
		t.Fatalf("decoded %+v", f)
	}
	r.Values = r.Values[:1]
	if _, _, err := decodeAbacus(&kgo.Record{Value: r.Encode()}); err == nil {
		t.Fatal("a total without sum and max decodes")
	}
}

// lateRecordOf is the late record abacus writes for the event at p@off of the input.
func lateRecordOf(input string, p int32, off int64, reason deadletter.Reason, set string) *kgo.Record {
	r := deadletter.Record{Source: deadletter.Source{Topic: input, Partition: p, Offset: off}, Reason: reason, Set: set,
		Detail: "the event came after its window closed", Value: []byte(`{"entity":"dev-0000001"}`)}
	rec := &kgo.Record{Key: r.RecordKey(), Value: r.Value}
	for _, h := range r.RecordHeaders() {
		rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: h.Key, Value: h.Value})
	}
	return rec
}

// The late topic check passes exactly one late record per late event, and fails on anything else.
func TestLateCheck(t *testing.T) {
	w, _ := newWorkload("sparse-late10", 2_400, 0)
	x := w.expect(testBase)
	const input = "in"
	feed := func(mutate func([]*kgo.Record) []*kgo.Record) error {
		var recs []*kgo.Record
		for p := range int32(partitions) {
			for _, off := range x.late[p] {
				recs = append(recs, lateRecordOf(input, p, off, deadletter.Late, setName))
			}
		}
		recs = mutate(recs)
		st := lateStats{records: int64(len(recs))}
		seen := make([]bool, x.lateCount)
		for _, r := range recs {
			st.add(r, input, x, seen)
		}
		return st.check(x)
	}
	if x.lateCount == 0 {
		t.Fatal("no late events")
	}
	if err := feed(func(r []*kgo.Record) []*kgo.Record { return r }); err != nil {
		t.Fatalf("a correct run fails: %v", err)
	}
	p0 := int32(partitionOf(entityName(0), partitions)) // offset 0 of a partition is on time
	pl := int32(slices.IndexFunc(x.late[:], func(o []int64) bool { return len(o) > 0 }))
	lateAt := x.late[pl][0]
	for name, mutate := range map[string]func([]*kgo.Record) []*kgo.Record{
		"missing":  func(r []*kgo.Record) []*kgo.Record { return r[1:] },
		"repeated": func(r []*kgo.Record) []*kgo.Record { return append(r, r[3]) },
		"not late": func(r []*kgo.Record) []*kgo.Record {
			return append(r[1:], lateRecordOf(input, p0, 0, deadletter.Late, setName))
		},
		"reason": func(r []*kgo.Record) []*kgo.Record { setHeader(r[0], deadletter.HeaderReason, "undecodable"); return r },
		"set": func(r []*kgo.Record) []*kgo.Record {
			return append(r[1:], lateRecordOf(input, pl, lateAt, deadletter.Late, "other"))
		},
		"topic": func(r []*kgo.Record) []*kgo.Record {
			return append(r[1:], lateRecordOf("other", pl, lateAt, deadletter.Late, setName))
		},
		"corrupt":   func(r []*kgo.Record) []*kgo.Record { setHeader(r[0], deadletter.HeaderTimestamp, "x"); return r },
		"one extra": func(r []*kgo.Record) []*kgo.Record { return append(r, &kgo.Record{Value: []byte("x")}) },
	} {
		if err := feed(mutate); err == nil || !strings.Contains(err.Error(), "LATE RECORDS DO NOT MATCH") {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// setHeader sets the value of r's header key, which it must have.
func setHeader(r *kgo.Record, key, value string) {
	for i := range r.Headers {
		if r.Headers[i].Key == key {
			r.Headers[i].Value = []byte(value)
			return
		}
	}
	panic("no header " + key)
}
