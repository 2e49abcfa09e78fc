// Package processors runs a topology as a goka processor group on Kafka: it creates the topics
// the group needs, wires the window engine (internal/engine) into goka's callbacks, local LevelDB
// tables and changelogs, sends the ticks that close idle partitions' windows, and recovers from
// unclean stops. The engine's package comment explains how windows close and replays stay exact.
//
// It must never write anywhere but Kafka (the sinks turn totals into HBase cells on their own
// consumers) and never start from local tables a crashed run may have left ahead of the changelog.
//
// goka commits a record's offset once the messages its callback sent are acknowledged. On a
// cluster of several brokers those are acknowledged in any order, so a later record could commit
// while an earlier one's messages were in flight; the processor's own producer settles goka's
// promises in the order messages were sent, so a commit implies that everything sent before it is
// in Kafka, and it tells the engine how far Kafka has acknowledged (see the engine's package
// comment for what depends on it). goka also marks records in the order their callbacks finish,
// not their offsets' order: the group commits only the prefix of each partition's records that
// are all done (commitOrder), and once a write failed for good no later promise succeeds, so no
// offset is committed past a record in flight or one whose writes failed.
package processors

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/lovoo/goka"
	"github.com/lovoo/goka/codec"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/abacus-stream/abacus/internal/engine"
	"github.com/abacus-stream/abacus/internal/plan"
	"github.com/abacus-stream/abacus/membership"
	"github.com/abacus-stream/abacus/tables"
	"github.com/abacus-stream/abacus/topology"
)

// Processor runs one topology as a goka processor group.
type Processor struct {
	topo  *topology.Topology
	plan  *plan.Plan
	cfg   Config
	group goka.Group
	table string
	eng   *engine.Engine
	log   *slog.Logger
	// durability follows the producer goka builds at Run, for the engine.
	durability *durability
	// moves times partitions taken over and given up.
	moves *handover
	// commits makes goka commit each partition's offsets in order (see commitOrder).
	commits *commitOrder
	// aside is what each session read back of the records set aside before it (aside.go).
	aside *asideLedger

	// tables are the partitions' local tables, by partition, for their size (statsCollector).
	tables sync.Map // int32 -> *localtable.Table

	// tableMetrics are the tables' metrics (nil when the topology has none).
	tableMetrics *tables.Metrics

	// gp is goka's processor while Run runs; joined and partitions follow its assignments (Status).
	gp         atomic.Pointer[goka.Processor]
	joined     atomic.Bool
	partitions atomic.Int64
	m          *processorMetrics
}

// New checks the configuration and prepares a processor; Run starts it.
func New(topo *topology.Topology, cfg Config) (*Processor, error) {
	if plan.Of(topo) == nil {
		return nil, errors.New("processors.New: topology is nil or zero (make it with topology.Builder.Build)")
	}
	cfg.EnsureDefaults(topo)
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	p := plan.Of(topo)
	log := cfg.Logger.With("topology", p.Name, "group", cfg.Group)
	d := &durability{}
	asideTopics := []string{p.DeadLetter}
	if p.LateTopic != "" {
		asideTopics = append(asideTopics, p.LateTopic)
	}
	aside := newAsideLedger(cfg.Group, asideTopics, log)
	eng, err := engine.New(p, engine.Config{IdleTimeout: cfg.IdleTimeout, FinalRetention: cfg.FinalRetention,
		Registerer: cfg.Registerer, Logger: log, Now: cfg.Now, Durability: d, Group: cfg.Group, Written: aside.written})
	if err != nil {
		return nil, fmt.Errorf("processors.New: %w", err)
	}
	table := string(goka.GroupTable(goka.Group(cfg.Group)))
	moves, err := newHandover(log, cfg.Registerer, p.Name, table)
	if err != nil {
		return nil, fmt.Errorf("processors.New: register metrics: %w", err)
	}
	proc := &Processor{
		topo:       topo,
		plan:       p,
		cfg:        cfg,
		group:      goka.Group(cfg.Group),
		table:      table,
		eng:        eng,
		log:        log,
		durability: d,
		moves:      moves,
		commits:    &commitOrder{},
		aside:      aside,
	}
	if proc.m, err = newProcessorMetrics(proc, cfg.Registerer, p.Name); err != nil {
		return nil, fmt.Errorf("processors.New: metrics: %w", err)
	}
	if len(p.Tables) > 0 {
		if proc.tableMetrics, err = tables.NewMetrics(cfg.Registerer, p.Name); err != nil {
			return nil, fmt.Errorf("processors.New: table metrics: %w", err)
		}
	}
	return proc, nil
}

// LoopTopic is the name of the group's loop topic (goka names it <group>-loop).
func (p *Processor) LoopTopic() string { return plan.LoopTopic(p.cfg.Group) }

// Restarts of the group in process after a broker outage stopped it: the first comes at once
// (the brokers usually answer by the time goka has shut down), later ones are spaced.
const (
	restartBackoffFirst = time.Second
	restartBackoffMax   = 30 * time.Second
)

// Run creates the output topics, then runs the processor group until ctx is done or it fails for
// a reason other than a broker outage.
//
// goka stops the whole group on the first write or fetch that fails, and sarama gives up a write
// at once when no broker can name the partition's leader: on a single broker that restarts, or a
// cluster that loses every replica of a partition for a while, the group stops with EOF or
// "connection refused". Such a stop is a crash as far as state goes (the local tables may hold
// writes the changelog lacks), so Run does what a restarted process would: it drops the engine's
// view of every partition, discards the local tables, waits for the brokers and runs the group
// again, in process (abacus_processor_restarts_total counts it). Exactness through it is the
// exactness through a SIGKILL and restart, which the crash tests prove.
func (p *Processor) Run(ctx context.Context) error {
	// The lock comes first: a second process on the folder is refused before it touches Kafka.
	unlock, err := p.lockStorage()
	if err != nil {
		return err
	}
	defer unlock()
	backoff := time.Duration(0)
	for {
		t0 := time.Now()
		err := p.runGroup(ctx)
		if err == nil || ctx.Err() != nil || !restartable(err) {
			return err
		}
		if time.Since(t0) > 5*restartBackoffMax {
			backoff = 0 // it ran for a while: this is a new outage
		}
		p.m.restarts.Inc()
		p.log.Warn("the processor group stopped on a broker outage; running it again in this process, from the changelogs",
			"err", err, "retry_in", backoff)
		p.eng.Rebalanced(goka.Assignment{})
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(max(2*backoff, restartBackoffFirst), restartBackoffMax)
	}
}

// restartable reports whether the group stopped for a broker outage (see Run): an error that
// says a broker could not be reached or could not take a write yet, wherever it surfaced (a late
// record the engine could not send fails its callback with it too). Anything else a restart
// cannot cure stops Run: a fenced member, a refused login, a bad topic, a user's error.
func restartable(err error) bool {
	if fenced := (*membership.FencedError)(nil); errors.As(err, &fenced) {
		return false
	}
	return transientText(err)
}

// runGroup runs the processor group once: until ctx is done or goka stops.
func (p *Processor) runGroup(ctx context.Context) error {
	npar, err := p.ensureTopicsRetrying(ctx)
	if err != nil {
		return err
	}
	if npar == 0 {
		return nil // stopped while waiting for the brokers
	}
	if err := p.checkCleanShutdown(); err != nil {
		return err
	}
	if len(p.plan.Tables) > 0 {
		// Read before the group joins, as goka waits for its lookup tables: an event looks its
		// table up by its time, and a table read halfway would answer from versions it has yet to
		// replace.
		set, err := tables.OpenAll(ctx, p.topo, tables.Config{Group: p.cfg.Group,
			Client: append([]kgo.Opt{kgo.SeedBrokers(p.cfg.Brokers...)}, p.cfg.KafkaClient...), Metrics: p.tableMetrics, Logger: p.log})
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("processor %s: %w", p.group, err)
		}
		defer set.Close()
		p.eng.SetTables(set)
	}
	sp, err := p.durableProducer()
	if err != nil {
		return fmt.Errorf("processor %s: kafka producer: %w", p.group, err)
	}
	p.durability.sync.Store(&sp)
	defer func() {
		p.durability.sync.Store(nil)
		if err := sp.Close(); err != nil {
			p.log.Warn("closing the durable producer", "err", err)
		}
	}()
	tmb := p.topicManagerBuilder()
	opts := []goka.ProcessorOption{
		goka.WithTopicManagerBuilder(tmb),
		goka.WithProducerBuilder(p.producerBuilder(true)),
		goka.WithConsumerGroupBuilder(p.consumerGroupBuilder()),
		goka.WithConsumerSaramaBuilder(p.consumerBuilder()),
		goka.WithStorageBuilder(p.storageBuilder()),
		goka.WithRebalanceCallback(p.rebalanced),
		goka.WithLogger(gokaLogger{p.log}),
	}
	opts = append(opts, p.cfg.GokaOptions...)
	proc, err := goka.NewProcessor(p.cfg.Brokers, p.graph(), opts...)
	if err != nil {
		return fmt.Errorf("processor %s: %w", p.group, err)
	}

	emitter, err := goka.NewEmitter(p.cfg.Brokers, goka.Stream(p.LoopTopic()), new(codec.Bytes),
		goka.WithEmitterProducerBuilder(p.producerBuilder(false)),
		goka.WithEmitterTopicManagerBuilder(tmb),
		goka.WithEmitterLogger(gokaLogger{p.log}))
	if err != nil {
		return fmt.Errorf("processor %s: tick emitter: %w", p.group, err)
	}
	tctx, stopTicks := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { p.tick(tctx, emitter, engine.TickKeys(npar)) })

	p.log.Info("processor starting", "partitions", npar, "sources", len(p.plan.Sources), "sets", len(p.plan.Sets),
		"instance_id", p.cfg.InstanceID)
	p.gp.Store(proc)
	err = proc.Run(ctx)
	p.gp.Store(nil)
	p.joined.Store(false)
	stopTicks()
	wg.Wait()
	if ferr := emitter.Finish(); ferr != nil && err == nil {
		err = fmt.Errorf("processor %s: finish tick emitter: %w", p.group, ferr)
	}
	if err != nil && ctx.Err() != nil && strings.Contains(err.Error(), gokaStoppedStarting) {
		// A stop asked for before goka had started: a stop, not a failure (callers tell the two
		// apart by context.Canceled). No clean marker: the local tables were not closed by a run.
		return fmt.Errorf("processor %s: stopped while starting: %w", p.group, context.Cause(ctx))
	}
	if fenced := (*membership.FencedError)(nil); errors.As(err, &fenced) {
		// goka's wrapping (a list of one error) would bury the one thing the operator must read.
		return fmt.Errorf("processor: %w", fenced)
	}
	if err != nil {
		return fmt.Errorf("processor %s: %w", p.group, err)
	}
	if err := os.WriteFile(p.cleanMarker(), []byte(time.Now().UTC().Format(time.RFC3339)), 0o644); err != nil {
		return fmt.Errorf("processor %s: mark clean shutdown: %w", p.group, err)
	}
	return nil
}

// gokaStoppedStarting is what goka's processor (v1.1.16) says, as plain text, when its context
// ends while it waits for its tables at start.
const gokaStoppedStarting = "context closed while waiting for startup tables"

// tick sends every partition a tick each TickInterval until ctx is done. Ticks go to every
// partition from every instance: a tick for a partition another instance owns is harmless.
func (p *Processor) tick(ctx context.Context, em *goka.Emitter, keys []string) {
	t := time.NewTicker(p.cfg.TickInterval)
	defer t.Stop()
	msg := engine.TickMessage()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, k := range keys {
			if _, err := em.Emit(k, msg); err != nil {
				p.log.Warn("send tick", "key", k, "err", err)
			}
		}
	}
}

// lockStorage takes an exclusive lock on the storage folder for the run: two processes on one
// folder would corrupt each other's tables, and a second one would take the first's for a crashed
// run's and delete them. The lock file stays; the lock goes with the process.
func (p *Processor) lockStorage() (func(), error) {
	if err := os.MkdirAll(p.cfg.StoragePath, 0o755); err != nil {
		return nil, fmt.Errorf("processor %s: storage folder: %w", p.group, err)
	}
	path := filepath.Join(filepath.Dir(filepath.Clean(p.cfg.StoragePath)), "."+filepath.Base(p.cfg.StoragePath)+".lock")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("processor %s: lock file: %w", p.group, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("processor %s: storage folder %s is in use by another process (%s is locked): give each processor its own storage_path",
			p.group, p.cfg.StoragePath, path)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}

func (p *Processor) cleanMarker() string {
	return filepath.Join(p.cfg.StoragePath, "abacus-clean-shutdown")
}

// checkCleanShutdown discards the local tables unless the last run ended cleanly. goka writes its
// local table at once and Kafka later: after a crash the local table holds writes the changelog
// never got, and on start goka lays the changelog's acknowledged writes over it, so some entities
// come back older than others. The partition stream time rebuilt from such a mix is ahead of
// where the replay resumes, and replayed events would be judged late. The changelog alone is a
// prefix of the partition's writes, hence consistent: recover from it.
func (p *Processor) checkCleanShutdown() error {
	entries, err := os.ReadDir(p.cfg.StoragePath)
	if errors.Is(err, os.ErrNotExist) {
		return os.MkdirAll(p.cfg.StoragePath, 0o755)
	}
	if err != nil {
		return fmt.Errorf("processor %s: read storage folder: %w", p.group, err)
	}
	if len(entries) == 0 {
		return nil // a fresh folder
	}
	if _, err := os.Stat(p.cleanMarker()); err == nil {
		if err := os.Remove(p.cleanMarker()); err != nil {
			return fmt.Errorf("processor %s: clear clean-shutdown mark: %w", p.group, err)
		}
		return nil
	}
	p.log.Warn("last run did not end cleanly: discarding local tables, recovering state from the changelog",
		"storage", p.cfg.StoragePath)
	if err := os.RemoveAll(p.cfg.StoragePath); err != nil {
		return fmt.Errorf("processor %s: discard local tables: %w", p.group, err)
	}
	return os.MkdirAll(p.cfg.StoragePath, 0o755)
}
