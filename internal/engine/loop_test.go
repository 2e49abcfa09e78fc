package engine

import (
	"encoding/binary"
	"reflect"
	"testing"
)

func TestLoopMessagesRoundTrip(t *testing.T) {
	for _, m := range []*loopMsg{
		{kind: loopTick},
		{kind: loopClose},
		{kind: loopEvent, source: 2, topic: "readings", partition: 11, offset: 1 << 40, value: []byte(`{"a":1}`)},
		{kind: loopEvent, topic: "t"},
	} {
		got, err := decodeLoop(m.encode())
		if err != nil {
			t.Fatalf("%+v: %v", m, err)
		}
		if !reflect.DeepEqual(got, m) {
			t.Fatalf("round trip: got %+v, want %+v", got, m)
		}
	}
	// Ticks and closes written by earlier versions carried a time, which is read past.
	old := binary.AppendVarint([]byte{byte(loopTick)}, 1_700_000_000_000)
	if m, err := decodeLoop(old); err != nil || m.kind != loopTick {
		t.Fatalf("old tick: %+v %v", m, err)
	}
	for _, bad := range [][]byte{nil, {9}, {byte(loopEvent)}, {byte(loopEvent), 0, 50, 'x'}} {
		if _, err := decodeLoop(bad); err == nil {
			t.Errorf("decodeLoop(%v) accepted", bad)
		}
	}
}
