package engine

import (
	"errors"
	"reflect"
	"testing"
)

// FuzzDecodeLoop feeds arbitrary bytes to decodeLoop, as a corrupt record of the loop topic
// would: it must never panic, every error must wrap errCorruptLoop, and a message it accepts must
// survive encode and decode unchanged.
func FuzzDecodeLoop(f *testing.F) {
	for _, m := range []*loopMsg{
		{kind: loopTick},
		{kind: loopClose},
		{kind: loopEvent, source: 1, topic: "device-readings", partition: 7, offset: 1 << 33, value: []byte(`{"device":"d"}`)},
		{kind: loopProgress, partition: 3, offset: 1 << 40},
		{kind: loopPartial, partial: &partialMsg{set: 2, start: -60_000, end: 0, from: 5, final: true, revision: 9, aggs: [][]byte{{1, 2}, nil}}},
		{kind: loopPartial, partial: &partialMsg{set: 1, start: 0, end: 60_000, from: 1, final: true, failed: true, userError: true}},
	} {
		f.Add(m.encode())
	}
	f.Add([]byte{byte(loopEvent), 0, 0xff, 0xff, 0xff, 0xff, 0x0f}) // a huge topic length with no bytes behind it
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeLoop(b)
		if err != nil {
			if !errors.Is(err, errCorruptLoop) {
				t.Fatalf("error does not wrap errCorruptLoop: %v", err)
			}
			return
		}
		again, err := decodeLoop(m.encode())
		if err != nil {
			t.Fatalf("re-encoding of %x does not decode: %v", b, err)
		}
		if m.kind != loopEvent {
			m.value, again.value = nil, nil
		}
		if len(m.value) == 0 && len(again.value) == 0 {
			m.value, again.value = nil, nil
		}
		if !reflect.DeepEqual(m, again) {
			t.Fatalf("%x: decoded %+v, after a round trip %+v", b, m, again)
		}
	})
}
