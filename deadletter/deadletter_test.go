package deadletter

import (
	"bytes"
	"reflect"
	"strings"
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

// TestFit: a record larger than the limit is cut to it: its detail first, then its value, whose
// length a header then gives (Parse reads it back), then its original headers; a record within
// the limit is left whole.
func TestFit(t *testing.T) {
	r := Record{Source: Source{Topic: "in", Partition: 1, Offset: 2}, Reason: Undecodable, Detail: strings.Repeat("d", 5000),
		Key: []byte("k"), Value: bytes.Repeat([]byte("v"), 100_000), Headers: []Header{{"a", []byte("1")}, {"b", bytes.Repeat([]byte("h"), 50_000)}}}
	whole := r
	if whole.Fit(whole.Size()) {
		t.Fatal("a record at the limit was cut")
	}
	for _, limit := range []int{120_000, 60_000, 20_000, 2_000} {
		c := r
		c.Headers = append([]Header(nil), r.Headers...)
		if !c.Fit(limit) {
			t.Fatalf("limit %d: not cut", limit)
		}
		if c.Size() > limit {
			t.Fatalf("limit %d: %d bytes after Fit", limit, c.Size())
		}
		if len(c.Detail) > 1024 || !bytes.HasPrefix(r.Value, c.Value) {
			t.Fatalf("limit %d: detail of %d bytes, or a value that is not the original's prefix", limit, len(c.Detail))
		}
		back, err := Parse(c.Value, c.RecordHeaders())
		if err != nil || back.ValueBytes != 100_000 {
			t.Fatalf("limit %d: read back with value length %d (%v), want 100000", limit, back.ValueBytes, err)
		}
		if limit == 120_000 && (len(c.Headers) != 2 || len(c.Value) == 0) {
			t.Fatalf("limit %d: cut the headers (%d left) before the value (%d bytes left)", limit, len(c.Headers), len(c.Value))
		}
	}
}

// TestIdentity: two set-aside records are the same one when topic, source, reason and set are;
// who wrote them, when, and what they carry besides do not count.
func TestIdentity(t *testing.T) {
	a := Record{Source: Source{Topic: "in", Partition: 1, Offset: 7}, Reason: Late, Set: "minute", Detail: "x",
		Group: "g", By: Source{Topic: "in", Partition: 1, Offset: 7}}
	b := a
	b.Detail, b.By, b.Timestamp = "y", Source{Topic: "g-loop", Partition: 1, Offset: 3}, time.UnixMilli(5)
	if a.Identity("late") != b.Identity("late") {
		t.Fatal("the same late record, written twice, has two identities")
	}
	for _, c := range []func(*Record){
		func(r *Record) { r.Set = "hour" },
		func(r *Record) { r.Reason = Undecodable },
		func(r *Record) { r.Source.Offset = 8 },
		func(r *Record) { r.Source.Topic = "in/1@7\x00late" },
	} {
		d := a
		c(&d)
		if d.Identity("late") == a.Identity("late") {
			t.Fatalf("%+v and %+v have one identity", d, a)
		}
	}
	if a.Identity("late") == a.Identity("dead") {
		t.Fatal("records of two topics have one identity")
	}
}
