package sinks

import (
	"errors"
	"time"

	"github.com/abacus-stream/abacus/deadletter"
	"github.com/abacus-stream/abacus/store"
	"github.com/twmb/franz-go/pkg/kgo"
)

// add buffers one record's cells (or its dead letter) in the batch being built. Every record
// polled is taken, even of a partition not (or no longer) marked assigned: skipping one while
// committing later records of its partition would lose it, and commits are limited to the
// partitions owned at commit time anyway.
func (s *FlushThenCommit) add(rec *kgo.Record) {
	if s.building == nil {
		s.building = newBatch()
		// Sized like the last batch written: a batch grown from empty copies its cells over
		// and over while it fills.
		b := s.building
		b.cells, b.src = make([]store.Cell, 0, s.cellsHint), make([]*kgo.Record, 0, s.cellsHint)
	}
	b := s.building
	n := len(b.cells)
	cells, err := s.enc.Encode(rec, b.cells)
	switch {
	case err == nil:
		b.cells = cells
		for i := n; i < len(cells); i++ {
			b.src = append(b.src, rec)
			b.bytes += cells[i].Size()
		}
		if s.cfg.TTL > 0 {
			s.checkTTL(cells[n:])
		}
	case isSkip(err):
		b.cells = b.cells[:n]
		s.m.skippedRecord(string(deadletter.ReasonOf(err, deadletter.Undecodable)))
	default:
		b.cells = b.cells[:n]
		reason := deadletter.ReasonOf(err, deadletter.Undecodable)
		b.dead = append(b.dead, deadLetter{rec: rec, reason: reason, detail: err.Error()})
		s.m.deadLettered(string(reason))
	}
	b.records++
	b.advance(rec)
	s.m.recordsIn(1)
}

// isSkip reports whether err is a SkipError. (Not inline in add: errors.As's target escapes,
// which would cost every record an allocation.)
func isSkip(err error) bool {
	var skip *SkipError
	return errors.As(err, &skip)
}

// checkTTL counts cells that the table's TTL expires on arrival, and warns about them.
func (s *FlushThenCommit) checkTTL(cells []store.Cell) {
	now := time.Now()
	limit := now.Add(-s.cfg.TTL).UnixMilli()
	for i := range cells {
		if cells[i].Timestamp >= limit {
			continue
		}
		s.m.expiredOnArrival()
		if now.Sub(s.lastTTLWarning) >= time.Minute {
			s.lastTTLWarning = now
			s.log.Warn("cells older than the table's TTL expire as soon as they are written (a backfill beyond the TTL?)",
				"table", cells[i].Table, "ttl", s.cfg.TTL, "cell_time", time.UnixMilli(cells[i].Timestamp).UTC())
		}
	}
}
