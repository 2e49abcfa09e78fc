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
	for _, t := range []SinkTable{d.cfg.Sinks.Aggregates, d.cfg.Sinks.Facts} {
		if t.Disabled {
			continue
		}
		d.log.Info("ensuring table", "table", t.Table, "salt_buckets", t.SaltBuckets)
		if err := d.st.EnsureTable(ctx, d.layout(t)); err != nil {
			return err
		}
		if t == d.cfg.Sinks.Aggregates {
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

// sinkConfig is the configuration of the sink called name, reading topics into table t.
func (d *deployment) sinkConfig(t SinkTable, topics []string, name string) (sinks.Config, error) {
	cfg := sinks.Config{
		Brokers:         d.cfg.Kafka.Brokers,
		Group:           t.Group,
		Topics:          topics,
		DeadLetterTopic: d.topo.DeadLetterTopic(),
		MaxBatchRecords: d.cfg.Sinks.BatchRecords,
		MaxBatchBytes:   d.cfg.Sinks.BatchBytes,
		FlushInterval:   time.Duration(d.cfg.Sinks.FlushInterval),
		Logger:          d.log.With("part", name),
		Metrics:         sinks.NewMetrics(d.reg, name),
		TTL:             time.Duration(t.TTL),
		ClientOptions:   d.sec.KgoOpts(),

		InstanceID:        d.memberID(roleOfSink[name]),
		SessionTimeout:    time.Duration(d.cfg.Membership.SessionTimeout),
		HeartbeatInterval: heartbeatInterval,
	}
	if d.cfg.Sinks.Offsets == "hbase" {
		cfg.Offsets = sinks.NewHBaseOffsets(d.hb, d.cfg.Sinks.OffsetsTable)
	}
	return cfg, nil
}

// aggregatesSink writes the totals topic's window totals into the aggregate table.
func (d *deployment) aggregatesSink() (*sinks.FlushThenCommit, error) {
	t := d.cfg.Sinks.Aggregates
	cfg, err := d.sinkConfig(t, []string{d.topo.TotalsTopic()}, "aggregates")
	if err != nil {
		return nil, err
	}
	enc := &sinks.AggregatesEncoder{Table: t.Table, Family: t.Family, SaltBuckets: t.SaltBuckets}
	if keys, ok := d.keyIndexOn(t); ok {
		enc.KeyIndex, enc.KeyIndexTTL = keys, time.Duration(t.TTL)
	}
	return sinks.NewFlushThenCommit(cfg, enc, d.st)
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

// factsSink writes one cell per source event into the facts table.
func (d *deployment) factsSink() (*sinks.FlushThenCommit, error) {
	t := d.cfg.Sinks.Facts
	cfg, err := d.sinkConfig(t, d.topo.SourceTopics(), "facts")
	if err != nil {
		return nil, err
	}
	// The processor dead-letters the source records both refuse: one dead letter per bad record.
	enc := &sinks.FactsEncoder{Table: t.Table, Family: t.Family, SaltBuckets: t.SaltBuckets, MaxFutureSkew: d.topo.MaxFutureSkew(),
		Extract: sinks.FactsOf(d.topo), LeaveRejectsToProcessor: true}
	return sinks.NewFlushThenCommit(cfg, enc, d.st)
}

// roleOfSink names the role of each sink.
var roleOfSink = map[string]string{"aggregates": RoleAggregates, "facts": RoleFacts}

// startProcessor starts the processor group; it is ready once its partitions are restored.
func (rg *roleGroup) startProcessor(procOpts func(*processors.Config)) error {
	d := rg.d
	p, err := d.processor(procOpts)
	if err != nil {
		return err
	}
	rs, err := rg.claim(RoleProcessor, d.cfg.Processor.Group)
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

// startSink starts one sink (RoleAggregates or RoleFacts), unless its table is disabled; it is
// ready while its consumer runs and its table answers.
func (rg *roleGroup) startSink(role string) error {
	d := rg.d
	t, mk := d.cfg.Sinks.Aggregates, d.aggregatesSink
	if role == RoleFacts {
		t, mk = d.cfg.Sinks.Facts, d.factsSink
	}
	if t.Disabled {
		return nil
	}
	s, err := mk()
	if err != nil {
		return err
	}
	rs, err := rg.claim(role, t.Group)
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
