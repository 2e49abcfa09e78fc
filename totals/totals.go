// Package totals defines the window total record that the processor writes to the totals topic
// and the sinks read: its Go form and its versioned binary encoding.
//
// It is the contract between processors, sinks and queries, so it must stay a leaf: it imports no
// abacus package but internal/wire (itself a leaf, the one binary reader abacus's encodings share),
// and a change to the encoding must add a new version byte rather than alter version 1.
//
// # Encoding, version 1
//
// The Kafka record key is the entity (UTF-8 bytes). The value is:
//
//	byte     version (= 1)
//	string   topology name
//	string   aggregate set name
//	string   entity
//	varint   window start, ms since the Unix epoch
//	varint   window end, ms since the Unix epoch, exclusive (the HBase cell timestamp)
//	byte     flags: bit 0 = final
//	uvarint  revision
//	uvarint  number of values, then for each value:
//	  string   aggregate name
//	  byte     kind: 1 int, 2 float, 3 quantiles, 4 bytes
//	  int:       varint
//	  float:     8 bytes, IEEE 754 big endian
//	  quantiles: uvarint n, then n pairs of 8-byte big-endian floats (quantile, value)
//	  bytes:     uvarint length, bytes
//
// where string is a uvarint length followed by UTF-8 bytes, varint is zig-zag (encoding/binary
// AppendVarint) and uvarint is encoding/binary AppendUvarint.
//
// # Newest wins
//
// For one (topology, set, entity, window start) the processor may emit several records: early or
// per-update firings, then one final. Revision counts the events applied to the window, so it
// never decreases; the final record carries the highest revision. A sink keeps the record with the
// greatest (Final, Revision) and may drop any record that compares lower than one it has already
// written. Replays after a crash re-emit identical records (same revision, same values).
package totals

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/abacus-stream/abacus/internal/wire"
)

// Version is the encoding version that Encode writes.
const Version = 1

// Kind is the type of an aggregate value.
type Kind uint8

// The value kinds.
const (
	KindInt       Kind = 1 // counts, distinct counts
	KindFloat     Kind = 2 // sum, min, max, mean, last
	KindQuantiles Kind = 3 // DDSketch quantiles
	KindBytes     Kind = 4 // user-defined aggregations
)

// Quantile is one requested quantile and its estimate.
type Quantile struct {
	Q     float64
	Value float64
}

// Value is one aggregate's value in a window. Only the field that matches Kind is meaningful.
type Value struct {
	Name      string
	Kind      Kind
	Int       int64
	Float     float64
	Quantiles []Quantile
	Bytes     []byte
}

// Number is the value as one number, for charts and comparisons: an int or a float as it is,
// quantiles as the one nearest the median, bytes (a custom aggregation's) as NaN.
func (v Value) Number() float64 {
	switch v.Kind {
	case KindInt:
		return float64(v.Int)
	case KindFloat:
		return v.Float
	case KindQuantiles:
		best, dist := math.NaN(), math.Inf(1)
		for _, q := range v.Quantiles {
			if d := math.Abs(q.Q - 0.5); d < dist {
				best, dist = q.Value, d
			}
		}
		return best
	}
	return math.NaN()
}

// Record is the absolute total of one entity's window.
type Record struct {
	Topology string
	Set      string
	Entity   string
	Start    int64 // ms, inclusive
	End      int64 // ms, exclusive
	Final    bool
	Revision uint64
	Values   []Value
}

// Newer reports whether r supersedes o for the same window: newest wins by (Final, Revision).
func (r *Record) Newer(o *Record) bool {
	if r.Final != o.Final {
		return r.Final
	}
	return r.Revision > o.Revision
}

// Value returns the value with the given aggregate name.
func (r *Record) Value(name string) (Value, bool) {
	for _, v := range r.Values {
		if v.Name == name {
			return v, true
		}
	}
	return Value{}, false
}

// Append appends the version-1 encoding of r to b.
func (r *Record) Append(b []byte) []byte {
	b = append(b, Version)
	b = wire.AppendString(b, r.Topology)
	b = wire.AppendString(b, r.Set)
	b = wire.AppendString(b, r.Entity)
	b = binary.AppendVarint(b, r.Start)
	b = binary.AppendVarint(b, r.End)
	var flags byte
	if r.Final {
		flags |= 1
	}
	b = append(b, flags)
	b = binary.AppendUvarint(b, r.Revision)
	b = binary.AppendUvarint(b, uint64(len(r.Values)))
	for _, v := range r.Values {
		b = wire.AppendString(b, v.Name)
		b = append(b, byte(v.Kind))
		switch v.Kind {
		case KindInt:
			b = binary.AppendVarint(b, v.Int)
		case KindFloat:
			b = binary.BigEndian.AppendUint64(b, math.Float64bits(v.Float))
		case KindQuantiles:
			b = binary.AppendUvarint(b, uint64(len(v.Quantiles)))
			for _, q := range v.Quantiles {
				b = binary.BigEndian.AppendUint64(b, math.Float64bits(q.Q))
				b = binary.BigEndian.AppendUint64(b, math.Float64bits(q.Value))
			}
		case KindBytes:
			b = binary.AppendUvarint(b, uint64(len(v.Bytes)))
			b = append(b, v.Bytes...)
		}
	}
	return b
}

// Encode returns the version-1 encoding of r.
func (r *Record) Encode() []byte { return r.Append(make([]byte, 0, 64+24*len(r.Values))) }

// ErrCorrupt is wrapped by every decoding error.
var ErrCorrupt = errors.New("corrupt totals record")

// Decode parses a record written by Encode.
func Decode(b []byte) (*Record, error) {
	r := &Record{}
	if err := decode(b, r, nil); err != nil {
		return nil, err
	}
	return r, nil
}

// Decoder decodes records one after another into one Record, for a reader that is done with each
// record before it reads the next (a sink turning records into cells): the Record, its values and
// their quantiles reuse the memory of the records before, and the strings that repeat (topology,
// set and aggregate names) are kept, not allocated again. A Decoder is not safe for concurrent use.
type Decoder struct {
	rec    Record
	names  map[string]string
	values []Value
	// quantiles holds, by the place of a value in its record, the memory of the last quantiles
	// decoded there.
	quantiles [][]Quantile
}

// maxNames bounds the strings a Decoder keeps: names are few in any topology, and a stream of
// corrupt records must not grow the decoder without bound.
const maxNames = 4096

// Decode parses a record written by Encode. The Record returned, and everything it holds, is the
// decoder's: valid until the next call, which overwrites it. Its strings stay valid.
func (dec *Decoder) Decode(b []byte) (*Record, error) {
	if err := decode(b, &dec.rec, dec); err != nil {
		return nil, err
	}
	return &dec.rec, nil
}

// name returns b as a string, the same string each time for a name seen before.
func (dec *Decoder) name(b []byte) string {
	if s, ok := dec.names[string(b)]; ok {
		return s
	}
	s := string(b)
	if dec.names == nil {
		dec.names = map[string]string{}
	}
	if len(dec.names) < maxNames {
		dec.names[s] = s
	}
	return s
}

// decode parses b into r. With dec, names come from dec.name, and values and quantiles reuse
// dec's memory.
func decode(b []byte, r *Record, dec *Decoder) error {
	d := wire.NewReader(b, ErrCorrupt)
	if v := d.Byte(); d.Err() == nil && v != Version {
		return fmt.Errorf("%w: unknown version %d", ErrCorrupt, v)
	}
	name := func() string {
		if dec == nil {
			return d.String()
		}
		return dec.name(d.Bytes())
	}
	r.Topology = name()
	r.Set = name()
	r.Entity = d.String()
	r.Start = d.Varint()
	r.End = d.Varint()
	r.Final = d.Byte()&1 != 0
	r.Revision = d.Uvarint()
	n := d.Count()
	var vals []Value
	if dec != nil {
		vals = dec.values[:0]
	}
	for i := 0; i < n && d.Err() == nil; i++ {
		v := Value{Name: name(), Kind: Kind(d.Byte())}
		switch v.Kind {
		case KindInt:
			v.Int = d.Varint()
		case KindFloat:
			v.Float = d.Float()
		case KindQuantiles:
			var qs []Quantile
			if dec != nil && i < len(dec.quantiles) {
				qs = dec.quantiles[i][:0]
			}
			qn := d.Count()
			for j := 0; j < qn && d.Err() == nil; j++ {
				qs = append(qs, Quantile{Q: d.Float(), Value: d.Float()})
			}
			if len(qs) > 0 {
				v.Quantiles = qs
			}
			if dec != nil && cap(qs) > 0 {
				for len(dec.quantiles) <= i {
					dec.quantiles = append(dec.quantiles, nil)
				}
				dec.quantiles[i] = qs
			}
		case KindBytes:
			// Not reused: user-defined values may be kept by whoever reads them.
			v.Bytes = append([]byte(nil), d.Bytes()...)
		default:
			d.Fail(fmt.Errorf("%w: value %q has unknown kind %d", ErrCorrupt, v.Name, v.Kind))
		}
		vals = append(vals, v)
	}
	r.Values = nil // as Decode answers a record with no values
	if len(vals) > 0 {
		r.Values = vals
	}
	if dec != nil {
		dec.values = vals
	}
	return d.Done()
}
