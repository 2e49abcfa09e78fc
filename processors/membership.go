package processors

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"

	"github.com/abacus-stream/abacus/internal/membership"
)

// memberGroup is the processor's sarama consumer group as goka drives it, with three changes that
// membership needs:
//
//   - A static member (Config.InstanceID) leaves its group explicitly when it closes. sarama, as
//     KIP-345 says, only forgets its member id, and the coordinator then keeps the member's
//     partitions for it until the session timeout: a clean stop would hand nothing over.
//   - A session that a rebalance ended is followed by the next one at once. goka waits 5 s after
//     every session before it joins again, which every member paid on every rebalance (a clean
//     stop of one instance made the others wait 5 s before taking its partitions).
//   - A member that the broker fenced (another process joined under its instance id) fails with a
//     membership.FencedError instead of goka's generic consumer error, and never rejoins.
type memberGroup struct {
	sarama.ConsumerGroup
	client     sarama.Client // owned: closed after the leave
	group      string
	instanceID string // empty: a dynamic member
	log        *slog.Logger
	// memberID is the member id of the last session, for the leave: the coordinator removes a
	// static member only when both its instance id and its member id match, so a process that was
	// fenced cannot remove the one that took its place.
	memberID atomic.Pointer[string]
}

// newMemberGroup builds the consumer group on a client of its own, so that the client outlives
// the group for the leave.
func newMemberGroup(brokers []string, group string, sc *sarama.Config, log *slog.Logger) (*memberGroup, error) {
	cl, err := sarama.NewClient(brokers, sc)
	if err != nil {
		return nil, err
	}
	cg, err := sarama.NewConsumerGroupFromClient(group, cl)
	if err != nil {
		cl.Close()
		return nil, err
	}
	return &memberGroup{ConsumerGroup: cg, client: cl, group: group, instanceID: sc.Consumer.Group.InstanceId, log: log}, nil
}

// Consume runs sessions until ctx ends or one fails: sarama ends a session at every rebalance,
// and the next one starts at once (after a short backoff when sessions end in quick succession).
func (g *memberGroup) Consume(ctx context.Context, topics []string, handler sarama.ConsumerGroupHandler) error {
	h := sessionHandler{ConsumerGroupHandler: handler, g: g}
	backoff := time.Duration(0)
	for {
		t0 := time.Now()
		err := g.ConsumerGroup.Consume(ctx, topics, h)
		if err != nil {
			if g.instanceID != "" && errors.Is(err, sarama.ErrFencedInstancedId) {
				return &membership.FencedError{Group: g.group, InstanceID: g.instanceID, Err: err}
			}
			return err
		}
		if ctx.Err() != nil {
			return nil
		}
		// Sessions that end as soon as they start (a group rebalancing again and again) are spaced
		// out, up to goka's own 5 s.
		if time.Since(t0) < time.Second {
			backoff = min(max(2*backoff, 100*time.Millisecond), 5*time.Second)
		} else {
			backoff = 0
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
	}
}

// Close closes the group and, for a static member, then leaves it (see memberGroup).
func (g *memberGroup) Close() error {
	err := g.ConsumerGroup.Close()
	if g.instanceID != "" {
		g.leave()
	}
	if cerr := g.client.Close(); cerr != nil && !errors.Is(cerr, sarama.ErrClosedClient) && err == nil {
		err = cerr
	}
	return err
}

// leave sends LeaveGroup for this static member, so that the coordinator rebalances its partitions
// to the others at once. goka has committed the offsets of the last session by now (Consume
// returned), so nothing is lost; a failure only means the others wait for the session timeout.
func (g *memberGroup) leave() {
	mid := ""
	if p := g.memberID.Load(); p != nil {
		mid = *p
	}
	if mid == "" {
		return // never joined
	}
	req := &sarama.LeaveGroupRequest{Version: 3, GroupId: g.group,
		Members: []sarama.MemberIdentity{{MemberId: mid, GroupInstanceId: &g.instanceID}}}
	if g.client.Config().Version.IsAtLeast(sarama.V2_4_0_0) {
		req.Version = 4
	}
	coord, err := g.client.Coordinator(g.group)
	var resp *sarama.LeaveGroupResponse
	if err == nil {
		resp, err = coord.LeaveGroup(req)
	}
	if err == nil {
		err = kafkaErr(resp.Err)
		for _, m := range resp.Members {
			if err == nil {
				err = kafkaErr(m.Err)
			}
		}
	}
	switch {
	case err == nil:
		g.log.Info("left the group: its partitions go to the other members at once", "instance_id", g.instanceID)
	case errors.Is(err, sarama.ErrUnknownMemberId):
		// Already gone (its session timed out, or an operator removed it).
	case errors.Is(err, sarama.ErrFencedInstancedId):
		g.log.Warn("not leaving the group: another process holds this instance id now", "instance_id", g.instanceID)
	default:
		g.log.Warn("leaving the group failed: the other members take this member's partitions after the session timeout",
			"instance_id", g.instanceID, "err", err)
	}
}

// sessionHandler records each session's member id for the leave.
type sessionHandler struct {
	sarama.ConsumerGroupHandler
	g *memberGroup
}

// Setup implements sarama.ConsumerGroupHandler.
func (h sessionHandler) Setup(s sarama.ConsumerGroupSession) error {
	id := s.MemberID()
	h.g.memberID.Store(&id)
	return h.ConsumerGroupHandler.Setup(s)
}

// applyMembership sets the consumer group's identity and timeouts on a sarama config.
func (c *Config) applyMembership(sc *sarama.Config) error {
	if c.InstanceID != "" {
		sc.Consumer.Group.InstanceId = c.InstanceID
		if !sc.Version.IsAtLeast(sarama.V2_3_0_0) {
			return fmt.Errorf("processors: Config.InstanceID needs KafkaVersion 2.3 or later, got %s", sc.Version)
		}
	}
	if c.SessionTimeout > 0 {
		sc.Consumer.Group.Session.Timeout = c.SessionTimeout
	}
	if c.HeartbeatInterval > 0 {
		sc.Consumer.Group.Heartbeat.Interval = c.HeartbeatInterval
	}
	// The coordinator answers a JoinGroup only when every member has rejoined (or the rebalance
	// timeout passed), and one that crashed is waited for until its session times out; sarama
	// reads that answer within Net.ReadTimeout (30 s) and fails the whole group consumer (goka
	// then stops the processor) when it takes longer. So the group's client waits for the
	// rebalance timeout and a margin, as the Java client does.
	if least := sc.Consumer.Group.Rebalance.Timeout + 5*time.Second; sc.Net.ReadTimeout < least {
		sc.Net.ReadTimeout = least
	}
	return nil
}

// kafkaErr is a response's error code as an error, nil for none.
func kafkaErr(k sarama.KError) error {
	if k == sarama.ErrNoError {
		return nil
	}
	return k
}
