// Package state holds one entity's window state as the processor keeps it in goka's group table:
// its open windows with their encoded accumulators, the source offsets it has applied (the fence
// that makes replays harmless) and the partition stream time it last saw; and its compact,
// versioned binary encoding.
//
// It must never be the reason a closed window outlives the processor's final retention (pruning
// keeps the state bounded by open windows) and never forget a fence: forgetting one would let a replayed record count twice.
package state

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/abacus-stream/abacus/internal/wire"
	"github.com/abacus-stream/abacus/windows"
)

// Version is the encoding version Encode writes.
const Version = 1

// Fence is the highest source offset applied to this entity from one source partition.
type Fence struct {
	Topic     string
	Partition int32
	Offset    int64
}

// Window is one open window (or a closed one whose final total was emitted recently) of one aggregate set, with its accumulators in their own encodings
// (one per aggregation, in the set's declaration order).
type Window struct {
	Set      uint16 // index of the aggregate set in the topology
	Start    int64  // ms, inclusive
	End      int64  // ms, exclusive
	Revision uint64 // events applied to this window; orders the totals a sink receives
	LastEmit int64  // wall-clock ms of the last early firing, 0 if none
	Aggs     [][]byte
}

// Span is the window's time span.
func (w *Window) Span() windows.Window { return windows.Window{Start: w.Start, End: w.End} }

// Entity is everything the processor keeps for one entity.
type Entity struct {
	StreamTime int64 // partition stream time after this entity's last update, ms
	Fences     []Fence
	Windows    []Window
}

// Applied reports whether the record at (topic, partition, offset) has already been applied.
func (e *Entity) Applied(topic string, partition int32, offset int64) bool {
	for _, f := range e.Fences {
		if f.Topic == topic && f.Partition == partition {
			return offset <= f.Offset
		}
	}
	return false
}

// Advance records that the record at (topic, partition, offset) has been applied.
func (e *Entity) Advance(topic string, partition int32, offset int64) {
	for i := range e.Fences {
		f := &e.Fences[i]
		if f.Topic == topic && f.Partition == partition {
			f.Offset = max(f.Offset, offset)
			return
		}
	}
	e.Fences = append(e.Fences, Fence{Topic: topic, Partition: partition, Offset: offset})
}

// Closed reports whether window w is closed as far as this state knows: the partition stream
// time recorded at the entity's last write has reached its end plus grace. The processor may have
// closed it since (closing does not write the entity), so readers of the table that must not show
// a closed window as open can only use this as a lower bound.
func (e *Entity) Closed(w Window, grace int64) bool { return w.Span().Closed(grace, e.StreamTime) }

// Find returns the index of the window of set with the given start, or -1.
func (e *Entity) Find(set uint16, start int64) int {
	for i, w := range e.Windows {
		if w.Set == set && w.Start == start {
			return i
		}
	}
	return -1
}

// Append appends the version-1 encoding of e to b:
//
//	byte version, varint stream time,
//	uvarint #fences, each: uvarint len + topic, varint partition, varint offset,
//	uvarint #windows, each: uvarint set, varint start, uvarint end-start, uvarint revision,
//	  varint last emit, uvarint flags (reserved, 0), uvarint #aggs, each: uvarint len + bytes.
func (e *Entity) Append(b []byte) []byte {
	b = append(b, Version)
	b = binary.AppendVarint(b, e.StreamTime)
	b = binary.AppendUvarint(b, uint64(len(e.Fences)))
	for _, f := range e.Fences {
		b = binary.AppendUvarint(b, uint64(len(f.Topic)))
		b = append(b, f.Topic...)
		b = binary.AppendVarint(b, int64(f.Partition))
		b = binary.AppendVarint(b, f.Offset)
	}
	b = binary.AppendUvarint(b, uint64(len(e.Windows)))
	for _, w := range e.Windows {
		b = binary.AppendUvarint(b, uint64(w.Set))
		b = binary.AppendVarint(b, w.Start)
		b = binary.AppendUvarint(b, uint64(w.End-w.Start))
		b = binary.AppendUvarint(b, w.Revision)
		b = binary.AppendVarint(b, w.LastEmit)
		b = binary.AppendUvarint(b, 0) // flags, reserved
		b = binary.AppendUvarint(b, uint64(len(w.Aggs)))
		for _, a := range w.Aggs {
			b = binary.AppendUvarint(b, uint64(len(a)))
			b = append(b, a...)
		}
	}
	return b
}

// ErrCorrupt is wrapped by every decoding error.
var ErrCorrupt = errors.New("corrupt entity state")

// Decode parses an encoding written by Append. The accumulators alias b.
func Decode(b []byte) (*Entity, error) {
	d := wire.NewReader(b, ErrCorrupt)
	if v := d.Byte(); d.Err() == nil && v != Version {
		return nil, fmt.Errorf("%w: unknown version %d", ErrCorrupt, v)
	}
	e := &Entity{StreamTime: d.Varint()}
	nf := d.Count()
	if nf > 0 {
		e.Fences = make([]Fence, 0, nf)
	}
	for i := 0; i < nf && d.Err() == nil; i++ {
		e.Fences = append(e.Fences, Fence{Topic: d.String(), Partition: int32(d.Varint()), Offset: d.Varint()})
	}
	nw := d.Count()
	if nw > 0 {
		e.Windows = make([]Window, 0, nw)
	}
	for i := 0; i < nw && d.Err() == nil; i++ {
		w := Window{Set: uint16(d.Uvarint()), Start: d.Varint()}
		w.End = w.Start + int64(d.Uvarint())
		w.Revision = d.Uvarint()
		w.LastEmit = d.Varint()
		d.Uvarint() // flags, reserved
		na := d.Count()
		w.Aggs = make([][]byte, 0, na)
		for j := 0; j < na && d.Err() == nil; j++ {
			w.Aggs = append(w.Aggs, d.Bytes())
		}
		e.Windows = append(e.Windows, w)
	}
	if err := d.Done(); err != nil {
		return nil, err
	}
	return e, nil
}

// Codec is the goka codec of the group table: values are *Entity.
type Codec struct{}

// Encode implements goka.Codec.
func (Codec) Encode(v any) ([]byte, error) {
	e, ok := v.(*Entity)
	if !ok {
		return nil, fmt.Errorf("state codec: cannot encode %T, want *state.Entity", v)
	}
	return e.Append(make([]byte, 0, 64)), nil
}

// Decode implements goka.Codec. It copies data, because goka may reuse the buffer.
func (Codec) Decode(data []byte) (any, error) {
	return Decode(append([]byte(nil), data...))
}
