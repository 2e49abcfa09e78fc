package app

import (
	"context"
	"fmt"
	"time"

	"github.com/abacus-stream/abacus/processors"
	"github.com/abacus-stream/abacus/schema"
	"github.com/abacus-stream/abacus/sinks"
)

// layout is a sink table as the store creates it, from its block of the config.
func (d *deployment) layout(t SinkTable) schema.TableLayout {
	return schema.TableLayout{Name: t.Table, Family: t.Family, SaltBuckets: t.SaltBuckets, Versions: t.Versions,
		TTL: time.Duration(t.TTL), BloomFilter: t.BloomFilter, Compression: t.Compression}
}

// ensureTables creates the sink tables (and offsets table) or checks that they match the config.
func (d *deployment) ensureTables(ctx context.Context) error {
	for _, r := range sinkRoles() {
		t := *r.table(d.cfg)
		if t.Disabled {
			continue
		}
		d.log.Info("ensuring table", "table", t.Table, "salt_buckets", t.SaltBuckets)
		if err := d.st.EnsureTable(ctx, d.layout(t)); err != nil {
			return err
		}
		if r.holdsAggregates {
			state, err := d.ensureKeyIndex(ctx, t)
			if err != nil {
				return err
			}
			d.log.Info("key index", "table", schema.KeyIndexTable(t.Table), "state", state)
		}
	}
	if d.cfg.Sinks.Offsets == "hbase" {
		return sinks.EnsureOffsetsTable(ctx, d.hb.Admin(), d.cfg.Sinks.OffsetsTable)
	}
	return nil
}

// sinkTopics checks that the source topics exist and creates the totals and dead-letter topics
// the sinks read and write, with the sources' partition count, if the processor has not yet.
func (d *deployment) sinkTopics(ctx context.Context) error {
	specs, err := d.topicSpecs(ctx, 0)
	if err != nil {
		return err
	}
	var need []processors.TopicSpec
	for _, t := range specs {
		switch t.Role {
		case processors.RoleSource, processors.RoleTotals, processors.RoleDeadLetter:
			need = append(need, t)
		}
	}
	return d.ensureTopics(ctx, need, processors.RoleSource)
}

// processorConfig is the processor group's configuration; clientOpts may adjust it.
func (d *deployment) processorConfig(clientOpts func(*processors.Config)) processors.Config {
	pc := processors.Config{
		Brokers:     d.cfg.Kafka.Brokers,
		Group:       d.cfg.Processor.Group,
		StoragePath: d.cfg.Processor.StoragePath,
		IdleTimeout: time.Duration(d.cfg.Processor.IdleTimeout),
		Replication: d.cfg.Processor.Replication,
		Registerer:  d.reg,
		Logger:      d.log.With("part", "processor"),
		Sarama:      d.saramaHook(),
		KafkaClient: d.sec.KgoOpts(),

		InstanceID:        d.memberID(RoleProcessor),
		SessionTimeout:    time.Duration(d.cfg.Membership.SessionTimeout),
		HeartbeatInterval: heartbeatInterval,
	}
	if clientOpts != nil {
		clientOpts(&pc)
	}
	return pc
}

// processor is the processor group of the topology, not yet running.
func (d *deployment) processor(clientOpts func(*processors.Config)) (*processors.Processor, error) {
	return processors.New(d.topo, d.processorConfig(clientOpts))
}

// sinkConfig is the configuration of the sink role r, reading its inputs into its table t.
func (d *deployment) sinkConfig(r *role, t SinkTable) sinks.Config {
	cfg := sinks.Config{
		Brokers:         d.cfg.Kafka.Brokers,
		Group:           t.Group,
		Topics:          r.inputs(d.cfg, d.topo),
		DeadLetterTopic: d.topo.DeadLetterTopic(),
		MaxBatchRecords: d.cfg.Sinks.BatchRecords,
		MaxBatchBytes:   d.cfg.Sinks.BatchBytes,
		FlushInterval:   time.Duration(d.cfg.Sinks.FlushInterval),
		Logger:          d.log.With("part", r.sink),
		Metrics:         sinks.NewMetrics(d.reg, r.sink),
		TTL:             time.Duration(t.TTL),
		ClientOptions:   d.sec.KgoOpts(),

		InstanceID:        d.memberID(r.name),
		SessionTimeout:    time.Duration(d.cfg.Membership.SessionTimeout),
		HeartbeatInterval: heartbeatInterval,
	}
	if d.cfg.Sinks.Offsets == "hbase" {
		cfg.Offsets = sinks.NewHBaseOffsets(d.hb, d.cfg.Sinks.OffsetsTable)
	}
	return cfg
}

// aggregatesEncoder writes the totals topic's window totals into the aggregate table t, and
// the key index beside it when that exists.
func (d *deployment) aggregatesEncoder(t SinkTable) (sinks.Encoder, error) {
	enc := &sinks.AggregatesEncoder{Table: t.Table, Family: t.Family, SaltBuckets: t.SaltBuckets}
	if keys, ok := d.keyIndexOn(t); ok {
		enc.KeyIndex, enc.KeyIndexTTL = keys, time.Duration(t.TTL)
	}
	return enc, nil
}

// keyIndexOn reports whether the aggregates sink writes the key index, and its table: it does when
// the table exists with its layout (`abacus admin create` makes it). Without it the sink still
// runs, and listings walk the aggregates table instead, slower; the warning says how to mend it.
func (d *deployment) keyIndexOn(t SinkTable) (string, bool) {
	l := schema.KeyIndexLayout(d.layout(t))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := d.st.VerifyTable(ctx, l); err != nil {
		d.log.Warn("the aggregates sink writes no key index: entity listings will walk the aggregates table, "+
			"a few reads per key; run `abacus admin create`, restart this sink, then `abacus admin reindex`",
			"table", l.Name, "err", err)
		return "", false
	}
	return l.Name, true
}

// factsEncoder writes one cell per source event into the facts table t.
func (d *deployment) factsEncoder(t SinkTable) (sinks.Encoder, error) {
	// The processor dead-letters the source records both refuse: one dead letter per bad record.
	return &sinks.FactsEncoder{Table: t.Table, Family: t.Family, SaltBuckets: t.SaltBuckets, MaxFutureSkew: d.topo.MaxFutureSkew(),
		Extract: sinks.FactsOf(d.topo), LeaveRejectsToProcessor: true}, nil
}

// sink is the sink of role r, not yet running.
func (d *deployment) sink(r *role, encoder func(SinkTable) (sinks.Encoder, error)) (*sinks.FlushThenCommit, error) {
	t := *r.table(d.cfg)
	enc, err := encoder(t)
	if err != nil {
		return nil, err
	}
	return sinks.NewFlushThenCommit(d.sinkConfig(r, t), enc, d.st)
}

// startProcessor starts the processor group; it is ready once its partitions are restored.
func (rg *roleGroup) startProcessor(r *role, o startOptions) error {
	d := rg.d
	p, err := d.processor(o.processor)
	if err != nil {
		return err
	}
	rs, err := rg.claim(r.name, r.groupIn(d.cfg))
	if err != nil {
		return err
	}
	rs.running(func(context.Context) (string, error) {
		if err := p.Ready(); err != nil {
			return "", err
		}
		return fmt.Sprintf("%d partitions, restored and running", p.Status().Partitions), nil
	})
	rg.goRole(rs, p.Run)
	return nil
}

// startSink starts the sink of role r; it is ready while its consumer runs and its table answers.
func (rg *roleGroup) startSink(r *role, encoder func(SinkTable) (sinks.Encoder, error)) error {
	d := rg.d
	s, err := d.sink(r, encoder)
	if err != nil {
		return err
	}
	t := *r.table(d.cfg)
	rs, err := rg.claim(r.name, t.Group)
	if err != nil {
		return err
	}
	rs.running(func(ctx context.Context) (string, error) {
		if err := s.Ready(); err != nil {
			return "", err
		}
		if err := d.tableReachable(ctx, t.Table); err != nil {
			return "", err
		}
		return fmt.Sprintf("%d partitions; table %s reachable", s.Status().Partitions, t.Table), nil
	})
	rg.goRole(rs, s.Run)
	return nil
}
