package sinks

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/abacus-stream/abacus/deadletter"
	"github.com/abacus-stream/abacus/internal/membership"
	"github.com/abacus-stream/abacus/store"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Config configures a FlushThenCommit sink. Zero fields take the defaults of EnsureDefaults.
type Config struct {
	// Brokers are the Kafka seed brokers.
	Brokers []string
	// Group is the consumer group; offsets are committed under it.
	Group string
	// Topics are consumed in full by the group.
	Topics []string
	// DeadLetterTopic receives every record that cannot be written, with its reason in headers.
	// Required: a sink never drops a record silently.
	DeadLetterTopic string

	// MaxBatchRecords, MaxBatchBytes and FlushInterval bound a batch: it is written when it passes
	// any of them (defaults 10,000 records, 4 MiB of cells, 1 s).
	MaxBatchRecords int
	MaxBatchBytes   int
	FlushInterval   time.Duration

	// MaxWritesInFlight bounds the batches being written at once (default 2). Batches that share a
	// cell are never written at once, and offsets are committed in the order batches were taken,
	// so a later batch landing first commits nothing until the earlier ones have landed too.
	MaxWritesInFlight int

	// RetryBackoff is the first wait after a failed write; it doubles up to MaxRetryBackoff
	// (defaults 100 ms and 5 s). A batch is retried until it lands; meanwhile the sink takes no
	// more records once its next batch is full.
	RetryBackoff    time.Duration
	MaxRetryBackoff time.Duration

	// RevokeTimeout bounds the final write and commit when partitions are taken away (default 20 s,
	// below the group's rebalance timeout). If it passes, nothing is committed and the next owner
	// replays, which rewrites identical cells.
	RevokeTimeout time.Duration

	// TTL is the table's time to live (0: none). HBase judges it by cell timestamp, which is the
	// event time or window end, so cells of a backfill older than TTL expire on arrival: the sink
	// counts them and warns, at most once a minute.
	TTL time.Duration

	// StartAtNewest starts a group that has no committed offsets at the end of its topics instead
	// of the beginning. Off by default: nothing produced before a group first joined is skipped.
	StartAtNewest bool

	// Offsets stores committed offsets; nil means Kafka group commits.
	Offsets OffsetStore

	// Logger receives the sink's logs; slog.Default() when nil.
	Logger *slog.Logger
	// Metrics, when set, records the sink's metrics (see NewMetrics).
	Metrics *Metrics

	// InstanceID, when set, makes the sink a static member of its group (Kafka's
	// group.instance.id, KIP-345): restarted with the same id, it takes its partitions back at once,
	// without a rebalance of the other members and without waiting for its old session to time out.
	// A clean stop leaves the group explicitly, so its partitions move to the others at once. Two
	// live members must never share an id: the broker fences the older one, whose Run then fails
	// with an error for which IsFenced is true. Empty (the default): a dynamic member.
	InstanceID string
	// SessionTimeout is how long the group waits for a member that stopped heartbeating before it
	// gives its partitions to the others (default franz-go's 45 s). With InstanceID it is also how
	// long a crashed member may take to come back and find its partitions waiting for it.
	SessionTimeout time.Duration
	// HeartbeatInterval is how often the member heartbeats; a rebalance reaches it with the next
	// heartbeat (default franz-go's 3 s; below SessionTimeout).
	HeartbeatInterval time.Duration

	// ClientOptions are appended to the Kafka client's options (TLS, SASL, tests' tuning).
	ClientOptions []kgo.Opt
}

// EnsureDefaults fills unset fields with their defaults.
func (c *Config) EnsureDefaults() {
	if c.MaxBatchRecords <= 0 {
		c.MaxBatchRecords = 10_000
	}
	if c.MaxBatchBytes <= 0 {
		c.MaxBatchBytes = 4 << 20
	}
	if c.FlushInterval <= 0 {
		c.FlushInterval = time.Second
	}
	if c.MaxWritesInFlight <= 0 {
		c.MaxWritesInFlight = 2
	}
	if c.RetryBackoff <= 0 {
		c.RetryBackoff = 100 * time.Millisecond
	}
	if c.MaxRetryBackoff <= 0 {
		c.MaxRetryBackoff = 5 * time.Second
	}
	if c.RevokeTimeout <= 0 {
		c.RevokeTimeout = 20 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate rejects a configuration that cannot work, each error naming its field. Call it after
// EnsureDefaults (NewFlushThenCommit does both).
func (c *Config) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("sinks: Config.%s: %s", field, fmt.Sprintf(format, args...)))
	}
	if len(c.Brokers) == 0 {
		bad("Brokers", "empty")
	}
	if c.Group == "" {
		bad("Group", "empty")
	}
	if len(c.Topics) == 0 {
		bad("Topics", "empty")
	}
	if c.DeadLetterTopic == "" {
		bad("DeadLetterTopic", "empty: records that cannot be written must go somewhere")
	}
	for _, t := range c.Topics {
		if t == c.DeadLetterTopic {
			bad("DeadLetterTopic", "%q is also a topic the sink consumes", t)
		}
	}
	if c.RetryBackoff > c.MaxRetryBackoff {
		bad("RetryBackoff", "%v is longer than MaxRetryBackoff %v", c.RetryBackoff, c.MaxRetryBackoff)
	}
	if c.TTL < 0 {
		bad("TTL", "must not be negative")
	}
	membership.CheckSettings(c.InstanceID, c.SessionTimeout, c.HeartbeatInterval, bad)
	return errors.Join(errs...)
}

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
	cl      *kgo.Client
	log     *slog.Logger
	m       *Metrics

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
		s.offsets = cfg.Offsets
		opts = append(opts, kgo.AdjustFetchOffsetsFn(s.adjustOffsets))
	}
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
		if fatal != nil {
			return fmt.Errorf("sinks: poll: %w", fatal)
		}
		if f := s.fenced.Load(); f != nil {
			// Another process owns the partitions now; whatever is held is its to replay.
			s.cl.AllowRebalance()
			return s.fail(f)
		}
		s.mu.Lock()
		fetches.EachPartition(s.noteHighWatermark)
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

// add buffers one record's cells (or its dead letter) in the batch being built. Every record
// polled is taken, even of a partition not (or no longer) marked assigned: skipping one while
// committing later records of its partition would lose it, and commits are limited to the
// partitions owned at commit time anyway.
func (s *FlushThenCommit) add(rec *kgo.Record) {
	if s.building == nil {
		s.building = newBatch()
	}
	b := s.building
	n := len(b.cells)
	cells, err := s.enc.Encode(rec, b.cells)
	var skip *SkipError
	switch {
	case errors.As(err, &skip):
		b.cells = b.cells[:n]
		s.m.skippedRecord(string(deadletter.ReasonOf(err, deadletter.Undecodable)))
	case err != nil:
		b.cells = b.cells[:n]
		reason := deadletter.ReasonOf(err, deadletter.Undecodable)
		b.dead = append(b.dead, deadLetter{rec: rec, reason: reason, detail: err.Error()})
		s.m.deadLettered(string(reason))
	default:
		b.cells = cells
		for i := n; i < len(cells); i++ {
			b.src = append(b.src, rec)
			b.bytes += cells[i].Size()
		}
		if s.cfg.TTL > 0 {
			s.checkTTL(cells[n:])
		}
	}
	b.records++
	b.advance(rec)
	s.m.recordsIn(1)
}

// checkTTL counts cells that the table's TTL expires on arrival, and warns about them.
func (s *FlushThenCommit) checkTTL(cells []store.Cell) {
	now := time.Now()
	limit := now.Add(-s.cfg.TTL).UnixMilli()
	for i := range cells {
		if cells[i].Timestamp >= limit {
			continue
		}
		s.m.expiredOnArrival()
		if now.Sub(s.lastTTLWarning) >= time.Minute {
			s.lastTTLWarning = now
			s.log.Warn("cells older than the table's TTL expire as soon as they are written (a backfill beyond the TTL?)",
				"table", cells[i].Table, "ttl", s.cfg.TTL, "cell_time", time.UnixMilli(cells[i].Timestamp).UTC())
		}
	}
}

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

func (s *FlushThenCommit) dispatch() {
	b := s.building
	s.building = nil
	s.flushNow = false
	b.coalesce()
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

// finish records a write's outcome and commits the offsets of every batch, in the order they
// were taken, whose write and every earlier one's have landed, for the partitions still owned.
// Called with mu held.
func (s *FlushThenCommit) finish(r writeResult) {
	r.b.done, r.b.err = true, r.err
	s.flushNow = true
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
	if len(offsets) == 0 || s.abandoned {
		return
	}
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

// holdPoll stops the loop polling (see Run) until a write lands, and records the partitions of the
// full batch as held. Not polling is the backpressure: franz-go stops fetching once its buffer is
// full, and its own goroutine keeps heartbeating, so the member stays in its group.
//
// franz-go's PauseFetchPartitions was used first; under load, about one run in ten left a
// partition unfetched after pause/resume cycles (nothing paused, nothing buffered, lag never
// drained), in v1.22.3. Holding the poll gives the same backpressure without that path.
func (s *FlushThenCommit) holdPoll(parts map[string][]int32) {
	s.hold = true
	if len(s.held) == 0 {
		s.held = parts
		s.m.setHeld(countParts(parts))
		s.log.Info("store behind: poll held", "partitions", parts)
	}
}

// release lets the loop poll again.
func (s *FlushThenCommit) release() {
	s.hold = false
	if len(s.held) == 0 {
		return
	}
	s.log.Info("poll released", "partitions", s.held)
	s.held = nil
	s.m.setHeld(0)
}

// write lands a batch: dead letters first, then the cells, retrying what failed for a transient
// cause until it lands or ctx ends; permanent failures send their source records to the dead-letter
// topic and are never resent.
func (s *FlushThenCommit) write(ctx context.Context, b *batch) error {
	if err := s.produceDead(ctx, b.dead); err != nil {
		return err
	}
	pending := make([]int, len(b.cells))
	for i := range pending {
		pending[i] = i
	}
	backoff := s.cfg.RetryBackoff
	cells := make([]store.Cell, 0, len(b.cells))
	for len(pending) > 0 {
		cells = cells[:0]
		for _, i := range pending {
			cells = append(cells, b.cells[i])
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
			var retry []int
			var dead []deadLetter
			seen := map[*kgo.Record]bool{}
			for _, f := range failed {
				if f.Index < 0 || f.Index >= len(pending) {
					return fmt.Errorf("sinks: store reported failure of cell %d of %d", f.Index, len(pending))
				}
				orig := pending[f.Index]
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
			if err := s.produceDead(ctx, dead); err != nil {
				return err
			}
			for range dead {
				s.m.deadLettered(string(deadletter.Rejected))
			}
			pending = retry
			if len(pending) == 0 {
				return nil
			}
			s.log.Warn("cells failed; retrying them", "cells", len(pending), "first", failed[0].Err, "backoff", backoff)
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

// deadLetter is a record the sink sets aside, and why.
type deadLetter struct {
	rec    *kgo.Record
	reason deadletter.Reason
	detail string
}

func (s *FlushThenCommit) produceDead(ctx context.Context, dead []deadLetter) error {
	if len(dead) == 0 {
		return nil
	}
	recs := make([]*kgo.Record, len(dead))
	for i, d := range dead {
		r := deadletter.Record{Source: deadletter.Source{Topic: d.rec.Topic, Partition: d.rec.Partition, Offset: d.rec.Offset},
			Reason: d.reason, Detail: d.detail, Key: d.rec.Key, Value: d.rec.Value, Timestamp: d.rec.Timestamp}
		for _, h := range d.rec.Headers {
			r.Headers = append(r.Headers, deadletter.Header{Key: h.Key, Value: h.Value})
		}
		// A dead letter Kafka refuses for its size would stop the sink on every restart.
		r.Fit(deadletter.DefaultMaxBytes)
		var hs []kgo.RecordHeader
		for _, h := range r.RecordHeaders() {
			hs = append(hs, kgo.RecordHeader{Key: h.Key, Value: h.Value})
		}
		recs[i] = &kgo.Record{Topic: s.cfg.DeadLetterTopic, Key: r.RecordKey(), Value: r.Value, Headers: hs, Timestamp: d.rec.Timestamp}
	}
	backoff := s.cfg.RetryBackoff
	for {
		err := s.cl.ProduceSync(ctx, recs...).FirstErr()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		s.log.Warn("dead-letter produce failed; retrying", "topic", s.cfg.DeadLetterTopic, "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, s.cfg.MaxRetryBackoff)
	}
}

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
	}
	s.m.partitionsChanged("lost", parts)
	s.joined.Store(false)
	s.log.Warn("partitions lost; their buffered records are dropped uncommitted", "partitions", parts)
}

func (s *FlushThenCommit) unassign(parts map[string][]int32) {
	for t, ps := range parts {
		for _, p := range ps {
			delete(s.assigned[t], p)
			delete(s.hwm[t], p)
			delete(s.commits[t], p)
			s.m.dropLag(t, p)
		}
	}
	s.nparts.Store(int64(s.countAssigned()))
	if s.held != nil {
		for t, ps := range parts {
			var keep []int32
		outer:
			for _, q := range s.held[t] {
				for _, p := range ps {
					if p == q {
						continue outer
					}
				}
				keep = append(keep, q)
			}
			if len(keep) == 0 {
				delete(s.held, t)
			} else {
				s.held[t] = keep
			}
		}
		s.m.setHeld(countParts(s.held))
	}
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

// countAssigned counts the partitions owned. Called with mu held.
func (s *FlushThenCommit) countAssigned() int {
	n := 0
	for _, ps := range s.assigned {
		n += len(ps)
	}
	return n
}

func countParts(m map[string][]int32) int {
	n := 0
	for _, ps := range m {
		n += len(ps)
	}
	return n
}
