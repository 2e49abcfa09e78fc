package processors

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/abacus-stream/abacus/membership"
)

// consumerGroup is sarama's consumer group as goka drives it, made to ride out a broker outage and
// to hand partitions over quickly:
//
//   - goka stops the processor on any error that Consume returns ("no way to recover"), and sarama
//     returns one when joining the group fails on the network: when the broker that coordinates
//     the group is killed, its cached coordinator refuses the connection and the whole processor
//     stopped (TestClusterScenarioBrokerKills found it). Such errors are retried, with the
//     coordinator looked up again, until the cluster names a live one; errors that a retry cannot
//     cure (a refused login, a closed group) still stop the processor.
//   - A session that a rebalance ended is followed by the next one at once. goka waits 5 s before
//     joining again, which holds up the whole group's rebalance (every partition of every
//     instance waits) and was most of a partition move's time (TestInstancesJoinAndDieMidStream:
//     6 s per move, now 1).
//   - A static member (Config.InstanceID) leaves its group explicitly when it closes. sarama, as
//     KIP-345 says, only forgets its member id, and the coordinator then keeps the member's
//     partitions for it until the session timeout: a clean stop would hand nothing over.
//   - A member that the broker fenced (another process joined under its instance id) fails with a
//     membership.FencedError instead of goka's generic consumer error, and never rejoins.
//
// It also reports each session's end (the revoke of its partitions) to released, with how long
// giving them up took, and hands goka each session through commits, which commits each
// partition's offsets in order (see commitOrder).
type consumerGroup struct {
	sarama.ConsumerGroup
	client     sarama.Client // the group's own client: refreshes its coordinator, outlives the group for the leave
	group      string
	instanceID string // empty: a dynamic member
	log        *slog.Logger
	released   func(parts []int32, generation int32, took time.Duration)
	// resumed is told the offset each claim starts from (its committed offset), before goka
	// reads the claim: the engine's done offsets start there (engine.Engine.Resumed).
	resumed func(topic string, partition int32, offset int64)
	// deleted is told how many records of a claim the broker deleted before the group read
	// them (see checkDeleted); nil: only logged.
	deleted func(topic string, n int64)
	commits *commitOrder // nil: goka's marks go to sarama as they come
	// aside, with commits, reads back at each session's Setup what runs before it set aside for
	// the records it will process again (see aside.go); nil: nothing is read back.
	aside *asideLedger
	// memberID is the member id of the last session, for the leave: the coordinator removes a
	// static member only when both its instance id and its member id match, so a process that was
	// fenced cannot remove the one that took its place.
	memberID atomic.Pointer[string]
}

// newConsumerGroup builds a consumer group on a client of its own.
func newConsumerGroup(brokers []string, group string, cfg *sarama.Config, log *slog.Logger,
	released func([]int32, int32, time.Duration), resumed func(string, int32, int64), commits *commitOrder, aside *asideLedger) (*consumerGroup, error) {
	cl, err := sarama.NewClient(brokers, cfg)
	if err != nil {
		return nil, fmt.Errorf("consumer group %s: %w", group, err)
	}
	cg, err := sarama.NewConsumerGroupFromClient(group, cl)
	if err != nil {
		cl.Close()
		return nil, fmt.Errorf("consumer group %s: %w", group, err)
	}
	return &consumerGroup{ConsumerGroup: cg, client: cl, group: group, instanceID: cfg.Consumer.Group.InstanceId,
		log: log, released: released, resumed: resumed, commits: commits, aside: aside}, nil
}

// Consume implements sarama.ConsumerGroup: it runs sessions, like sarama's, until ctx is done or
// one fails (see consumerGroup). An error of a session that started (the handler's, such as a
// write Kafka refused) is returned as it is: goka stops on it, and must.
func (g *consumerGroup) Consume(ctx context.Context, topics []string, h sarama.ConsumerGroupHandler) error {
	backoff := 250 * time.Millisecond
	spacing := time.Duration(0)
	for {
		sh := &sessionHandler{ConsumerGroupHandler: h, g: g}
		t0 := time.Now()
		err := g.ConsumerGroup.Consume(ctx, topics, sh)
		if err != nil && g.instanceID != "" && errors.Is(err, sarama.ErrFencedInstancedId) {
			return &membership.FencedError{Group: g.group, InstanceID: g.instanceID, Err: err}
		}
		switch {
		case err == nil && ctx.Err() == nil:
			// A rebalance: join the next generation. Sessions that end as soon as they start (a
			// group rebalancing again and again) are spaced out, up to goka's own 5 s.
			backoff = 250 * time.Millisecond
			if time.Since(t0) < time.Second {
				spacing = min(max(2*spacing, 100*time.Millisecond), 5*time.Second)
			} else {
				spacing = 0
			}
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(spacing):
			}
			continue
		case err == nil, sh.started, !transient(err):
			return err
		}
		g.log.Warn("joining the consumer group failed; trying again", "err", err, "retry_in", backoff)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		// sarama keeps the coordinator it found until told to look again.
		if err := g.client.RefreshCoordinator(g.group); err != nil {
			g.log.Debug("looking up the group coordinator", "err", err)
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// sessionHandler is goka's handler, seen from the consumer group: whether a session started, its
// member id (for the leave), and when it ended. goka is handed the session as an orderedSession,
// whose marks commit each partition's offsets in order (commitOrder).
type sessionHandler struct {
	sarama.ConsumerGroupHandler
	g       *consumerGroup
	started bool
	ordered *orderedSession // from Setup to Cleanup; nil without commits
	scan    *asideScan      // what Setup read back (aside.go); nil when nothing was
}

// session is the session goka is handed.
func (s *sessionHandler) session(sess sarama.ConsumerGroupSession) sarama.ConsumerGroupSession {
	if s.ordered != nil {
		return s.ordered
	}
	return sess
}

// Setup implements sarama.ConsumerGroupHandler.
func (s *sessionHandler) Setup(sess sarama.ConsumerGroupSession) error {
	s.started = true
	id := sess.MemberID()
	s.g.memberID.Store(&id)
	// Before goka's Setup, which starts the partition processors whose callbacks note offsets
	// and set records aside.
	if s.g.commits != nil {
		if s.g.aside != nil {
			t0 := time.Now()
			s.scan = s.g.aside.scanWithRetries(sess.Context(), s.g.client, sess.Claims())
			if s.scan != nil && s.scan.records > 0 {
				s.g.log.Info("read back the dead letters and late records written for the records this session processes again",
					"read", s.scan.records, "found", s.g.aside.count(), "took", time.Since(t0))
			}
		}
		s.ordered = s.g.commits.begin(sess, s.scan)
	}
	return s.ConsumerGroupHandler.Setup(s.session(sess))
}

// ConsumeClaim implements sarama.ConsumerGroupHandler.
func (s *sessionHandler) ConsumeClaim(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	if claim.InitialOffset() == sarama.OffsetOldest {
		s.g.checkDeleted(claim.Topic(), claim.Partition(), s.scan)
	}
	if s.g.resumed != nil {
		s.g.resumed(claim.Topic(), claim.Partition(), claim.InitialOffset())
	}
	if s.scan != nil {
		// A claim whose commit carries no time (none yet, or one of an earlier version) gets one
		// before any of its records is processed: nothing of this session is set aside before
		// now. Committed at once, so that a crash before the first commit still finds it.
		if st := s.scan.starts[topicPartition{claim.Topic(), claim.Partition()}]; !st.known {
			meta, off := asideMetadata(now()), claim.InitialOffset()
			var err error
			if off < 0 { // nothing committed: where the claim starts (OffsetOldest or OffsetNewest)
				off, err = s.g.client.GetOffset(claim.Topic(), claim.Partition(), off)
			}
			if err == nil {
				sess.MarkOffset(claim.Topic(), claim.Partition(), off, meta)
				sess.ResetOffset(claim.Topic(), claim.Partition(), off, meta)
				sess.Commit()
			} else {
				s.g.log.Warn("could not commit where a claim starts", "topic", claim.Topic(), "partition", claim.Partition(), "err", err)
			}
		}
	}
	return s.ConsumerGroupHandler.ConsumeClaim(s.session(sess), claim)
}

// checkDeleted reports the records of a claim that starts from the oldest record although the
// group has a committed offset: sarama does that when the commit is out of range, which means the
// broker deleted records after it (retention, DeleteRecords) before the group read them, or lost
// records the group had read. Either way sarama goes on silently, as Kafka's consumers do; the
// records are lost to the processor, and this says so loudly, with how many.
func (g *consumerGroup) checkDeleted(topic string, partition int32, scan *asideScan) {
	tp := topicPartition{topic, partition}
	st, ok := claimStart{}, false
	if scan != nil {
		st, ok = scan.starts[tp]
	}
	if !ok {
		fetched := &asideScan{starts: map[topicPartition]claimStart{}}
		if err := fetched.fetchStarts(g.client, g.group, map[string][]int32{topic: {partition}}); err != nil {
			g.log.Warn("could not read the committed offset of a claim that starts from the oldest record", "topic", topic, "partition", partition, "err", err)
			return
		}
		st = fetched.starts[tp]
	}
	if st.offset < 0 {
		return // nothing committed: the oldest record is where the group starts
	}
	oldest, err := g.client.GetOffset(topic, partition, sarama.OffsetOldest)
	if err == nil && oldest > st.offset {
		g.log.Error("records were deleted before the processor read them: they are lost to it (retention shorter than the group's lag or outage?)",
			"topic", topic, "partition", partition, "committed", st.offset, "log_start", oldest, "lost_records", oldest-st.offset)
		if g.deleted != nil {
			g.deleted(topic, oldest-st.offset)
		}
		return
	}
	newest, err2 := g.client.GetOffset(topic, partition, sarama.OffsetNewest)
	if err := errors.Join(err, err2); err != nil {
		g.log.Warn("could not read the offsets of a claim whose commit is out of range", "topic", topic, "partition", partition, "err", err)
		return
	}
	if st.offset > newest {
		g.log.Error("the group's committed offset is past the end of the log: the broker lost records the processor had read; it reads the partition again from its oldest record",
			"topic", topic, "partition", partition, "committed", st.offset, "log_end", newest)
	}
}

// Cleanup implements sarama.ConsumerGroupHandler.
func (s *sessionHandler) Cleanup(sess sarama.ConsumerGroupSession) error {
	start := time.Now()
	// goka's Cleanup waits for the partition processors, whose last marks still count: sarama
	// commits after Cleanup.
	err := s.ConsumerGroupHandler.Cleanup(s.session(sess))
	if s.ordered != nil {
		s.g.commits.end(s.ordered)
	}
	if s.g.released != nil {
		s.g.released(partitionsOf(sess.Claims()), sess.GenerationID(), time.Since(start))
	}
	return err
}

// Close implements sarama.ConsumerGroup: it closes the group, leaves it when a static member (see
// consumerGroup), and closes the client. Leaving fails when the coordinator is unreachable; the
// group then drops the member after its session timeout, as after a crash, so that is logged
// rather than made the stop's error.
func (g *consumerGroup) Close() error {
	err := g.ConsumerGroup.Close()
	if err != nil && transient(err) {
		g.log.Warn("could not leave the consumer group (its coordinator is unreachable); it drops this member after the session timeout", "err", err)
		err = nil
	}
	if g.instanceID != "" {
		g.leave()
	}
	if cerr := g.client.Close(); cerr != nil && !errors.Is(cerr, sarama.ErrClosedClient) && err == nil {
		err = cerr
	}
	return err
}

// transientKErrors are the broker answers that a broker outage or a leadership move causes:
// every code Kafka's protocol marks retriable (franz-go's kerr keeps that table, so a code added
// to Kafka is not forgotten here) and the group answers that a rejoin cures. A code missing here
// stopped the processor: OFFSET_NOT_AVAILABLE, which a new leader gives until its high watermark
// catches up, ended TestClusterTwoBrokersDown in CI.
var transientKErrors = func() []sarama.KError {
	codes := []sarama.KError{sarama.ErrRebalanceInProgress, sarama.ErrUnknownMemberId, sarama.ErrIllegalGeneration}
	for c := int16(1); c < 1024; c++ {
		var ke *kerr.Error
		if !errors.As(kerr.ErrorForCode(c), &ke) || !ke.Retriable {
			continue
		}
		switch ke {
		case kerr.UnknownTopicOrPartition, kerr.UnknownTopicID, kerr.CorruptMessage:
			// Retriable to Kafka while metadata spreads; to us a topic deleted under a
			// running group or a record the broker cannot read, which restarting forever would
			// hide. The topic lookups that follow a create wait for the topic themselves.
			continue
		}
		codes = append(codes, sarama.KError(c))
	}
	return codes
}()

// transientText is transient for errors that reach us as text only (goka's topic manager formats
// the errors it wraps with %v): it looks for the messages of the errors transient accepts.
func transientText(err error) bool {
	if transient(err) {
		return true
	}
	msg := err.Error()
	for _, m := range []string{syscall.ECONNREFUSED.Error(), syscall.ECONNRESET.Error(), syscall.EPIPE.Error(), "i/o timeout",
		": EOF", sarama.ErrOutOfBrokers.Error(), sarama.ErrNotConnected.Error()} {
		if strings.Contains(msg, m) {
			return true
		}
	}
	for _, ke := range transientKErrors {
		if strings.Contains(msg, ke.Error()) {
			return true
		}
	}
	return false
}

// transient reports whether err is one that a broker outage or a leadership move causes, which
// trying again later cures.
func transient(err error) bool {
	var ne net.Error
	var ke sarama.KError
	switch {
	case errors.As(err, &ne), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.Is(err, sarama.ErrOutOfBrokers), errors.Is(err, sarama.ErrNotConnected):
		return true
	case errors.As(err, &ke):
		return slices.Contains(transientKErrors, ke)
	}
	return false
}
