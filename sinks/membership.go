package sinks

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/abacus-stream/abacus/membership"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// LeaveTimeout bounds the explicit leave of a static member at a clean stop.
const LeaveTimeout = 10 * time.Second

// stop is a clean stop: land and commit what is held, then, for a static member, leave the group
// so that the others take its partitions at once.
func (s *FlushThenCommit) stop() error {
	err := s.shutdown()
	if s.cfg.InstanceID != "" && s.fenced.Load() == nil {
		s.leave()
	}
	return err
}

// leave removes this static member from its group. franz-go, as KIP-345 says, does not leave a
// group when a static member closes: the coordinator would keep the member's partitions for it
// until the session timeout, and a clean stop would hand nothing over. So the client's group
// management is stopped first (it must not rejoin when it sees the group rebalance), then
// LeaveGroup names the member by instance id and member id: a process that was fenced cannot
// remove the one that took its place.
func (s *FlushThenCommit) leave() {
	memberID, _ := s.cl.GroupMetadata()
	ctx, cancel := context.WithTimeout(context.Background(), LeaveTimeout)
	defer cancel()
	// Runs onRevoked (nothing is held by now) and ends the heartbeats; sends nothing for a static
	// member.
	if err := s.cl.LeaveGroupContext(ctx); err != nil && !errors.Is(err, kerr.UnknownMemberID) {
		s.log.Warn("stopping group management", "err", err)
	}
	if memberID == "" {
		return // never joined
	}
	req := kmsg.NewPtrLeaveGroupRequest()
	req.Group = s.cfg.Group
	m := kmsg.NewLeaveGroupRequestMember()
	m.MemberID = memberID
	m.InstanceID = &s.cfg.InstanceID
	m.Reason = kmsg.StringPtr("abacus: clean stop of a static member")
	req.Members = append(req.Members, m)
	resp, err := req.RequestWith(ctx, s.cl)
	if err == nil {
		err = kerr.ErrorForCode(resp.ErrorCode)
		for _, m := range resp.Members {
			if err == nil {
				err = kerr.ErrorForCode(m.ErrorCode)
			}
		}
	}
	switch {
	case err == nil:
		s.log.Info("left the group: its partitions go to the other members at once", "instance_id", s.cfg.InstanceID)
	case errors.Is(err, kerr.UnknownMemberID):
		// Already gone: franz-go left itself (a cooperative rebalance owed a rejoin), or the
		// session timed out.
	case errors.Is(err, kerr.FencedInstanceID):
		s.log.Warn("not leaving the group: another process holds this instance id now", "instance_id", s.cfg.InstanceID)
	default:
		s.log.Warn("leaving the group failed: the other members take this member's partitions after the session timeout",
			"instance_id", s.cfg.InstanceID, "err", err)
	}
}

// fenceHook notes at once that the broker fenced this static member, so that Run stops at its next
// poll rather than working on for partitions another process owns now.
type fenceHook struct{ s *FlushThenCommit }

// OnGroupManageError implements kgo.HookGroupManageError.
func (h fenceHook) OnGroupManageError(err error) {
	s := h.s
	if s.cfg.InstanceID != "" && errors.Is(err, kerr.FencedInstanceID) {
		s.fenced.CompareAndSwap(nil, &membership.FencedError{Group: s.cfg.Group, InstanceID: s.cfg.InstanceID, Err: err})
		s.log.Error("fenced: another process joined the group with this instance id", "instance_id", s.cfg.InstanceID)
	}
	s.joined.Store(false)
}

var _ kgo.HookGroupManageError = fenceHook{}

// Status is what a sink is doing, for readiness checks.
type Status struct {
	// Joined is set once the sink has an assignment from its group, and cleared while it has lost
	// its session.
	Joined bool
	// Partitions is how many partitions it owns (0 when the group has more members than partitions).
	Partitions int
	// Fenced is set when the broker fenced this static member: Run stops.
	Fenced error
}

// Status says what the sink is doing now. It never waits for the sink's loop.
func (s *FlushThenCommit) Status() Status {
	st := Status{Joined: s.joined.Load(), Partitions: int(s.nparts.Load())}
	if f := s.fenced.Load(); f != nil {
		st.Fenced = f
	}
	return st
}

// Ready returns nil once the sink has joined its group, or an error saying what it waits for. (Its
// store's reachability is the caller's to check: the sink only sees it through its writes.)
func (s *FlushThenCommit) Ready() error {
	st := s.Status()
	switch {
	case st.Fenced != nil:
		return st.Fenced
	case !st.Joined:
		return fmt.Errorf("sink not in group %s yet", s.cfg.Group)
	}
	return nil
}
