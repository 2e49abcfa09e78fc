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
	}
	b := s.building
	n := len(b.cells)
	cells, err := s.enc.Encode(rec, b.cells)
	var skip *SkipError
	switch {
	case errors.As(err, &skip):
		b.cells = b.cells[:n]
		s.m.skippedRecord(string(deadletter.ReasonOf(err, deadletter.Undecodable)))
	case err != nil:
		b.cells = b.cells[:n]
		reason := deadletter.ReasonOf(err, deadletter.Undecodable)
		b.dead = append(b.dead, deadLetter{rec: rec, reason: reason, detail: err.Error()})
		s.m.deadLettered(string(reason))
	default:
		b.cells = cells
		for i := n; i < len(cells); i++ {
			b.src = append(b.src, rec)
			b.bytes += cells[i].Size()
		}
		if s.cfg.TTL > 0 {
			s.checkTTL(cells[n:])
		}
	}
	b.records++
	b.advance(rec)
	s.m.recordsIn(1)
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
