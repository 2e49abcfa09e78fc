package deadletter

import (
	"bytes"
	"reflect"
	"testing"
	"time"
)

func TestRoundTrip(t *testing.T) {
	r := Record{Source: Source{Topic: "a/b@c-readings", Partition: 7, Offset: 12345}, Reason: Late, Detail: "window closed",
		Set: "minute", Key: []byte("dev-1"), Value: []byte(`{"x":1}`), Timestamp: time.UnixMilli(1700000000123),
		Headers: []Header{{"trace", []byte("t1")}}}
	if got := string(r.RecordKey()); got != "a/b@c-readings/7@12345" {
		t.Fatalf("key %q", got)
	}
	back, err := Parse(r.Value, r.RecordHeaders())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, r) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", back, r)
	}
	// Two records for one source and reason are identical, byte for byte.
	again := r
	if !bytes.Equal(again.RecordKey(), r.RecordKey()) || !reflect.DeepEqual(again.RecordHeaders(), r.RecordHeaders()) {
		t.Fatal("a repeat differs")
	}
}

func TestParseRejects(t *testing.T) {
	for _, s := range []string{"", "t", "t/1", "t@1", "/1@2", "t/x@2", "t/1@y"} {
		if _, err := ParseSource(s); err == nil {
			t.Errorf("ParseSource(%q) accepted", s)
		}
	}
	if _, err := Parse(nil, []Header{{HeaderReason, []byte("late")}}); err == nil {
		t.Error("record without a source accepted")
	}
}
