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
	"github.com/abacus-stream/abacus/windows"
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
// Events that cannot be read, have no entity, or whose event time lies further ahead of their
// record's timestamp than MaxFutureSkew (windows.FromFuture, the processor's rule) are refused:
// they go to the dead-letter topic, unless LeaveRejectsToProcessor says the processor does that.
type FactsEncoder struct {
	Table       string
	Family      string
	SaltBuckets int
	// Extract reads a record's entity, event time and type. A panic in it refuses the record with
	// reason panic.
	Extract func(rec *kgo.Record) (Fact, error)
	// MaxFutureSkew refuses events later than their record's timestamp plus this (default 5
	// minutes).
	MaxFutureSkew time.Duration
	// LeaveRejectsToProcessor says that the processor of the same topology reads these records
	// and refuses the same ones by the same rules; it writes their dead letters, one per record,
	// and the facts sink only counts them (abacus_sink_skipped_total). A deployment of a topology
	// always runs its processor; a facts sink used alone leaves this off.
	LeaveRejectsToProcessor bool

	// Encode's memory: the family's bytes, shared by every cell, and the slab their row keys and
	// qualifiers are cut from. Hence an encoder serves one sink: Encode is not safe for
	// concurrent use, and an encoder must not be copied once it has encoded (the copy would cut
	// the same bytes again).
	family []byte
	slab   slab
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
	fact, err := f.extract(rec)
	if err == nil {
		err = f.check(rec, fact)
	}
	if err != nil {
		if f.LeaveRejectsToProcessor {
			return dst, &SkipError{Err: err}
		}
		return dst, err
	}
	// Row and qualifier are cut from one slab of many records' keys: two allocations per event
	// fewer, and memory the collector need not scan.
	rowMax, qMax := schema.MaxFactRowLen(fact.Entity), len(fact.Type)+maxFactQualifierSuffix
	b := f.slab.take(rowMax + qMax)
	row := schema.AppendFactRow(b[:0:rowMax], fact.Entity, fact.EventTime, f.SaltBuckets)
	q := schema.AppendFactQualifier(b[rowMax:rowMax:rowMax+qMax], fact.Type, rec.Partition, rec.Offset)
	value := rec.Value
	if value == nil {
		value = []byte{}
	}
	if string(f.family) != f.Family {
		f.family = []byte(f.Family)
	}
	return append(dst, store.Cell{
		Table:     f.Table,
		Row:       row,
		Family:    f.family,
		Qualifier: q,
		Timestamp: fact.EventTime,
		Value:     value,
	}), nil
}

// maxFactQualifierSuffix is the most a fact qualifier adds to its event type: ':' partition ':'
// offset, both in decimal.
const maxFactQualifierSuffix = 1 + 11 + 1 + 20

// cut appends to *buf with fill and returns what it appended, capped so that a later append to
// it cannot run into the rest of *buf. Should fill outgrow *buf's capacity, append copies and the
// bytes cut before stay where they were: wasteful, never wrong.
func cut(buf *[]byte, fill func([]byte) []byte) []byte {
	start := len(*buf)
	*buf = fill(*buf)
	return (*buf)[start:len(*buf):len(*buf)]
}

// slab hands out small byte slices cut from larger blocks. A block is freed by the collector
// once no slice of it is referenced, here once the batches holding its cells have landed.
type slab struct{ block []byte }

const slabBlock = 64 << 10

// take returns n bytes of zero length, n of capacity, that no other take shares.
func (s *slab) take(n int) []byte {
	if cap(s.block)-len(s.block) < n {
		s.block = make([]byte, 0, max(slabBlock, n))
	}
	l := len(s.block)
	s.block = s.block[:l+n]
	return s.block[l : l+n : l+n]
}

// extract runs Extract, turning a panic of user code into the record's refusal.
func (f *FactsEncoder) extract(rec *kgo.Record) (fact Fact, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = deadletter.Errorf(deadletter.Panic, "%v", r)
		}
	}()
	fact, err = f.Extract(rec)
	if err != nil {
		err = deadletter.Errorf(deadletter.ReasonOf(err, deadletter.Undecodable), "facts: %w", err)
	}
	return fact, err
}

func (f *FactsEncoder) check(rec *kgo.Record, fact Fact) error {
	if fact.Entity == "" {
		return deadletter.Errorf(deadletter.NoEntity, "facts: event has an empty entity")
	}
	if fact.EventTime < 0 {
		return deadletter.Errorf(deadletter.Undecodable, "facts: negative event time %d", fact.EventTime)
	}
	skew := f.MaxFutureSkew
	if skew <= 0 {
		skew = 5 * time.Minute
	}
	if windows.FromFuture(fact.EventTime, rec.Timestamp, skew) {
		return deadletter.Errorf(deadletter.Future, "facts: %w: %s is more than %s ahead of its record's timestamp %s", ErrFutureEvent,
			time.UnixMilli(fact.EventTime).UTC().Format(time.RFC3339Nano), skew, rec.Timestamp.UTC().Format(time.RFC3339Nano))
	}
	return nil
}

// SkipError is an Encode refusal whose dead letter another role writes: the sink takes the record
// without a cell and without a dead letter, and counts it.
type SkipError struct{ Err error }

func (e *SkipError) Error() string {
	return "skipped (dead-lettered by the processor): " + e.Err.Error()
}

// Unwrap returns the refusal.
func (e *SkipError) Unwrap() error { return e.Err }

// FactsOf reads facts from the records of a topology's source topics with the topology's own
// decoders and extractors, and refuses the records its processor refuses before any window (too
// large, no entity, a reserved or too long entity), so the facts sink sees each event as the
// processor does.
func FactsOf(topo *topology.Topology) func(rec *kgo.Record) (Fact, error) {
	p := plan.Of(topo)
	return func(rec *kgo.Record) (Fact, error) {
		if p == nil {
			return Fact{}, errors.New("sinks.FactsOf: topology is nil or zero (make it with topology.Builder.Build)")
		}
		src := p.SourceByTopic(rec.Topic)
		if src == nil {
			return Fact{}, fmt.Errorf("topic %s is not a source of topology %s", rec.Topic, p.Name)
		}
		if len(rec.Value) > p.MaxRecordBytes {
			return Fact{}, deadletter.Errorf(deadletter.TooLarge, "record of %d bytes, more than the limit of %d", len(rec.Value), p.MaxRecordBytes)
		}
		ev, err := src.Decode(rec.Value)
		if err != nil {
			return Fact{}, err
		}
		entity := src.Entity(ev)
		switch {
		case entity == "" || (!src.Repartition && len(rec.Key) == 0):
			return Fact{}, deadletter.Errorf(deadletter.NoEntity, "the record has no key and its event no entity")
		case plan.ReservedKey(entity):
			return Fact{}, deadletter.Errorf(deadletter.ReservedKey, "entity %q is a key the state keeps for itself", entity)
		case len(entity) > p.MaxEntityBytes:
			return Fact{}, deadletter.Errorf(deadletter.TooLarge, "entity of %d bytes, more than the limit of %d", len(entity), p.MaxEntityBytes)
		case !src.Repartition && entity != string(rec.Key):
			return Fact{}, deadletter.Errorf(deadletter.EntityNotKey, "entity %q differs from the record key %q", entity, rec.Key)
		}
		return Fact{Entity: entity, EventTime: src.EventTime(ev), Type: src.Type(ev)}, nil
	}
}
