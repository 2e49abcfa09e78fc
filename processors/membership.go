package processors

import (
	"errors"
	"fmt"
	"time"

	"github.com/IBM/sarama"
)

// leave sends LeaveGroup for this static member, so that the coordinator rebalances its partitions
// to the others at once. goka has committed the offsets of the last session by now (Consume
// returned), so nothing is lost; a failure only means the others wait for the session timeout.
func (g *consumerGroup) leave() {
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
