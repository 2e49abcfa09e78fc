package sinks

import "time"

// step takes finished writes' results, starts a write when one is due and allowed, and holds or
// releases the poll. Called with mu held.
func (s *FlushThenCommit) step() {
	for more := true; more; {
		select {
		case r := <-s.done:
			s.finish(r)
		default:
			more = false
		}
	}
	// The poll is held only while the batch being built is full and cannot go out; whatever
	// emptied it (a write, a revoke's drain, a loss) must release it.
	b := s.building
	if b == nil {
		s.release()
		return
	}
	full := b.records >= s.cfg.MaxBatchRecords || b.bytes >= s.cfg.MaxBatchBytes
	due := full || s.flushNow || time.Since(b.started) >= s.cfg.FlushInterval
	if due && s.canDispatch() {
		s.dispatch()
		s.release()
		return
	}
	if full {
		s.holdPoll(b.partitions())
	} else {
		s.release()
	}
}

// canDispatch reports whether the batch being built may be written now: fewer writes than the
// limit run, and none of them writes a cell it holds (invariant 6: a later value must not race an
// earlier one for the same cell).
func (s *FlushThenCommit) canDispatch() bool {
	if len(s.inflight) == 0 {
		return true
	}
	if len(s.inflight) >= s.cfg.MaxWritesInFlight {
		return false
	}
	s.building.coalesce()
	for _, w := range s.inflight {
		if !w.done && s.building.overlaps(w) {
			return false
		}
	}
	return true
}

// maxCellsHint caps the room a new batch is given up front.
const maxCellsHint = 1 << 18

// dispatch starts the write of the batch being built.
func (s *FlushThenCommit) dispatch() {
	b := s.take()
	s.inflight = append(s.inflight, b)
	ctx := s.writeCtx
	go func() {
		err := s.write(ctx, b)
		s.done <- writeResult{b, err}
		select {
		case s.wake <- struct{}{}:
		default:
		}
		s.wakeMu.Lock()
		if s.pollCancel != nil {
			s.pollCancel()
		}
		s.wakeMu.Unlock()
	}()
}

// take ends the batch being built and returns it coalesced, ready to write.
func (s *FlushThenCommit) take() *batch {
	b := s.building
	s.building = nil
	s.flushNow = false
	b.coalesce()
	s.cellsHint = min(max(len(b.cells), 64), maxCellsHint)
	return b
}
