package sinks

import (
	"context"
	"fmt"
	"time"

	"github.com/abacus-stream/abacus/deadletter"
	"github.com/abacus-stream/abacus/store"
	"github.com/twmb/franz-go/pkg/kgo"
)

// write lands a batch: dead letters first, then the cells, retrying what failed for a transient
// cause until it lands or ctx ends; permanent failures send their source records to the dead-letter
// topic and are never resent. Then it moves the epochs of the sets whose settled windows the
// batch wrote (AggregatesEncoder.EpochCells), before the batch counts as landed.
func (s *FlushThenCommit) write(ctx context.Context, b *batch) error {
	if err := s.writeCells(ctx, b); err != nil {
		return err
	}
	return s.moveEpochs(ctx, b)
}

// epochEncoder is an Encoder whose cells may need the epochs moved once they land.
type epochEncoder interface {
	EpochCells(cells []store.Cell, now time.Time) []store.Cell
}

// moveEpochs writes the epoch cells of a landed batch, retrying until they land or ctx ends. A
// permanent failure (no key index table) stops the sink: the batch is then not committed, as a
// reader's cache could otherwise keep missing its windows.
func (s *FlushThenCommit) moveEpochs(ctx context.Context, b *batch) error {
	ep, ok := s.enc.(epochEncoder)
	if !ok {
		return nil
	}
	cells := ep.EpochCells(b.cells, time.Now())
	backoff := s.cfg.RetryBackoff
	for len(cells) > 0 {
		failed, err := s.store.Write(ctx, cells)
		if err == nil && len(failed) == 0 {
			s.m.epochsMoved(len(cells))
			return nil
		}
		if err == nil {
			if failed[0].Permanent {
				return fmt.Errorf("sinks: moving the epochs of sets with settled windows: %w", failed[0].Err)
			}
			err = failed[0].Err
		}
		s.log.Warn("epoch write failed; retrying", "cells", len(cells), "err", err, "backoff", backoff)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, s.cfg.MaxRetryBackoff)
	}
	return nil
}

// writeCells is write's landing of the batch's dead letters and cells.
func (s *FlushThenCommit) writeCells(ctx context.Context, b *batch) error {
	if err := s.produceDead(ctx, b.dead); err != nil {
		return err
	}
	// pending holds the indexes into b.cells still to write, nil while that is all of them (the
	// first round, and every round of a write that failed as a whole): then b.cells is written
	// as it is, not copied.
	var pending []int
	backoff := s.cfg.RetryBackoff
	var cells []store.Cell
	for len(b.cells) > 0 {
		cells = b.cells
		if pending != nil {
			cells = make([]store.Cell, 0, len(pending))
			for _, i := range pending {
				cells = append(cells, b.cells[i])
			}
		}
		t0 := time.Now()
		failed, err := s.store.Write(ctx, cells)
		s.m.wrote(len(cells), b.bytes, time.Since(t0))
		if err == nil && len(failed) == 0 {
			return nil
		}
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			s.m.failedActions("unavailable", len(cells))
			s.log.Warn("write failed; retrying the batch", "cells", len(cells), "err", err, "backoff", backoff)
		} else {
			retry, dead, err := s.sortFailures(b, pending, failed)
			if err != nil {
				return err
			}
			if err := s.produceDead(ctx, dead); err != nil {
				return err
			}
			for range dead {
				s.m.deadLettered(string(deadletter.Rejected))
			}
			if len(retry) == 0 {
				return nil
			}
			pending = retry
			// The store reports a cell retriable only after its own rounds of retries with
			// backoff (store.Writer), so waiting longer and longer here as well would only add up
			// to MaxRetryBackoff after the cause is gone (a region reopened elsewhere). The first
			// wait is enough to keep a store that fails at once from being hammered.
			s.log.Warn("cells failed; retrying them", "cells", len(pending), "first", failed[0].Err, "backoff", s.cfg.RetryBackoff)
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(s.cfg.RetryBackoff):
			}
			continue
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, s.cfg.MaxRetryBackoff)
	}
	return nil
}

// sortFailures splits the cells a write reported failed into those to resend (indexes into
// b.cells) and the dead letters of those refused for good: one per source record, however many of
// its cells HBase refused, so a record is set aside once. pending maps the write's cell indexes to
// b.cells (nil: the write was of b.cells itself).
func (s *FlushThenCommit) sortFailures(b *batch, pending []int, failed []store.CellError) ([]int, []deadLetter, error) {
	var retry []int
	var dead []deadLetter
	seen := map[*kgo.Record]bool{}
	written := len(b.cells)
	if pending != nil {
		written = len(pending)
	}
	for _, f := range failed {
		if f.Index < 0 || f.Index >= written {
			return nil, nil, fmt.Errorf("sinks: store reported failure of cell %d of %d", f.Index, written)
		}
		orig := f.Index
		if pending != nil {
			orig = pending[f.Index]
		}
		if !f.Permanent {
			retry = append(retry, orig)
			s.m.failedActions("retriable", 1)
			continue
		}
		s.m.failedActions("permanent", 1)
		rec := b.src[orig]
		if !seen[rec] {
			seen[rec] = true
			dead = append(dead, deadLetter{rec: rec, reason: deadletter.Rejected, detail: f.Err.Error()})
		}
	}
	return retry, dead, nil
}
