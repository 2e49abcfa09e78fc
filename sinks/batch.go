package sinks

import (
	"hash/maphash"
	"time"

	"github.com/abacus-stream/abacus/store"
	"github.com/twmb/franz-go/pkg/kgo"
)

// batch is what one write lands and one commit covers.
type batch struct {
	cells   []store.Cell
	src     []*kgo.Record // src[i] produced cells[i]: where a permanent failure is reported
	dead    []deadLetter  // undecodable records, dead-lettered before any cell is written
	next    map[string]map[int32]kgo.EpochOffset
	records int // records consumed into the batch, written or dead-lettered
	bytes   int
	started time.Time

	// cellHashes holds a hash of every cell's coordinates once coalesced: two batches whose sets
	// meet are never written at once (a hash shared by different cells only costs concurrency).
	cellHashes map[uint64]int
	// done and err record the write's outcome, for committing in dispatch order.
	done bool
	err  error
}

func newBatch() *batch {
	return &batch{next: map[string]map[int32]kgo.EpochOffset{}, started: time.Now()}
}

// advance notes that every record of rec's partition up to rec is in the batch.
func (b *batch) advance(rec *kgo.Record) {
	ps := b.next[rec.Topic]
	if ps == nil {
		ps = map[int32]kgo.EpochOffset{}
		b.next[rec.Topic] = ps
	}
	ps[rec.Partition] = kgo.EpochOffset{Epoch: rec.LeaderEpoch, Offset: rec.Offset + 1}
}

func (b *batch) partitions() map[string][]int32 {
	out := make(map[string][]int32, len(b.next))
	for t, ps := range b.next {
		for p := range ps {
			out[t] = append(out[t], p)
		}
	}
	return out
}

// coalesce keeps, for every cell written more than once in the batch, only the value appended
// last: within a partition records arrive in offset order, so that is the newest total. HBase gives
// no order between the actions of one Multi, so sending both could leave the older one standing.
//
// Cells are told apart by a 64-bit hash of their coordinates, checked against the coordinates
// themselves; should two different cells ever share a hash, the batch is coalesced by full keys.
func (b *batch) coalesce() {
	if len(b.cells) < 2 {
		b.cellHashes = map[uint64]int{}
		for i := range b.cells {
			b.cellHashes[cellHash(&b.cells[i], seed)] = i
		}
		return
	}
	hashes := make([]uint64, len(b.cells))
	last := make(map[uint64]int, len(b.cells))
	dups := false
	for i := range b.cells {
		h := cellHash(&b.cells[i], seed)
		hashes[i] = h
		if j, ok := last[h]; ok {
			if !sameCell(&b.cells[j], &b.cells[i]) {
				b.coalesceByKey()
				return
			}
			dups = true
		}
		last[h] = i
	}
	b.cellHashes = last
	if !dups {
		return
	}
	b.keep(func(i int) bool { return last[hashes[i]] == i })
}

// coalesceByKey is coalesce by full cell keys, for the batch where two cells share a hash.
func (b *batch) coalesceByKey() {
	last := make(map[string]int, len(b.cells))
	for i := range b.cells {
		last[cellKey(&b.cells[i])] = i
	}
	b.keep(func(i int) bool { return last[cellKey(&b.cells[i])] == i })
	b.cellHashes = make(map[uint64]int, len(b.cells))
	for i := range b.cells {
		b.cellHashes[cellHash(&b.cells[i], seed)] = i
	}
}

// keep drops the cells for which ok is false, in place, keeping order.
func (b *batch) keep(ok func(i int) bool) {
	j := 0
	for i := range b.cells {
		if !ok(i) {
			continue
		}
		b.cells[j], b.src[j] = b.cells[i], b.src[i]
		j++
	}
	clear(b.cells[j:])
	clear(b.src[j:])
	b.cells, b.src = b.cells[:j], b.src[:j]
}

// without returns the batch less everything from the given partitions, or nil when nothing is left.
func (b *batch) without(parts map[string][]int32) *batch {
	drop := func(rec *kgo.Record) bool {
		for _, p := range parts[rec.Topic] {
			if p == rec.Partition {
				return true
			}
		}
		return false
	}
	out := newBatch()
	out.started = b.started
	for i := range b.cells {
		if !drop(b.src[i]) {
			out.cells = append(out.cells, b.cells[i])
			out.src = append(out.src, b.src[i])
			out.bytes += b.cells[i].Size()
		}
	}
	for _, d := range b.dead {
		if !drop(d.rec) {
			out.dead = append(out.dead, d)
		}
	}
	for t, ps := range b.next {
		for p, eo := range ps {
			if drop(&kgo.Record{Topic: t, Partition: p}) {
				continue
			}
			if out.next[t] == nil {
				out.next[t] = map[int32]kgo.EpochOffset{}
			}
			out.next[t][p] = eo
		}
	}
	if len(out.next) == 0 {
		return nil
	}
	// The record count only sizes batches; an estimate from the cells kept is enough.
	out.records = len(out.cells) + len(out.dead)
	return out
}

// seed hashes cell coordinates for the life of the process, so hashes of different batches compare.
var seed = maphash.MakeSeed()

// overlaps reports whether b and o may write a cell in common.
func (b *batch) overlaps(o *batch) bool {
	small, large := b.cellHashes, o.cellHashes
	if len(small) > len(large) {
		small, large = large, small
	}
	for h := range small {
		if _, ok := large[h]; ok {
			return true
		}
	}
	return false
}
