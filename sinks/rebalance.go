package sinks

import (
	"context"

	"github.com/twmb/franz-go/pkg/kgo"
)

func (s *FlushThenCommit) onAssigned(_ context.Context, _ *kgo.Client, parts map[string][]int32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for t, ps := range parts {
		if s.assigned[t] == nil {
			s.assigned[t] = map[int32]bool{}
		}
		for _, p := range ps {
			s.assigned[t][p] = true
		}
	}
	s.m.partitionsChanged("assigned", parts)
	s.nparts.Store(int64(s.countAssigned()))
	s.joined.Store(true)
	s.log.Info("partitions assigned", "partitions", parts)
}

// onRevoked lands and commits what is held for the partitions before they are given up.
func (s *FlushThenCommit) onRevoked(_ context.Context, _ *kgo.Client, parts map[string][]int32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.RevokeTimeout)
	defer cancel()
	if err := s.drain(ctx); err != nil {
		s.log.Warn("revoke: could not land buffered records; the next owner replays them", "err", err)
	}
	s.unassign(parts)
	s.m.partitionsChanged("revoked", parts)
	s.log.Info("partitions revoked", "partitions", parts)
}

// onLost forgets the partitions without committing: another member may already own them.
func (s *FlushThenCommit) onLost(_ context.Context, _ *kgo.Client, parts map[string][]int32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.unassign(parts)
	if s.building != nil {
		s.building = s.building.without(parts)
		if le, ok := s.enc.(landingEncoder); ok {
			le.batchesDropped()
		}
	}
	s.m.partitionsChanged("lost", parts)
	s.joined.Store(false)
	s.log.Warn("partitions lost; their buffered records are dropped uncommitted", "partitions", parts)
}

// unassign forgets the partitions: their ownership, lag and hold. Called with mu held.
func (s *FlushThenCommit) unassign(parts map[string][]int32) {
	for t, ps := range parts {
		for _, p := range ps {
			delete(s.assigned[t], p)
			delete(s.hwm[t], p)
			delete(s.commits[t], p)
			delete(s.next[t], p)
			s.m.dropLag(t, p)
		}
	}
	s.nparts.Store(int64(s.countAssigned()))
	s.dropHeld(parts)
}

// countAssigned counts the partitions owned. Called with mu held.
func (s *FlushThenCommit) countAssigned() int {
	n := 0
	for _, ps := range s.assigned {
		n += len(ps)
	}
	return n
}
