package deadletter

import (
	"bytes"
	"reflect"
	"testing"
	"time"

	"github.com/abacus-stream/abacus/internal/golden"
)

// TestGoldenRecord pins a set-aside record as produced: key, headers (abacus's, then the
// original's) and value, one field a line.
func TestGoldenRecord(t *testing.T) {
	r := Record{Source: Source{Topic: "device-readings", Partition: 3, Offset: 41}, Reason: Late, Set: "minute",
		Detail: "the event came after its window of minute closed", Key: []byte("dev-1"), Value: []byte(`{"device":"dev-1"}`),
		Timestamp: time.UnixMilli(1_767_225_600_123), Headers: []Header{{Key: "trace", Value: []byte("abc")}},
		Group: "readings-proc", By: Source{Topic: "readings-proc-loop", Partition: 1, Offset: 9}}
	var b bytes.Buffer
	b.WriteString("key " + string(r.RecordKey()) + "\n")
	for _, h := range r.RecordHeaders() {
		b.WriteString("header " + h.Key + "=" + string(h.Value) + "\n")
	}
	b.WriteString("value " + string(r.Value) + "\n")
	golden.CheckText(t, "record", "set-aside record: key, headers, value (a line each)", b.String())

	got, err := Parse(r.Value, r.RecordHeaders())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, r) {
		t.Fatalf("parsed %+v, want %+v", got, r)
	}
	// A record written before the format header was there reads the same; one of a later format
	// is refused, naming it.
	old := r.RecordHeaders()[1:]
	if got, err := Parse(r.Value, old); err != nil || !reflect.DeepEqual(got, r) {
		t.Fatalf("without the format header: %+v, %v", got, err)
	}
	// A record of a sink: no group, no by.
	sink := r
	sink.Group, sink.By = "", Source{}
	if got, err := Parse(sink.Value, sink.RecordHeaders()); err != nil || !reflect.DeepEqual(got, sink) {
		t.Fatalf("a sink's record: %+v, %v", got, err)
	}
	newer := append([]Header{{Key: HeaderFormat, Value: []byte("2")}}, old...)
	if _, err := Parse(r.Value, newer); err == nil {
		t.Fatal("a record of format 2 was read")
	}
}
