package engine_test

import (
	"bytes"
	"encoding/binary"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/abacus-stream/abacus/abacustest"
	"github.com/abacus-stream/abacus/deadletter"
	"github.com/abacus-stream/abacus/topology"
	"github.com/abacus-stream/abacus/windows"
)

// TestNoSpuriousLateAfterRewind (DESIGN invariant 12): once an entity left the table (its windows
// final and retained long enough), records of it delivered again (a rewind, or a replay after a
// restart) are recognised as processed before, not reported as late: the partition's record
// knows up to which offset every record is done. Truly late records are still late.
func TestNoSpuriousLateAfterRewind(t *testing.T) {
	for _, restart := range []string{"none", "keep", "lose"} {
		d := abacustest.New(t, sensors(t, true), abacustest.Options{Start: at(t0), Partitions: 1, FinalRetention: time.Second})
		for i := range 5 {
			d.Pipe("readings", "gone", reading{Device: "gone", TS: t0 + int64(i)*1000})
		}
		d.Pipe("readings", "gone", reading{Device: "gone", TS: t0 - 10*60_000}) // really late, offset 5
		late := len(d.Late())
		if late == 0 {
			t.Fatal("the late record was not reported")
		}
		d.Advance(10 * time.Minute) // idle: every window closes; retention passes, the entity leaves
		if n := d.Entities(); n != 0 {
			t.Fatalf("%d entities left, want none", n)
		}
		switch restart {
		case "keep":
			d.Restart(false)
		case "lose":
			d.Restart(true)
		}
		d.Redeliver("readings", 0, 0)
		if got := d.Late(); len(got) != late {
			t.Fatalf("restart %s: %d late records after the records came again, want the %d of before: %+v", restart, len(got), late, got[late:])
		}
		d.Pipe("readings", "gone", reading{Device: "gone", TS: t0 + 2000}) // a new record, late
		if got := len(d.Late()); got <= late {
			t.Fatalf("restart %s: a new late record was not reported", restart)
		}
	}
}

// blob is a custom aggregation that keeps the last event's payload: its state grows with it.
var blob = topology.UserDefined[payload, []byte]{
	Init:   func() []byte { return nil },
	Add:    func(_ []byte, p payload, _ int64) []byte { return []byte(p.Data) },
	Merge:  func(a, b []byte) []byte { return append(a, b...) },
	Encode: func(b []byte) []byte { return b },
	Decode: func(b []byte) ([]byte, error) { return b, nil },
}

type payload struct {
	Device string `json:"device"`
	TS     int64  `json:"ts"`
	Data   string `json:"data"`
}

func payloads(t testing.TB, maxMessage int) *topology.Topology {
	b := topology.New("payloads")
	b.MaxMessageBytes(maxMessage)
	topology.NewSource(b, "in", topology.JSON[payload](),
		func(p payload) string { return p.Device },
		func(p payload) time.Time { return time.UnixMilli(p.TS) }).
		Aggregate("hop", windows.Hopping(10*time.Minute, time.Minute)).Grace(0).Count("n").Custom("last", blob)
	topo, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	return topo
}

// TestEntityStateBounded (DESIGN invariants 7 and 13): an event whose applying would make its entity's state
// larger than a Kafka message (MaxMessageBytes) is dead-lettered as too large, naming the limit,
// instead of being written: a changelog message Kafka refuses stopped the processor and lost the
// event. The entity's other events are counted as before.
func TestEntityStateBounded(t *testing.T) {
	d := abacustest.New(t, payloads(t, topology.DefaultMaxMessageBytes), abacustest.Options{Start: at(t0), Partitions: 1})
	d.Pipe("in", "d", payload{Device: "d", TS: t0 + 1000, Data: "small"})
	big := strings.Repeat("x", 200_000) // ten windows of it: 2 MB of state
	d.Pipe("in", "d", payload{Device: "d", TS: t0 + 2000, Data: big})
	d.Pipe("in", "d", payload{Device: "d", TS: t0 + 3000, Data: "small"})
	dls := d.DeadLetters()
	if len(dls) != 1 || dls[0].Reason != deadletter.TooLarge || dls[0].Source.Offset != 1 ||
		!strings.Contains(dls[0].Detail, "limit of "+strconv.Itoa(topology.DefaultMaxMessageBytes)) {
		t.Fatalf("dead letters %+v, want the big event as too large, naming the limit", dls)
	}
	d.Pipe("in", "d", payload{Device: "d", TS: t0 + 20*60_000}, abacustest.At(at(t0+20*60_000)))
	d.Final("hop", "d", at(t0-9*60_000)).Expect(t, map[string]float64{"n": 2})
	// Just under the limit is applied.
	d2 := abacustest.New(t, payloads(t, 64<<10), abacustest.Options{Start: at(t0), Partitions: 1})
	d2.Pipe("in", "d", payload{Device: "d", TS: t0 + 1000, Data: strings.Repeat("y", 5000)}) // ~50 kB of state
	d2.Pipe("in", "d", payload{Device: "d", TS: t0 + 2000, Data: strings.Repeat("y", 7000)}) // ~70 kB: over
	if dls := d2.DeadLetters(); len(dls) != 1 || dls[0].Source.Offset != 1 {
		t.Fatalf("with a 64 KiB limit: dead letters %+v, want only the second event", dls)
	}
}

// TestSetAsideRecordsFit (DESIGN invariant 13): a dead letter of a record too large to process (2 MiB,
// over the record limit), or of an undecodable record just under Kafka's 1 MB default, carries its
// value cut to fit MaxMessageBytes with the header abacus.value-bytes saying how long it was: a
// dead letter larger than a Kafka message stopped the processor.
func TestSetAsideRecordsFit(t *testing.T) {
	d := abacustest.New(t, sensors(t, false), abacustest.Options{Start: at(t0), Partitions: 1})
	huge := bytes.Repeat([]byte("z"), 2<<20)
	d.Send("readings", "a", huge)
	nearly := append([]byte("{not json"), bytes.Repeat([]byte("z"), 999_000)...)
	d.Send("readings", "a", nearly, abacustest.WithHeaders(map[string][]byte{"trace": []byte("t-1")}))
	small := []byte("{also not json")
	d.Send("readings", "a", small)
	msgs := d.Messages("sensors-dead-letter")
	if len(msgs) != 3 {
		t.Fatalf("%d dead letters, want 3", len(msgs))
	}
	for i, want := range [][]byte{huge, nearly, small} {
		m := msgs[i]
		size := 96 + len(m.Key) + len(m.Value)
		for _, h := range m.Headers {
			size += 10 + len(h.Key) + len(h.Value)
		}
		if size > topology.DefaultMaxMessageBytes {
			t.Errorf("dead letter %d takes %d bytes, more than %d", i, size, topology.DefaultMaxMessageBytes)
		}
		r, err := deadletter.Parse(m.Value, m.Headers)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(want, r.Value) {
			t.Errorf("dead letter %d: value is not a prefix of the record's", i)
		}
		switch cut := len(r.Value) < len(want); {
		case cut && r.ValueBytes != len(want):
			t.Errorf("dead letter %d: value cut to %d bytes, header says %d, want %d", i, len(r.Value), r.ValueBytes, len(want))
		case !cut && r.ValueBytes != 0:
			t.Errorf("dead letter %d: whole value, but header says %d bytes", i, r.ValueBytes)
		case i < 2 && !cut:
			t.Errorf("dead letter %d of a %d-byte record was not cut", i, len(want))
		}
	}
	if r, _ := deadletter.Parse(msgs[1].Value, msgs[1].Headers); len(r.Headers) != 1 || string(r.Headers[0].Value) != "t-1" {
		t.Errorf("the original headers were not kept: %+v", r.Headers)
	}
}

// TestKindChangesRefused (DESIGN invariant 14): every change of an aggregation's kind under the same
// name is refused when the processor starts over the old state: count, sum, max and a custom
// aggregation's encoding version.
func TestKindChangesRefused(t *testing.T) {
	counter := func(version string) topology.UserDefined[reading, uint64] {
		return topology.UserDefined[reading, uint64]{
			Init:    func() uint64 { return 0 },
			Add:     func(n uint64, _ reading, _ int64) uint64 { return n + 1 },
			Merge:   func(a, b uint64) uint64 { return a + b },
			Encode:  func(n uint64) []byte { return binary.AppendUvarint(nil, n) },
			Decode:  func(b []byte) (uint64, error) { n, _ := binary.Uvarint(b); return n, nil },
			Version: version,
		}
	}
	kinds := map[string]func(*topology.AggregateSet[reading]){
		"count":     func(s *topology.AggregateSet[reading]) { s.Count("x") },
		"sum":       func(s *topology.AggregateSet[reading]) { s.Sum("x", "Temp") },
		"max":       func(s *topology.AggregateSet[reading]) { s.Max("x", "Temp") },
		"custom v1": func(s *topology.AggregateSet[reading]) { s.Custom("x", counter("v1")) },
		"custom v2": func(s *topology.AggregateSet[reading]) { s.Custom("x", counter("v2")) },
	}
	build := func(kind string) *topology.Topology {
		b := topology.New("kinds")
		set := topology.NewSource(b, "readings", topology.JSON[reading](),
			func(r reading) string { return r.Device },
			func(r reading) time.Time { return time.UnixMilli(r.TS) }).
			Aggregate("m", windows.Tumbling(time.Minute)).Grace(0)
		kinds[kind](set)
		topo, err := b.Build()
		if err != nil {
			t.Fatal(err)
		}
		return topo
	}
	for _, change := range [][2]string{{"count", "sum"}, {"sum", "max"}, {"max", "count"}, {"custom v1", "custom v2"}, {"count", "custom v1"}} {
		for _, lose := range []bool{false, true} {
			var failed error
			d := abacustest.New(t, build(change[0]), abacustest.Options{Start: at(t0), Partitions: 1, OnFail: func(err error) { failed = err }})
			d.Pipe("readings", "k", reading{Device: "k", TS: t0 + 1000, Temp: 6})
			d.Pipe("readings", "k", reading{Device: "k", TS: t0 + 2000, Temp: 7})
			d.RestartWith(build(change[1]), lose)
			if failed == nil || !strings.Contains(failed.Error(), `aggregation "x" of set "m" changed its kind`) {
				t.Errorf("%s to %s (lose storage %v): %v, want a refusal naming the aggregation", change[0], change[1], lose, failed)
			}
		}
	}
	// The same kind again is no change.
	var failed error
	d := abacustest.New(t, build("custom v1"), abacustest.Options{Start: at(t0), Partitions: 1, OnFail: func(err error) { failed = err }})
	d.Pipe("readings", "k", reading{Device: "k", TS: t0 + 1000})
	d.RestartWith(build("custom v1"), true)
	if failed != nil {
		t.Fatalf("the same topology again was refused: %v", failed)
	}
}
