package sinks

import (
	"context"
	"errors"
	"fmt"

	"github.com/abacus-stream/abacus/membership"
)

// fail stops the sink on a failure no retry can mend: the writes still running are cancelled and
// nothing more is committed; the next owner of the partitions replays what was not.
func (s *FlushThenCommit) fail(err error) error {
	s.cancelWrites()
	s.mu.Lock()
	for len(s.inflight) > 0 {
		s.finish(<-s.done)
	}
	s.mu.Unlock()
	var fenced *membership.FencedError
	if errors.As(err, &fenced) {
		return fmt.Errorf("sinks: %w", err) // it names the group
	}
	return fmt.Errorf("sinks: group %s: %w", s.cfg.Group, err)
}

// drain waits for the running writes, then writes and commits the batch being built, until ctx
// ends. Writes still running then go on in the background; their batches' commits happen later,
// for the partitions still owned. Called with mu held.
func (s *FlushThenCommit) drain(ctx context.Context) error {
	for len(s.inflight) > 0 || s.building != nil {
		if s.building != nil && s.canDispatch() {
			s.dispatch()
		}
		select {
		case r := <-s.done:
			s.finish(r)
			if r.err != nil {
				return r.err
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// shutdown lands and commits what is held, giving up after RevokeTimeout: then the running writes
// are cancelled and nothing more is committed.
func (s *FlushThenCommit) shutdown() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.RevokeTimeout)
	defer cancel()
	if err := s.drain(ctx); err != nil {
		s.log.Warn("shutdown: buffered records not landed; they will be replayed", "err", err)
		s.cancelWrites()
		for len(s.inflight) > 0 {
			s.finish(<-s.done)
		}
	}
	s.building = nil
	return nil
}
