package engine

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/abacus-stream/abacus/internal/golden"
)

// TestGoldenLoopMessages pins what partitions send each other through the loop topic: a rollup
// partial (set and aggregations by name, one aggregation absent), a progress (ends per set by
// name), a re-keyed event, and the tick, close and nudge. Each decodes back to what was encoded.
func TestGoldenLoopMessages(t *testing.T) {
	partial := &partialMsg{setName: "region", start: 1_767_225_600_000, end: 1_767_225_660_000, from: 3, final: true, revision: 17,
		named: []namedAgg{{name: "count", kind: "count", value: []byte{0x22}}, {name: "max", kind: "max", value: []byte{1, 2, 3}}}}
	msgs := []struct {
		name, what string
		m          *loopMsg
	}{
		{"partial", "rollup partial total (kind 8): set and aggregations by name and kind", &loopMsg{kind: loopPartial, partial: partial}},
		{"progress", "rollup progress (kind 9): the sender's stream time, and per set by name the end up to which it sent every partial and from when it runs the set",
			&loopMsg{kind: loopProgress, partition: 3, offset: 1_767_225_700_000, byEnd: true,
				ends: []setEnd{{set: "region", end: 1_767_225_690_000, live: minTime}, {set: "all", end: 1_767_225_660_000, live: 1_767_225_300_000}}}},
		{"event", "re-keyed source event (kind 4): source index, topic, partition, offset, record timestamp, value",
			&loopMsg{kind: loopEvent, source: 1, topic: "readings", partition: 7, offset: 1 << 33, timestamp: 1_767_225_600_123, value: []byte(`{"device":"d"}`)}},
		{"tick", "tick (kind 2)", &loopMsg{kind: loopTick}},
		{"close", "close (kind 1)", &loopMsg{kind: loopClose}},
		{"nudge", "nudge (kind 5)", &loopMsg{kind: loopNudge}},
	}
	for _, c := range msgs {
		b := c.m.encode()
		golden.Check(t, "loop-"+c.name, c.what, b)
		got, err := decodeLoop(golden.Read(t, "loop-"+c.name))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if !bytes.Equal(got.encode(), b) {
			t.Fatalf("%s decodes as %+v, which encodes otherwise", c.name, got)
		}
	}
}

// TestLoopMessagesOfEarlierVersions reads a partial and a progress as the code before names and
// ends wrote them.
func TestLoopMessagesOfEarlierVersions(t *testing.T) {
	b := golden.Read(t, "partial-v1")
	m, err := decodeLoop(b)
	if err != nil {
		t.Fatal(err)
	}
	want := &partialMsg{set: 2, start: 1_767_225_600_000, end: 1_767_225_660_000, from: 3, final: true, revision: 17, aggs: [][]byte{{0x22}, {1, 2, 3}}}
	if m.kind != loopPartial || !reflect.DeepEqual(m.partial, want) || !bytes.Equal(m.encode(), b) {
		t.Fatalf("partial of version 1: %+v, want %+v, encoding back to the same bytes", m.partial, want)
	}
	b = golden.Read(t, "progress-v1")
	m, err = decodeLoop(b)
	if err != nil {
		t.Fatal(err)
	}
	if m.kind != loopProgress || m.partition != 3 || m.offset != 1_767_225_700_000 || m.byEnd || m.ends != nil || !bytes.Equal(m.encode(), b) {
		t.Fatalf("progress of version 1: %+v", m)
	}
}
