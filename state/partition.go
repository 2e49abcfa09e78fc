package state

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math"
	"slices"

	"github.com/abacus-stream/abacus/internal/wire"
)

// Partition is what a partition of the processor keeps about itself, under its own key in the
// table (its tick key): what cannot be found in its entities. The processor writes it from its
// ticks, and reads it back when it takes the partition over.
type Partition struct {
	// StreamTime is the partition's stream time when the record was written. It never goes
	// back, even when an input that joins later has older events; entities carry it too, but an
	// entity may leave the table, and this record keeps it.
	StreamTime int64
	// IdleStreamTime is the stream time the partition reached by idle advances (its inputs quiet
	// for the idle timeout). Once written it is applied: a window it closes is closed for good.
	IdleStreamTime int64
	// Origins are the partition's inputs (source topic and partition) with their watermarks and
	// the wall time each last advanced; entities written from an origin carry its watermark too,
	// but an entity may leave the table, and this record keeps the watermark it had.
	Origins []Origin
	// Layouts are the topology layouts the partition's entities were written with, so that a
	// topology that adds, removes or reorders sets and aggregations still reads them.
	Layouts []Layout
	// Graces are the grace of each aggregate set when the record was written, and the windows
	// that a grace raised since then keeps final (see SetGrace). Empty in version-1 records.
	Graces []SetGrace
	// Progress is, per source partition (by index), its stream time as it last told the partition
	// as the owner of rollup keys (math.MinInt64: nothing known). Records of version 2 kept only
	// this: every final partial total of a window closing at or before it was sent and
	// acknowledged, closing by the graces of the time; version 3 keeps RollupEnds for that.
	Progress []int64
	// RollupEnds is, per rollup set (by name), what the partition as the owner of rollup keys
	// knows of each source partition (by index): the final partial total of every window of the
	// set that ends at or before this time was sent and acknowledged (math.MinInt64: nothing
	// known). A window's end does not depend on the grace of whoever sent it, so this holds
	// whatever graces the senders ran with. Empty without rollups.
	RollupEnds []SetEnds
}

// SetEnds is what a rollup owner knows of the source partitions' final partial totals of one set:
// Ends[p] is the end up to which partition p sent every window's.
type SetEnds struct {
	Set  string
	Ends []int64
	// Live is, per source partition, from when it runs the set (SetGrace.LiveFrom there): the
	// owner gives no total to a window that started before.
	Live []int64
}

// SetGrace is what a partition keeps of an aggregate set's grace: the grace the set had when the
// record was written, and the windows that were final under an earlier, smaller grace. A window
// that had its final total keeps it: raising a set's grace must not reopen it, and with this
// the processor knows which windows those are whatever became of their state.
type SetGrace struct {
	Set   string
	Grace int64 // ms
	// FinalThrough: windows of the set that end at or before it are final, whatever the grace
	// says now (math.MinInt64: none). FinalAt is the stream time at which they were, which is
	// when the processor treats them as closing.
	FinalThrough int64
	FinalAt      int64
	// LiveFrom is the stream time at which the partition started running the set, when it was
	// added to a running topology (math.MinInt64: it ran from the group's start). A window that
	// started before missed the events before, and has no total (records of version 2 and
	// earlier do not keep it: math.MinInt64).
	LiveFrom int64
}

// Origin is one input of a partition.
type Origin struct {
	Topic       uint32 // TopicID
	Partition   int32
	Watermark   int64 // largest event time applied from it, ms
	LastAdvance int64 // wall ms when an event from it last advanced its watermark
	// Done is an offset of the origin such that every record up to it was processed and all it
	// wrote (totals, late records, dead letters, state) was acknowledged by Kafka; -1 when none
	// is known (version-1 records). A record at or below it that comes again is a replay, even
	// when its entity has left the table.
	Done int64
}

// Layout is the shape of a topology's state: its aggregate sets, in order, each with its window
// and its aggregations, in order. Entities refer to it by Hash.
type Layout struct {
	Hash uint32
	Sets []LayoutSet
}

// LayoutSet is one aggregate set of a Layout.
type LayoutSet struct {
	Name   string
	Window string // the window spec, e.g. "tumbling 60000": a set whose window changes cannot keep its state
	Aggs   []string
	// Kinds are the aggregations' kinds (plan.Agg.Kind), beside Aggs; empty in layouts written
	// before kinds were recorded, which can then not be checked.
	Kinds []string
}

// Kind returns the kind of aggregation k, or "" when the layout does not say.
func (s *LayoutSet) Kind(k int) string {
	if k < len(s.Kinds) {
		return s.Kinds[k]
	}
	return ""
}

// NewLayout returns the layout of sets with its hash.
func NewLayout(sets []LayoutSet) Layout {
	l := Layout{Sets: sets}
	h := fnv.New32a()
	h.Write(l.appendSets(nil))
	l.Hash = h.Sum32()
	if l.Hash == 0 {
		l.Hash = 1 // 0 means "no layout" (version-1 state)
	}
	return l
}

// appendSets appends the layout's sets, then, if any set has kinds, each set's kinds: readers of
// the first form (a description in version-2 state without kinds) find no bytes after the sets.
func (l *Layout) appendSets(b []byte) []byte {
	b = l.appendSetList(b)
	if !l.hasKinds() {
		return b
	}
	return l.appendKinds(b)
}

// appendSetList appends uvarint #sets, each: string name, string window, uvarint #aggs, each
// string.
func (l *Layout) appendSetList(b []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(l.Sets)))
	for _, s := range l.Sets {
		b = wire.AppendString(b, s.Name)
		b = wire.AppendString(b, s.Window)
		b = binary.AppendUvarint(b, uint64(len(s.Aggs)))
		for _, a := range s.Aggs {
			b = wire.AppendString(b, a)
		}
	}
	return b
}

func (l *Layout) hasKinds() bool {
	for _, s := range l.Sets {
		if len(s.Kinds) > 0 {
			return true
		}
	}
	return false
}

// appendKinds appends, per set, uvarint #kinds and each kind.
func (l *Layout) appendKinds(b []byte) []byte {
	for _, s := range l.Sets {
		b = binary.AppendUvarint(b, uint64(len(s.Kinds)))
		for _, k := range s.Kinds {
			b = wire.AppendString(b, k)
		}
	}
	return b
}

// readKinds reads what appendKinds wrote into sets.
func readKinds(d *wire.Reader, sets []LayoutSet) error {
	for i := range sets {
		n := d.Count()
		for k := 0; k < n && d.Err() == nil; k++ {
			sets[i].Kinds = append(sets[i].Kinds, d.String())
		}
	}
	return d.Err()
}

// Origin returns the partition's record of an origin, or nil.
func (p *Partition) Origin(topic uint32, partition int32) *Origin {
	for i := range p.Origins {
		if o := &p.Origins[i]; o.Topic == topic && o.Partition == partition {
			return o
		}
	}
	return nil
}

// Layout returns the layout with the given hash, or nil.
func (p *Partition) Layout(hash uint32) *Layout {
	for i := range p.Layouts {
		if p.Layouts[i].Hash == hash {
			return &p.Layouts[i]
		}
	}
	return nil
}

// partitionVersion is the version of the partition record Append writes; DecodePartition also
// reads versions 1 (no offsets, kinds or graces) and 2 (rollup progress by stream time).
const partitionVersion = 3

// Append appends the version-3 encoding of p:
//
//	byte 'P', byte 3 (version), varint stream time, varint idle stream time,
//	uvarint #origins, each: 4 bytes topic ID, varint partition, varint watermark, varint last
//	  advance, varint done offset,
//	uvarint #layouts, each: 4 bytes hash, uvarint #sets, each: string name, string window,
//	  uvarint #aggs, each string; then per set uvarint #kinds, each string,
//	uvarint #graces, each: string set, varint grace, varint final-through, varint final-at,
//	  varint live-from,
//	uvarint #rollup sets, each: string set, uvarint #partitions, each varint end and varint
//	  live-from,
//	uvarint #progress, each varint.
//
// Version 2 had no live-from in the graces, and ended after them with, only when it had some,
// uvarint #progress, each varint.
func (p *Partition) Append(b []byte) []byte {
	b = append(b, partitionTag, partitionVersion)
	b = binary.AppendVarint(b, p.StreamTime)
	b = binary.AppendVarint(b, p.IdleStreamTime)
	b = binary.AppendUvarint(b, uint64(len(p.Origins)))
	for _, o := range p.Origins {
		b = binary.BigEndian.AppendUint32(b, o.Topic)
		b = binary.AppendVarint(b, int64(o.Partition))
		b = binary.AppendVarint(b, o.Watermark)
		b = binary.AppendVarint(b, o.LastAdvance)
		b = binary.AppendVarint(b, o.Done)
	}
	b = binary.AppendUvarint(b, uint64(len(p.Layouts)))
	for _, l := range p.Layouts {
		b = binary.BigEndian.AppendUint32(b, l.Hash)
		b = l.appendSetList(b)
		b = l.appendKinds(b)
	}
	b = binary.AppendUvarint(b, uint64(len(p.Graces)))
	for _, g := range p.Graces {
		b = wire.AppendString(b, g.Set)
		b = binary.AppendVarint(b, g.Grace)
		b = binary.AppendVarint(b, g.FinalThrough)
		b = binary.AppendVarint(b, g.FinalAt)
		b = binary.AppendVarint(b, g.LiveFrom)
	}
	b = binary.AppendUvarint(b, uint64(len(p.RollupEnds)))
	for _, se := range p.RollupEnds {
		b = wire.AppendString(b, se.Set)
		b = binary.AppendUvarint(b, uint64(len(se.Ends)))
		for i, t := range se.Ends {
			live := int64(math.MinInt64)
			if i < len(se.Live) {
				live = se.Live[i]
			}
			b = binary.AppendVarint(b, t)
			b = binary.AppendVarint(b, live)
		}
	}
	b = binary.AppendUvarint(b, uint64(len(p.Progress)))
	for _, t := range p.Progress {
		b = binary.AppendVarint(b, t)
	}
	return b
}

// DecodePartition parses an encoding written by Partition.Append, of version 1, 2 or 3.
func DecodePartition(b []byte) (*Partition, error) {
	d := wire.NewReader(b, ErrCorrupt)
	tag, v := d.Byte(), d.Byte()
	if d.Err() == nil && (tag != partitionTag || v < 1 || v > partitionVersion) {
		return nil, fmt.Errorf("%w: not a partition record (%q version %d)", ErrCorrupt, tag, v)
	}
	p := &Partition{StreamTime: d.Varint(), IdleStreamTime: d.Varint()}
	n := d.Count()
	for i := 0; i < n && d.Err() == nil; i++ {
		if d.Len() < 4 {
			return nil, fmt.Errorf("%w: truncated origin", ErrCorrupt)
		}
		o := Origin{Topic: binary.BigEndian.Uint32(d.Next(4)), Done: -1}
		o.Partition, o.Watermark, o.LastAdvance = int32(d.Varint()), d.Varint(), d.Varint()
		if v >= 2 {
			o.Done = d.Varint()
		}
		p.Origins = append(p.Origins, o)
	}
	n = d.Count()
	for i := 0; i < n && d.Err() == nil; i++ {
		if d.Len() < 4 {
			return nil, fmt.Errorf("%w: truncated layout", ErrCorrupt)
		}
		l := Layout{Hash: binary.BigEndian.Uint32(d.Next(4))}
		sets, err := readSets(d)
		if err != nil {
			return nil, err
		}
		if v >= 2 {
			if err := readKinds(d, sets); err != nil {
				return nil, err
			}
		}
		l.Sets = sets
		p.Layouts = append(p.Layouts, l)
	}
	if v >= 2 {
		n = d.Count()
		for i := 0; i < n && d.Err() == nil; i++ {
			g := SetGrace{Set: d.String(), Grace: d.Varint(), FinalThrough: d.Varint(), FinalAt: d.Varint(), LiveFrom: math.MinInt64}
			if v >= 3 {
				g.LiveFrom = d.Varint()
			}
			p.Graces = append(p.Graces, g)
		}
	}
	switch {
	case v == 2 && d.Len() > 0:
		n = d.Count()
		for i := 0; i < n && d.Err() == nil; i++ {
			p.Progress = append(p.Progress, d.Varint())
		}
	case v >= 3:
		n = d.Count()
		for i := 0; i < n && d.Err() == nil; i++ {
			se := SetEnds{Set: d.String()}
			np := d.Count()
			for j := 0; j < np && d.Err() == nil; j++ {
				se.Ends = append(se.Ends, d.Varint())
				se.Live = append(se.Live, d.Varint())
			}
			p.RollupEnds = append(p.RollupEnds, se)
		}
		n = d.Count()
		for i := 0; i < n && d.Err() == nil; i++ {
			p.Progress = append(p.Progress, d.Varint())
		}
	}
	if err := d.Done(); err != nil {
		return nil, err
	}
	return p, nil
}

// Grace returns the record's grace of the named set, or nil.
func (p *Partition) Grace(set string) *SetGrace {
	for i := range p.Graces {
		if p.Graces[i].Set == set {
			return &p.Graces[i]
		}
	}
	return nil
}

// readSets reads what Layout.appendSetList wrote.
func readSets(d *wire.Reader) ([]LayoutSet, error) {
	var sets []LayoutSet
	ns := d.Count()
	for j := 0; j < ns && d.Err() == nil; j++ {
		s := LayoutSet{Name: d.String(), Window: d.String()}
		na := d.Count()
		for k := 0; k < na && d.Err() == nil; k++ {
			s.Aggs = append(s.Aggs, d.String())
		}
		sets = append(sets, s)
	}
	return sets, d.Err()
}

// AddLayout records l if the partition does not know it yet, and reports whether it was new.
func (p *Partition) AddLayout(l Layout) bool {
	if p.Layout(l.Hash) != nil {
		return false
	}
	p.Layouts = append(p.Layouts, l)
	slices.SortFunc(p.Layouts, func(a, b Layout) int { return int(int64(a.Hash) - int64(b.Hash)) })
	return true
}
