package sinks

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/abacus-stream/abacus/deadletter"
	"github.com/abacus-stream/abacus/store"
)

func factsEncoder(extract func(*kgo.Record) (Fact, error)) *FactsEncoder {
	return &FactsEncoder{Table: "t", Family: "f", SaltBuckets: 4, MaxFutureSkew: 5 * time.Minute, Extract: extract}
}

// TestFactsFutureByRecordTime (DESIGN invariants 1 and 7): the facts sink judges an event from the future
// as the processor does: by its record's timestamp, not by the sink's clock, so a replay next
// week writes the same cells.
func TestFactsFutureByRecordTime(t *testing.T) {
	rec := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	// The value holds the event's minutes after its record's timestamp.
	enc := factsEncoder(func(r *kgo.Record) (Fact, error) {
		return Fact{Entity: "e", EventTime: rec.Add(time.Duration(r.Value[0]) * time.Minute).UnixMilli()}, nil
	})
	for _, c := range []struct {
		minutes byte
		future  bool
	}{{0, false}, {4, false}, {6, true}} {
		// The sink's clock plays no part: the record is years old.
		_, err := enc.Encode(&kgo.Record{Value: []byte{c.minutes}, Timestamp: rec}, nil)
		if got := errors.Is(err, ErrFutureEvent); got != c.future {
			t.Errorf("%d minutes after the record: future=%v (%v), want %v", c.minutes, got, err, c.future)
		}
		if c.future && deadletter.ReasonOf(err, "") != deadletter.Future {
			t.Errorf("reason %q", deadletter.ReasonOf(err, ""))
		}
	}
}

// TestFactsRejectsLeftToProcessor (DESIGN invariants 7 and 12): with the processor running, the facts sink
// refuses the same bad records without a dead letter of its own (SkipError); alone, it writes one.
func TestFactsRejectsLeftToProcessor(t *testing.T) {
	enc := factsEncoder(func(*kgo.Record) (Fact, error) { return Fact{}, errors.New("not json") })
	r := &kgo.Record{Value: []byte("x"), Timestamp: time.Now()}
	_, err := enc.Encode(r, nil)
	var skip *SkipError
	if err == nil || errors.As(err, &skip) {
		t.Fatalf("alone: %v, want a dead letter", err)
	}
	enc.LeaveRejectsToProcessor = true
	_, err = enc.Encode(r, nil)
	if !errors.As(err, &skip) || deadletter.ReasonOf(err, "") != deadletter.Undecodable {
		t.Fatalf("beside the processor: %v, want a skip of an undecodable record", err)
	}
}

// TestFactsExtractPanic (DESIGN invariant 12): user code that panics in the facts sink refuses the
// record with reason panic; the sink goes on.
func TestFactsExtractPanic(t *testing.T) {
	enc := factsEncoder(func(r *kgo.Record) (Fact, error) {
		if string(r.Value) == "boom" {
			panic("extractor exploded")
		}
		return Fact{Entity: "e", EventTime: 1}, nil
	})
	_, err := enc.Encode(&kgo.Record{Value: []byte("boom"), Timestamp: time.Now()}, nil)
	if deadletter.ReasonOf(err, "") != deadletter.Panic || !strings.Contains(err.Error(), "extractor exploded") {
		t.Fatalf("panic: %v", err)
	}
	cells, err := enc.Encode(&kgo.Record{Value: []byte("ok"), Timestamp: time.Now()}, []store.Cell{})
	if err != nil || len(cells) != 1 {
		t.Fatalf("the next record: %v %v", cells, err)
	}
}
