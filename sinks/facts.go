package sinks

import (
	"errors"
	"fmt"
	"time"

	"github.com/abacus-stream/abacus/deadletter"
	"github.com/abacus-stream/abacus/internal/plan"
	"github.com/abacus-stream/abacus/schema"
	"github.com/abacus-stream/abacus/store"
	"github.com/abacus-stream/abacus/topology"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Fact is what the facts sink needs to know of a raw event.
type Fact struct {
	Entity    string
	EventTime int64  // ms since the Unix epoch
	Type      string // "" when the source declares no event type
}

// FactsEncoder turns each raw event into one idempotent cell:
//
//	row       = salt | entity | reversed event time   (schema.FactRow)
//	qualifier = type ":" partition ":" offset          (schema.AppendFactQualifier: replays rewrite it)
//	timestamp = event time
//	value     = the record's value, as it was produced
//
// Events that cannot be read, or whose event time lies further in the future than MaxFutureSkew,
// are refused and go to the dead-letter topic.
type FactsEncoder struct {
	Table       string
	Family      string
	SaltBuckets int
	// Extract reads a record's entity, event time and type.
	Extract func(rec *kgo.Record) (Fact, error)
	// MaxFutureSkew refuses events later than now plus this (default 5 minutes).
	MaxFutureSkew time.Duration
	// Now is the clock that MaxFutureSkew is judged by; time.Now when nil. It never reaches a cell.
	Now func() time.Time
}

// ErrFutureEvent is the reason given for events from further in the future than allowed.
var ErrFutureEvent = errors.New("event time too far in the future")

// Check reports a configuration the encoder cannot write with (see AggregatesEncoder.Check).
func (f *FactsEncoder) Check() error {
	err := checkLayout("facts encoder", f.Table, f.Family, f.SaltBuckets)
	if f.Extract == nil {
		err = errors.Join(err, errors.New("facts encoder: Extract is nil"))
	}
	return err
}

// Encode implements Encoder.
func (f *FactsEncoder) Encode(rec *kgo.Record, dst []store.Cell) ([]store.Cell, error) {
	fact, err := f.Extract(rec)
	if err != nil {
		return dst, deadletter.Errorf(deadletter.ReasonOf(err, deadletter.Undecodable), "facts: %w", err)
	}
	if fact.Entity == "" {
		return dst, deadletter.Errorf(deadletter.NoEntity, "facts: event has an empty entity")
	}
	if fact.EventTime < 0 {
		return dst, deadletter.Errorf(deadletter.Undecodable, "facts: negative event time %d", fact.EventTime)
	}
	now := time.Now
	if f.Now != nil {
		now = f.Now
	}
	skew := f.MaxFutureSkew
	if skew <= 0 {
		skew = 5 * time.Minute
	}
	if limit := now().Add(skew).UnixMilli(); fact.EventTime > limit {
		return dst, deadletter.Errorf(deadletter.Future, "facts: %w: %s is more than %s ahead", ErrFutureEvent,
			time.UnixMilli(fact.EventTime).UTC().Format(time.RFC3339Nano), skew)
	}
	q := schema.AppendFactQualifier(make([]byte, 0, len(fact.Type)+24), fact.Type, rec.Partition, rec.Offset)
	value := rec.Value
	if value == nil {
		value = []byte{}
	}
	return append(dst, store.Cell{
		Table:     f.Table,
		Row:       schema.FactRow(fact.Entity, fact.EventTime, f.SaltBuckets),
		Family:    []byte(f.Family),
		Qualifier: q,
		Timestamp: fact.EventTime,
		Value:     value,
	}), nil
}

// FactsOf reads facts from the records of a topology's source topics with the topology's own
// decoders and extractors, so the facts sink sees each event as the processor does.
func FactsOf(topo *topology.Topology) func(rec *kgo.Record) (Fact, error) {
	p := plan.Of(topo)
	return func(rec *kgo.Record) (Fact, error) {
		src := p.SourceByTopic(rec.Topic)
		if src == nil {
			return Fact{}, fmt.Errorf("topic %s is not a source of topology %s", rec.Topic, p.Name)
		}
		ev, err := src.Decode(rec.Value)
		if err != nil {
			return Fact{}, err
		}
		return Fact{Entity: src.Entity(ev), EventTime: src.EventTime(ev), Type: src.Type(ev)}, nil
	}
}
