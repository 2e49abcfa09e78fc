package processors

import (
	"errors"
	"fmt"
	"hash"
	"log/slog"
	"sync/atomic"

	"github.com/IBM/sarama"
	"github.com/lovoo/goka"
	"github.com/lovoo/goka/codec"
	"github.com/lovoo/goka/storage"

	"github.com/abacus-stream/abacus/internal/localtable"
)

// The builders give goka clients made from Config.saramaConfig, so that every client of the group
// gets the same protocol version, acknowledgements, timeouts and the user's Sarama hook.

// topicManagerBuilder builds goka's topic manager, its lookups retried through a broker outage
// (retryingTopicManager).
func (p *Processor) topicManagerBuilder() goka.TopicManagerBuilder {
	return func(brokers []string) (goka.TopicManager, error) {
		tmc := goka.NewTopicManagerConfig()
		tmc.Table.Replication = p.cfg.Replication
		tmc.Stream.Replication = p.cfg.Replication
		tmc.Stream.Retention = p.cfg.LoopRetention
		tm, err := goka.NewTopicManager(brokers, p.cfg.saramaConfig("abacus-topic-manager"), tmc)
		if err != nil {
			return nil, err
		}
		return &retryingTopicManager{TopicManager: tm, log: p.log}, nil
	}
}

// producerBuilder builds the group's producers: idempotent (one request in flight per broker,
// retries that neither duplicate nor reorder), settling in send order (see producer). The one
// the processor writes its state and totals with reports to the engine (track).
func (p *Processor) producerBuilder(track bool) goka.ProducerBuilder {
	return func(brokers []string, clientID string, hasher func() hash.Hash32) (goka.Producer, error) {
		c := p.cfg.saramaConfig(clientID)
		c.Producer.Partitioner = sarama.NewCustomHashPartitioner(hasher)
		c.Producer.Idempotent = true
		c.Producer.RequiredAcks = sarama.WaitForAll
		c.Net.MaxOpenRequests = 1
		if c.Producer.Retry.Max < 1 {
			c.Producer.Retry.Max = 1
		}
		prod, err := newProducer(brokers, c)
		if err != nil {
			return nil, err
		}
		if track {
			p.durability.use(prod)
		}
		return prod, nil
	}
}

// durability is the engine's view of the processor's producer, which goka builds when the group
// runs, and of the synchronous producer Run builds for the messages that must be in Kafka before
// the engine goes on (engine.DurableSender).
type durability struct {
	p    atomic.Pointer[producer]
	sync atomic.Pointer[sarama.SyncProducer]
}

// SendDurable implements engine.DurableSender: one message, sent at once (no linger: goka's
// producers wait up to 100 ms to fill a batch) and acknowledged by every in-sync replica.
func (d *durability) SendDurable(topic, key string, value []byte, headers goka.Headers) error {
	sp := d.sync.Load()
	if sp == nil {
		return errors.New("no durable producer: the processor is not running")
	}
	msg := &sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(key), Value: sarama.ByteEncoder(value),
		Headers: recordHeaders(headers)} // stamped with the time of the write, as in producer
	_, _, err := (*sp).SendMessage(msg)
	return err
}

// durableProducer builds the synchronous producer of SendDurable.
func (p *Processor) durableProducer() (sarama.SyncProducer, error) {
	c := p.cfg.saramaConfig("abacus-durable")
	c.Producer.Idempotent = true
	c.Producer.RequiredAcks = sarama.WaitForAll
	c.Producer.Return.Successes = true
	c.Producer.Flush.Frequency, c.Producer.Flush.Bytes, c.Producer.Flush.Messages = 0, 0, 0
	c.Net.MaxOpenRequests = 1
	return sarama.NewSyncProducer(p.cfg.Brokers, c)
}

func (d *durability) use(p *producer) { d.p.Store(p) }

// Sent implements engine.Durability.
func (d *durability) Sent() uint64 {
	if p := d.p.Load(); p != nil {
		return p.Sent()
	}
	return 0
}

// Acknowledged implements engine.Durability.
func (d *durability) Acknowledged() uint64 {
	if p := d.p.Load(); p != nil {
		return p.Acknowledged()
	}
	return 0
}

// consumerGroupBuilder builds the group's member: sarama's consumer group, retrying what a broker
// outage makes fail, static when Config.InstanceID is set, with the session timeout and heartbeat
// of the config (see consumerGroup).
func (p *Processor) consumerGroupBuilder() goka.ConsumerGroupBuilder {
	return func(brokers []string, group, clientID string) (sarama.ConsumerGroup, error) {
		sc := p.cfg.saramaConfig(clientID)
		if err := p.cfg.applyMembership(sc); err != nil {
			return nil, err
		}
		cg, err := newConsumerGroup(brokers, group, sc, p.log, p.moves.released, p.eng.Resumed, p.commits, p.aside)
		if err != nil {
			return nil, err
		}
		cg.deleted = p.m.deletedUnread
		return cg, nil
	}
}

func (p *Processor) consumerBuilder() goka.SaramaConsumerBuilder {
	return func(brokers []string, clientID string) (sarama.Consumer, error) {
		return sarama.NewConsumer(brokers, p.cfg.saramaConfig(clientID))
	}
}

// storageBuilder opens the local tables under StoragePath (LevelDB, written in batches: see
// package localtable) and hands each partition's table to the engine, which rebuilds its close
// schedule from it after an assignment; goka gets it through a counter of the records it
// restores (handover).
func (p *Processor) storageBuilder() storage.Builder {
	inner := localtable.Builder(p.cfg.StoragePath, 0)
	return func(topic string, part int32) (storage.Storage, error) {
		st, err := inner(topic, part)
		if err != nil {
			return nil, err
		}
		if topic == p.table {
			if lt, ok := st.(*localtable.Table); ok {
				p.tables.Store(part, lt)
			}
			p.eng.SetStorage(part, st)
			return p.moves.storage(part, st), nil
		}
		return st, nil
	}
}

// graph is the group graph: the engine's inputs, loop and table, and its output topics. Every
// callback is wrapped to note its record's offset as it starts, so that offsets commit in order
// (commitOrder); the sources' callbacks also to time the first event after a takeover. An input
// of the engine's that graph did not know would run unwrapped: its offsets would then commit as
// goka marks them, as before commitOrder, rather than never.
func (p *Processor) graph() *goka.GroupGraph {
	// The loop edge is named by its group only: find it as goka does (which names the edges).
	in := p.eng.Edges()
	loop := goka.DefineGroup(p.group, in...).LoopStream()
	var edges []goka.Edge
	for _, e := range in {
		for i, s := range p.plan.Sources {
			if e.Topic() == s.Topic {
				e = goka.Input(goka.Stream(s.Topic), e.Codec(), p.commits.track(p.moves.observe(p.eng.SourceCallback(i))))
				break
			}
		}
		if loop != nil && e == loop {
			e = goka.Loop(e.Codec(), p.commits.track(p.eng.LoopCallback()))
		}
		edges = append(edges, e)
	}
	for _, t := range p.eng.OutputTopics() {
		edges = append(edges, goka.Output(goka.Stream(t), new(codec.Bytes)))
	}
	return goka.DefineGroup(p.group, edges...)
}

// gokaLogger sends goka's logs to slog at debug level: goka is chatty about normal rebalances.
type gokaLogger struct{ l *slog.Logger }

// Print implements goka.Logger.
func (g gokaLogger) Print(v ...any) { g.l.Debug(fmt.Sprint(v...), "component", "goka") }

// Println implements goka.Logger.
func (g gokaLogger) Println(v ...any) { g.l.Debug(fmt.Sprint(v...), "component", "goka") }

// Printf implements goka.Logger.
func (g gokaLogger) Printf(format string, v ...any) {
	g.l.Debug(fmt.Sprintf(format, v...), "component", "goka")
}
