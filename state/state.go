// Package state holds what the processor keeps in goka's group table: per entity, its windows
// with their encoded accumulators, the source offsets it has applied (the fences that make
// replays harmless), the watermarks of the inputs at its last write and the records below its
// fences whose late records may not be in Kafka yet (pending); per partition, a record of the
// partition's own (its idle advances, its inputs' watermarks, clocks and done offsets, the
// topology layouts its entities were written with, its sets' graces). And their compact,
// versioned binary encodings.
//
// It must never forget a fence of a window still open (a replayed record would count twice), and
// it holds closed windows only until their final total is acknowledged, so that the table follows
// the open windows.
package state

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"

	"github.com/abacus-stream/abacus/internal/wire"
	"github.com/abacus-stream/abacus/windows"
)

// Version is the entity encoding version Append writes for an entity with no pending late
// records; one with some is written as VersionPending. Decode reads both, and version 1.
const Version = 2

// VersionPending is the encoding version of an entity with pending late records (Entity.Pending).
const VersionPending = 3

// partitionTag opens the encoding of a Partition record (entity encodings open with their version).
const partitionTag = 'P'

// TopicID is the 32-bit name a fence or an origin gives a topic: writing the topic's name into
// every entity would be most of its state. Two sources of one topology whose IDs collide are
// refused when the processor starts.
func TopicID(topic string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(topic))
	return h.Sum32()
}

// Fence is the highest source offset applied to this entity from one input partition (an origin:
// a source topic and partition), and the origin's watermark (the largest event time applied from
// it in the whole partition) at that write.
type Fence struct {
	Topic     uint32 // TopicID of the source topic
	Partition int32
	Offset    int64
	Watermark int64
}

// Window is one window of one aggregate set, with its accumulators in their own encodings (one per
// aggregation, in the order of the entity's layout).
type Window struct {
	Set      uint16 // index of the aggregate set in the entity's layout
	Start    int64  // ms, inclusive
	End      int64  // ms, exclusive
	Revision uint64 // events applied to this window; orders the totals a sink receives
	LastEmit int64  // wall-clock ms of the last early firing, 0 if none
	// Key is, in an entity, the rollup key its contribution to a rollup set's window is for; in
	// the state of a rollup key's owner, "" for the window's merged total, or SlotKey(p) for the
	// partial total of source partition p. Empty for an entity set's window.
	Key string
	// Final marks an owner's slot whose final partial total is merged into the window's total;
	// such a slot keeps no accumulators.
	Final bool
	Aggs  [][]byte
	// Absent lists the aggregations (positions in Aggs) the window has no value of: aggregations
	// added to its set while it was open, which did not see its earlier events. Its totals leave
	// them out. Nil for nearly every window.
	Absent []int
}

// Window flags (the encoding's flags field).
const (
	flagKey    = 1 << 0 // a string key follows the flags
	flagFinal  = 1 << 1
	flagAbsent = 1 << 2 // the absent aggregations follow (after the key)
)

// IsAbsent reports whether the window has no value of aggregation k.
func (w *Window) IsAbsent(k int) bool { return slices.Contains(w.Absent, k) }

// AddAbsent marks aggregation k absent from the window.
func (w *Window) AddAbsent(k int) {
	if !w.IsAbsent(k) {
		w.Absent = append(slices.Clip(w.Absent), k)
		slices.Sort(w.Absent)
	}
}

// SlotKey is the Window.Key of source partition p's partial total in a rollup owner's state.
func SlotKey(p int32) string { return "#" + strconv.Itoa(int(p)) }

// SlotOf is the source partition of a slot key, and whether key is one.
func SlotOf(key string) (int32, bool) {
	if len(key) < 2 || key[0] != '#' {
		return 0, false
	}
	n, err := strconv.ParseInt(key[1:], 10, 32)
	return int32(n), err == nil
}

// Span is the window's time span.
func (w *Window) Span() windows.Window { return windows.Window{Start: w.Start, End: w.End} }

// Entity is everything the processor keeps for one entity.
type Entity struct {
	// Layout names the topology layout its windows follow (Layout.Hash); 0 in version-1 state,
	// which followed the topology of its time by position.
	Layout uint32
	// LayoutDesc, when set, describes Layout in the entity itself: the processor writes it until
	// its partition's record, which describes the layouts once for all entities, is acknowledged
	// with this layout, so that a restart under another topology can always read the entity.
	// Decode leaves it nil and keeps the description's bytes (Described) for who needs them.
	LayoutDesc *Layout
	layoutRaw  []byte
	StreamTime int64 // partition stream time after this entity's last write, ms
	Fences     []Fence
	Windows    []Window
	// Pending are records of the entity below its fences that were late for every window and
	// whose late records Kafka had not acknowledged when the entity was written. The fence that
	// covers such a record is written without waiting for its late record; a replay finds it here
	// and sends the late record again, instead of skipping it as applied.
	Pending []Pending
}

// Pending is a source record (an origin and an offset) whose late records a replay sends again.
type Pending struct {
	Topic     uint32 // TopicID
	Partition int32
	Offset    int64
}

// IsPending reports whether the record at (topic, partition, offset) is one of the entity's
// pending late records.
func (e *Entity) IsPending(topic uint32, partition int32, offset int64) bool {
	for _, p := range e.Pending {
		if p.Topic == topic && p.Partition == partition && p.Offset == offset {
			return true
		}
	}
	return false
}

// Described returns the layout the entity describes in itself (LayoutDesc, or the description
// Decode read), or nil.
func (e *Entity) Described() (*Layout, error) {
	if e.LayoutDesc != nil || e.layoutRaw == nil {
		return e.LayoutDesc, nil
	}
	d := wire.NewReader(e.layoutRaw, ErrCorrupt)
	sets, err := readSets(d)
	if err != nil {
		return nil, err
	}
	if d.Len() > 0 { // the kinds, in descriptions written since they are recorded
		if err := readKinds(d, sets); err != nil {
			return nil, err
		}
	}
	if err := d.Done(); err != nil {
		return nil, err
	}
	return &Layout{Hash: e.Layout, Sets: sets}, nil
}

// Clone returns a copy that can be changed without changing e: its fences and windows are its
// own (accumulator encodings are shared: they are replaced, never written into).
func (e *Entity) Clone() *Entity {
	c := *e
	c.Fences = append([]Fence(nil), e.Fences...)
	c.Windows = append([]Window(nil), e.Windows...)
	c.Pending = append([]Pending(nil), e.Pending...)
	return &c
}

// Undescribe drops the entity's description of its layout.
func (e *Entity) Undescribe() { e.LayoutDesc, e.layoutRaw = nil, nil }

// Applied reports whether the record at (topic, partition, offset) has already been applied.
func (e *Entity) Applied(topic uint32, partition int32, offset int64) bool {
	for _, f := range e.Fences {
		if f.Topic == topic && f.Partition == partition {
			return offset <= f.Offset
		}
	}
	return false
}

// Advance records that the record at (topic, partition, offset) has been applied, with the
// origin's watermark after it.
func (e *Entity) Advance(topic uint32, partition int32, offset, watermark int64) {
	for i := range e.Fences {
		f := &e.Fences[i]
		if f.Topic == topic && f.Partition == partition {
			f.Offset = max(f.Offset, offset)
			f.Watermark = max(f.Watermark, watermark)
			return
		}
	}
	e.Fences = append(e.Fences, Fence{Topic: topic, Partition: partition, Offset: offset, Watermark: watermark})
}

// Closed reports whether window w is closed as far as this state knows: the partition stream
// time recorded at the entity's last write has reached its end plus grace. The processor may have
// closed it since (closing does not write the entity), so readers of the table that must not show
// a closed window as open can only use this as a lower bound.
func (e *Entity) Closed(w Window, grace int64) bool { return w.Span().Closed(grace, e.StreamTime) }

// Find returns the index of the window of set with the given start (and no key), or -1.
func (e *Entity) Find(set uint16, start int64) int { return e.FindKey(set, start, "") }

// FindKey returns the index of the window of set with the given start and key, or -1.
func (e *Entity) FindKey(set uint16, start int64, key string) int {
	for i, w := range e.Windows {
		if w.Set == set && w.Start == start && w.Key == key {
			return i
		}
	}
	return -1
}

// Append appends the version-2 encoding of e to b. Times are written as differences from the
// stream time, which they are close to, so they take two or three bytes instead of six:
//
//	byte 2, 4 bytes layout (big endian), uvarint len + layout description (0: none; see
//	  Partition.Append for its form), varint stream time,
//	uvarint #fences, each: 4 bytes topic ID, varint partition, varint offset,
//	  varint watermark - stream time,
//	uvarint #windows, each: uvarint set, varint start - stream time, uvarint end - start,
//	  uvarint revision, varint last emit, uvarint flags (1: a key follows, 2: final, 4: absent
//	  aggregations follow), [uvarint len + key], [uvarint #absent, each uvarint position],
//	  uvarint #aggs, each: uvarint len + bytes.
//
// An entity with pending late records is written as version 3: byte 3, then the same, then
// uvarint #pending, each: 4 bytes topic ID, varint partition, varint offset. Entities without,
// nearly all, keep the version-2 bytes.
func (e *Entity) Append(b []byte) []byte {
	if len(e.Pending) > 0 {
		b = append(b, VersionPending)
	} else {
		b = append(b, Version)
	}
	b = binary.BigEndian.AppendUint32(b, e.Layout)
	switch {
	case e.LayoutDesc != nil:
		desc := e.LayoutDesc.appendSets(nil)
		b = binary.AppendUvarint(b, uint64(len(desc)))
		b = append(b, desc...)
	case e.layoutRaw != nil:
		b = binary.AppendUvarint(b, uint64(len(e.layoutRaw)))
		b = append(b, e.layoutRaw...)
	default:
		b = append(b, 0)
	}
	b = binary.AppendVarint(b, e.StreamTime)
	b = binary.AppendUvarint(b, uint64(len(e.Fences)))
	for _, f := range e.Fences {
		b = binary.BigEndian.AppendUint32(b, f.Topic)
		b = binary.AppendVarint(b, int64(f.Partition))
		b = binary.AppendVarint(b, f.Offset)
		b = binary.AppendVarint(b, f.Watermark-e.StreamTime)
	}
	b = binary.AppendUvarint(b, uint64(len(e.Windows)))
	for _, w := range e.Windows {
		b = binary.AppendUvarint(b, uint64(w.Set))
		b = binary.AppendVarint(b, w.Start-e.StreamTime)
		b = binary.AppendUvarint(b, uint64(w.End-w.Start))
		b = binary.AppendUvarint(b, w.Revision)
		b = binary.AppendVarint(b, w.LastEmit)
		var flags uint64
		if w.Key != "" {
			flags |= flagKey
		}
		if w.Final {
			flags |= flagFinal
		}
		if len(w.Absent) > 0 {
			flags |= flagAbsent
		}
		b = binary.AppendUvarint(b, flags)
		if w.Key != "" {
			b = wire.AppendString(b, w.Key)
		}
		if len(w.Absent) > 0 {
			b = binary.AppendUvarint(b, uint64(len(w.Absent)))
			for _, k := range w.Absent {
				b = binary.AppendUvarint(b, uint64(k))
			}
		}
		b = binary.AppendUvarint(b, uint64(len(w.Aggs)))
		for _, a := range w.Aggs {
			b = binary.AppendUvarint(b, uint64(len(a)))
			b = append(b, a...)
		}
	}
	if len(e.Pending) > 0 {
		b = binary.AppendUvarint(b, uint64(len(e.Pending)))
		for _, p := range e.Pending {
			b = binary.BigEndian.AppendUint32(b, p.Topic)
			b = binary.AppendVarint(b, int64(p.Partition))
			b = binary.AppendVarint(b, p.Offset)
		}
	}
	return b
}

// ErrCorrupt is wrapped by every decoding error.
var ErrCorrupt = errors.New("corrupt state")

// Decode parses an entity encoding written by Append (version 2) or by version 1. The
// accumulators alias b.
func Decode(b []byte) (*Entity, error) {
	d := wire.NewReader(b, ErrCorrupt)
	v := d.Byte()
	if d.Err() == nil && v != 1 && v != Version && v != VersionPending {
		return nil, fmt.Errorf("%w: not an entity (version byte %d)", ErrCorrupt, v)
	}
	e := &Entity{}
	if v >= Version {
		if d.Len() < 4 {
			return nil, fmt.Errorf("%w: truncated layout", ErrCorrupt)
		}
		e.Layout = binary.BigEndian.Uint32(d.Next(4))
		if desc := d.Bytes(); len(desc) > 0 {
			e.layoutRaw = desc
		}
	}
	e.StreamTime = d.Varint()
	nf := d.Count()
	if nf > 0 {
		e.Fences = make([]Fence, 0, nf)
	}
	for i := 0; i < nf && d.Err() == nil; i++ {
		var f Fence
		if v == 1 {
			f = Fence{Topic: TopicID(d.String()), Partition: int32(d.Varint()), Offset: d.Varint(), Watermark: e.StreamTime}
		} else {
			if d.Len() < 4 {
				return nil, fmt.Errorf("%w: truncated fence", ErrCorrupt)
			}
			f.Topic = binary.BigEndian.Uint32(d.Next(4))
			f.Partition, f.Offset, f.Watermark = int32(d.Varint()), d.Varint(), d.Varint()+e.StreamTime
		}
		e.Fences = append(e.Fences, f)
	}
	nw := d.Count()
	if nw > 0 {
		e.Windows = make([]Window, 0, nw)
	}
	for i := 0; i < nw && d.Err() == nil; i++ {
		w := Window{Set: uint16(d.Uvarint()), Start: d.Varint()}
		if v >= Version {
			w.Start += e.StreamTime
		}
		w.End = w.Start + int64(d.Uvarint())
		w.Revision = d.Uvarint()
		w.LastEmit = d.Varint()
		flags := d.Uvarint()
		if flags&^(flagKey|flagFinal|flagAbsent) != 0 {
			return nil, fmt.Errorf("%w: window flags %#x unknown (written by a newer version?)", ErrCorrupt, flags)
		}
		if flags&flagKey != 0 {
			w.Key = d.String()
		}
		w.Final = flags&flagFinal != 0
		if flags&flagAbsent != 0 {
			n := d.Count()
			for j := 0; j < n && d.Err() == nil; j++ {
				w.Absent = append(w.Absent, int(d.Uvarint()))
			}
		}
		na := d.Count()
		w.Aggs = make([][]byte, 0, na)
		for j := 0; j < na && d.Err() == nil; j++ {
			w.Aggs = append(w.Aggs, d.Bytes())
		}
		for _, k := range w.Absent {
			if k >= na && d.Err() == nil {
				return nil, fmt.Errorf("%w: absent aggregation %d of a window of %d", ErrCorrupt, k, na)
			}
		}
		e.Windows = append(e.Windows, w)
	}
	if v == VersionPending {
		np := d.Count()
		for i := 0; i < np && d.Err() == nil; i++ {
			if d.Len() < 4 {
				return nil, fmt.Errorf("%w: truncated pending record", ErrCorrupt)
			}
			p := Pending{Topic: binary.BigEndian.Uint32(d.Next(4))}
			p.Partition, p.Offset = int32(d.Varint()), d.Varint()
			e.Pending = append(e.Pending, p)
		}
	}
	if err := d.Done(); err != nil {
		return nil, err
	}
	return e, nil
}

// Codec is the goka codec of the group table: values are *Entity, or *Partition under a
// partition's own key.
type Codec struct{}

// Encode implements goka.Codec.
func (Codec) Encode(v any) ([]byte, error) {
	switch x := v.(type) {
	case *Entity:
		return x.Append(make([]byte, 0, 64)), nil
	case *Partition:
		return x.Append(make([]byte, 0, 64)), nil
	}
	return nil, fmt.Errorf("state codec: cannot encode %T, want *state.Entity or *state.Partition", v)
}

// Decode implements goka.Codec. goka hands it a buffer it does not reuse (a fresh copy from
// LevelDB or from the changelog consumer), so the result may alias it.
func (Codec) Decode(data []byte) (any, error) {
	if len(data) > 0 && data[0] == partitionTag {
		return DecodePartition(data)
	}
	return Decode(data)
}
