package sinks

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/abacus-stream/abacus/membership"
	"github.com/abacus-stream/abacus/store"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// FlushThenCommit consumes topics, turns records into cells, writes them in batches and commits a
// batch's offsets only after the store acknowledged every cell of it. Writes run off the poll loop;
// while they are blocked or failing and the next batch is full, the loop holds its poll (takes no
// more records) until a write lands. franz-go heartbeats on its own goroutine meanwhile, so the
// member never leaves its group because of the store.
type FlushThenCommit struct {
	cfg     Config
	enc     Encoder
	store   store.Writer
	offsets OffsetStore
	// externalOffsets says offsets live in Config.Offsets, not in Kafka: set before the client
	// starts, unlike offsets itself when they live in Kafka.
	externalOffsets bool
	cl              *kgo.Client
	log             *slog.Logger
	m               *Metrics

	// mu serialises the poll loop's processing with the rebalance callbacks.
	mu       sync.Mutex
	assigned map[string]map[int32]bool
	building *batch
	inflight []*batch // in the order they were taken: commits follow it
	done     chan writeResult
	held     map[string][]int32 // partitions of the full batch while the poll is held
	// hold is set while the batch being built is full and no write can start: the loop then waits
	// for a write to land instead of polling.
	hold bool
	// wake is signalled when a write lands, for a holding loop.
	wake chan struct{}
	// writeCtx outlives Run's context so that a stop lands what it holds; it is cancelled only when
	// a shutdown or revoke gives up, and after that nothing more is committed.
	writeCtx     context.Context
	cancelWrites context.CancelFunc
	abandoned    bool
	// fatal is a failure no retry can mend (a store that broke its contract): Run returns it.
	fatal error

	lastTTLWarning time.Time

	// cellsHint is the room for cells a new batch starts with: the last batch's size.
	cellsHint int

	// flushNow is set when a write lands: the records gathered meanwhile go out at once (group
	// commit), rather than waiting to fill a batch or for the interval.
	flushNow bool

	// wakeMu guards pollCancel, which a finished write calls so that the loop takes its result at
	// once instead of at the end of its poll timeout.
	wakeMu     sync.Mutex
	pollCancel context.CancelFunc

	// joined is set by an assignment and cleared when the partitions are lost; nparts counts the
	// partitions owned. Both are read without mu, by readiness checks (Status).
	joined atomic.Bool
	nparts atomic.Int64
	// fenced is set when the broker fenced this static member (another process took its instance
	// id): Run stops with it.
	fenced atomic.Pointer[membership.FencedError]
	// hwm is each partition's high watermark at its last fetch, and commits its last committed
	// offset, for the lag metric. Guarded by mu.
	hwm, commits map[string]map[int32]int64
	// next is each owned partition's next offset: where the group's commit put it at the
	// assignment, then one past the last record read. A fetch that starts past it, at a log start
	// past it, read a partition whose records were deleted unread (see noteDeleted). Guarded by mu.
	next map[string]map[int32]int64
}

type writeResult struct {
	b   *batch
	err error
}

// NewFlushThenCommit builds a sink; Run starts it. An encoder that can check its own settings
// (Check() error, as AggregatesEncoder and FactsEncoder) is checked here: a misconfigured encoder
// must fail the start, not dead-letter every record.
func NewFlushThenCommit(cfg Config, enc Encoder, store store.Writer) (*FlushThenCommit, error) {
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if enc == nil || store == nil {
		return nil, errors.New("sinks: an encoder and a store are required")
	}
	if c, ok := enc.(interface{ Check() error }); ok {
		if err := c.Check(); err != nil {
			return nil, fmt.Errorf("sinks: %w", err)
		}
	}
	s := &FlushThenCommit{
		cfg:      cfg,
		enc:      enc,
		store:    store,
		log:      cfg.Logger.With("group", cfg.Group),
		m:        cfg.Metrics,
		assigned: map[string]map[int32]bool{},
		hwm:      map[string]map[int32]int64{},
		commits:  map[string]map[int32]int64{},
		next:     map[string]map[int32]int64{},
	}
	s.done = make(chan writeResult, cfg.MaxWritesInFlight)
	s.wake = make(chan struct{}, 1)
	reset := kgo.NewOffset().AtStart()
	if cfg.StartAtNewest {
		reset = kgo.NewOffset().AtEnd()
	}
	opts := []kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.ConsumerGroup(cfg.Group),
		kgo.ConsumeTopics(cfg.Topics...),
		kgo.ConsumeResetOffset(reset),
		kgo.DisableAutoCommit(),
		// Callbacks run only between polls, so they never race the loop's bookkeeping.
		kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsAssigned(s.onAssigned),
		kgo.OnPartitionsRevoked(s.onRevoked),
		kgo.OnPartitionsLost(s.onLost),
		kgo.ProducerLinger(0),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.WithHooks(fenceHook{s}),
	}
	if cfg.InstanceID != "" {
		opts = append(opts, kgo.InstanceID(cfg.InstanceID))
	}
	if cfg.SessionTimeout > 0 {
		opts = append(opts, kgo.SessionTimeout(cfg.SessionTimeout))
	}
	if cfg.HeartbeatInterval > 0 {
		opts = append(opts, kgo.HeartbeatInterval(cfg.HeartbeatInterval))
	}
	if cfg.Offsets != nil {
		s.offsets, s.externalOffsets = cfg.Offsets, true
	}
	// Also with offsets in Kafka: the committed offsets it is handed are where each partition
	// resumes, which noteDeleted compares the first fetch with.
	opts = append(opts, kgo.AdjustFetchOffsetsFn(s.adjustOffsets))
	opts = append(opts, cfg.ClientOptions...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("sinks: kafka client: %w", err)
	}
	s.cl = cl
	if s.offsets == nil {
		s.offsets = kafkaOffsets{cl}
	}
	return s, nil
}

// Run consumes until ctx ends, then writes and commits what it holds (bounded by RevokeTimeout),
// leaves the group and returns. It returns nil after a clean stop.
func (s *FlushThenCommit) Run(ctx context.Context) error {
	defer s.cl.Close()
	s.writeCtx, s.cancelWrites = context.WithCancel(context.WithoutCancel(ctx))
	defer s.cancelWrites()
	for {
		s.mu.Lock()
		hold := s.hold
		s.mu.Unlock()
		if hold {
			// Backpressure: no poll until a write lands (or the flush deadline passes). Rebalance
			// callbacks may run meanwhile: AllowRebalance was called after the last poll.
			select {
			case <-ctx.Done():
				return s.stop()
			case <-s.wake:
			case <-time.After(s.pollWait()):
			}
			s.mu.Lock()
			s.step()
			fatal := s.fatal
			s.mu.Unlock()
			if fatal != nil {
				return s.fail(fatal)
			}
			continue
		}
		pollCtx, cancel := context.WithTimeout(ctx, s.pollWait())
		s.wakeMu.Lock()
		s.pollCancel = cancel
		s.wakeMu.Unlock()
		if len(s.done) > 0 {
			cancel() // a write finished before this poll could be woken
		}
		fetches := s.cl.PollRecords(pollCtx, s.cfg.MaxBatchRecords)
		cancel()
		if ctx.Err() != nil {
			s.cl.AllowRebalance()
			return s.stop()
		}
		fatal := s.fetchErrors(fetches)
		if fatal != nil {
			return fmt.Errorf("sinks: poll: %w", fatal)
		}
		if f := s.fenced.Load(); f != nil {
			// Another process owns the partitions now; whatever is held is its to replay.
			s.cl.AllowRebalance()
			return s.fail(f)
		}
		s.mu.Lock()
		fetches.EachPartition(s.noteFetch)
		fetches.EachRecord(s.add)
		s.step()
		fatal = s.fatal
		s.mu.Unlock()
		s.cl.AllowRebalance()
		if fatal != nil {
			return s.fail(fatal)
		}
	}
}

// fetchErrors sorts a poll's errors: its own timeout and the wake-up of a finished write are not
// errors, a closed client ends Run (returned), a fenced static member is noted for Run to stop
// with, and anything else is only logged, since the client goes on fetching and a record it could
// not fetch is never committed past.
func (s *FlushThenCommit) fetchErrors(fetches kgo.Fetches) error {
	var fatal error
	fetches.EachError(func(topic string, p int32, err error) {
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			return
		}
		if errors.Is(err, kgo.ErrClientClosed) {
			fatal = err
			return
		}
		if s.cfg.InstanceID != "" && errors.Is(err, kerr.FencedInstanceID) {
			s.fenced.CompareAndSwap(nil, &membership.FencedError{Group: s.cfg.Group, InstanceID: s.cfg.InstanceID, Err: err})
			return
		}
		s.log.Warn("fetch error", "topic", topic, "partition", p, "err", err)
	})
	return fatal
}

// pollWait keeps the loop responsive to write completions and flush deadlines.
func (s *FlushThenCommit) pollWait() time.Duration {
	w := s.cfg.FlushInterval / 4
	if w > 250*time.Millisecond {
		w = 250 * time.Millisecond
	}
	if w < 10*time.Millisecond {
		w = 10 * time.Millisecond
	}
	return w
}
