package sinks

import (
	"context"
	"errors"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// finish records a write's outcome and commits the offsets of every batch, in the order they
// were taken, whose write and every earlier one's have landed, for the partitions still owned.
// Called with mu held.
func (s *FlushThenCommit) finish(r writeResult) {
	r.b.done, r.b.err = true, r.err
	if le, ok := s.enc.(landingEncoder); ok {
		if r.err == nil {
			le.batchLanded(r.b.cells)
		} else {
			le.batchesDropped()
		}
	}
	s.flushNow = true
	offsets, records := s.takeLanded()
	if len(offsets) == 0 || s.abandoned {
		return
	}
	s.commit(offsets, records)
}

// takeLanded takes the batches at the head of inflight that are done, and returns the offsets
// they reach in the partitions still owned, with how many records they hold. A batch that failed
// stops all commits from then on. Called with mu held.
func (s *FlushThenCommit) takeLanded() (map[string]map[int32]kgo.EpochOffset, int) {
	offsets := map[string]map[int32]kgo.EpochOffset{}
	records := 0
	for len(s.inflight) > 0 && s.inflight[0].done {
		b := s.inflight[0]
		s.inflight = s.inflight[1:]
		if b.err != nil || s.abandoned {
			// A cancelled write context (a shutdown or revoke that gave up) stops a write, and then
			// nothing more is committed: the records are read again by whoever owns their
			// partitions next. Any other failure is fatal: the sink cannot go on committing.
			if !s.abandoned {
				if errors.Is(b.err, context.Canceled) || errors.Is(b.err, context.DeadlineExceeded) {
					s.log.Info("write abandoned; its records will be replayed", "err", b.err)
				} else {
					s.log.Error("write failed for good; the sink stops, its records will be replayed", "err", b.err)
					s.fatal = b.err
				}
			}
			s.abandoned = true
			continue
		}
		records += b.records
		for t, ps := range b.next {
			for p, eo := range ps {
				if !s.assigned[t][p] {
					continue
				}
				if offsets[t] == nil {
					offsets[t] = map[int32]kgo.EpochOffset{}
				}
				offsets[t][p] = eo // later batches hold later offsets
			}
		}
	}
	return offsets, records
}

// commit stores offsets whose records have all landed, and moves the lag metric on. Called with mu
// held.
func (s *FlushThenCommit) commit(offsets map[string]map[int32]kgo.EpochOffset, records int) {
	t0 := time.Now()
	ctx, cancel := context.WithTimeout(s.writeCtx, s.cfg.RevokeTimeout)
	defer cancel()
	if err := s.offsets.Commit(ctx, s.cfg.Group, offsets); err != nil {
		// Not fatal: the cells are written; a later commit covers these records, or a replay
		// rewrites identical cells.
		s.log.Warn("commit failed", "err", err)
		s.m.commitFailed()
		return
	}
	s.m.committed(records, time.Since(t0))
	for t, ps := range offsets {
		for p, eo := range ps {
			setOffset(s.commits, t, p, eo.Offset)
			if hwm, ok := s.hwm[t][p]; ok {
				s.m.setLag(t, p, hwm-eo.Offset)
			}
		}
	}
}

func setOffset(m map[string]map[int32]int64, t string, p int32, o int64) {
	if m[t] == nil {
		m[t] = map[int32]int64{}
	}
	m[t][p] = o
}

// noteFetch notes a partition's fetch: its high watermark (for the lag) and whether records were
// deleted before they were read. Called with mu held.
func (s *FlushThenCommit) noteFetch(p kgo.FetchTopicPartition) {
	s.noteDeleted(p)
	s.noteHighWatermark(p)
}

// noteDeleted reports the records the broker deleted between where the partition was to resume
// (its commit, or one past the last record read) and where its fetch started. franz-go, like
// Kafka's own consumer, moves on from the log start when it finds its offset below it, and says
// nothing: the records lost that way are counted and logged here. A fetch that starts past the
// expected offset is normal on its own (transaction markers take offsets); only a log start past
// it says records were deleted. Called with mu held.
func (s *FlushThenCommit) noteDeleted(p kgo.FetchTopicPartition) {
	if len(p.Records) == 0 {
		return
	}
	first, last := p.Records[0].Offset, p.Records[len(p.Records)-1].Offset
	if next, ok := s.next[p.Topic][p.Partition]; ok && first > next && p.LogStartOffset > next {
		lost := min(first, p.LogStartOffset) - next
		s.m.deletedUnread(p.Topic, lost)
		s.log.Error("records were deleted before this sink read them: they are lost to it (retention shorter than the sink's lag or outage?)",
			"topic", p.Topic, "partition", p.Partition, "expected_offset", next, "log_start", p.LogStartOffset, "lost_records", lost)
	}
	setOffset(s.next, p.Topic, p.Partition, last+1)
}

// noteHighWatermark keeps a fetched partition's high watermark for the lag metric. Called with
// mu held.
func (s *FlushThenCommit) noteHighWatermark(p kgo.FetchTopicPartition) {
	if p.HighWatermark <= 0 {
		return
	}
	setOffset(s.hwm, p.Topic, p.Partition, p.HighWatermark)
	if c, ok := s.commits[p.Topic][p.Partition]; ok {
		s.m.setLag(p.Topic, p.Partition, p.HighWatermark-c)
	}
}
