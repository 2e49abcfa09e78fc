package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// admin is the harness's own Kafka client: topics, offsets, producing the workload.
type admin struct {
	brokers []string
	cl      *kgo.Client
	adm     *kadm.Client
}

func newAdmin(brokers []string) (*admin, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	return &admin{brokers: brokers, cl: cl, adm: kadm.NewClient(cl)}, nil
}

func (a *admin) close() { a.cl.Close() }

// createTopic creates topic with the benchmark's partition count. Output topics take
// LogAppendTime, so that each final's timestamp is when the broker got it, whatever timestamp
// the system set (Kafka Streams stamps results with event time).
func (a *admin) createTopic(ctx context.Context, topic string, logAppendTime bool) error {
	var cfg map[string]*string
	if logAppendTime {
		t := "LogAppendTime"
		cfg = map[string]*string{"message.timestamp.type": &t}
	}
	if _, err := a.adm.CreateTopic(ctx, partitions, 1, cfg, topic); err != nil {
		return fmt.Errorf("create topic %s: %w", topic, err)
	}
	return nil
}

// endOffsets returns the sum of the end offsets of topic's partitions and their number.
func (a *admin) endOffsets(ctx context.Context, topic string) (int64, int, error) {
	l, err := a.adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return 0, 0, fmt.Errorf("end offsets of %s: %w", topic, err)
	}
	if err := l.Error(); err != nil {
		return 0, 0, fmt.Errorf("end offsets of %s: %w", topic, err)
	}
	var sum int64
	n := 0
	l.Each(func(o kadm.ListedOffset) { sum += o.Offset; n++ })
	return sum, n, nil
}

// committed returns the sum of group's committed offsets on topic (0 before its first commit).
func (a *admin) committed(ctx context.Context, group, topic string) (int64, error) {
	rs, err := a.adm.FetchOffsets(ctx, group)
	if err != nil {
		if errors.Is(err, kerr.GroupIDNotFound) || errors.Is(err, kerr.CoordinatorLoadInProgress) {
			return 0, nil
		}
		return 0, fmt.Errorf("committed offsets of group %s: %w", group, err)
	}
	var sum int64
	rs.Each(func(o kadm.OffsetResponse) {
		if o.Topic == topic && o.Err == nil && o.At > 0 {
			sum += o.At
		}
	})
	return sum, nil
}

// dropRun deletes the topics and groups whose names start with prefix: everything one harness
// run created (outputs, changelogs, loops), never the reusable inputs.
func (a *admin) dropRun(ctx context.Context, prefix string) error {
	ts, err := a.adm.ListTopics(ctx)
	if err != nil {
		return fmt.Errorf("list topics: %w", err)
	}
	var drop []string
	for _, t := range ts.Names() {
		if strings.HasPrefix(t, prefix) {
			drop = append(drop, t)
		}
	}
	if len(drop) > 0 {
		if _, err := a.adm.DeleteTopics(ctx, drop...); err != nil {
			return fmt.Errorf("delete topics %v: %w", drop, err)
		}
	}
	gs, err := a.adm.ListGroups(ctx)
	if err != nil {
		return fmt.Errorf("list groups: %w", err)
	}
	var groups []string
	for _, g := range gs.Groups() {
		if strings.HasPrefix(g, prefix) {
			groups = append(groups, g)
		}
	}
	if len(groups) > 0 {
		if _, err := a.adm.DeleteGroups(ctx, groups...); err != nil {
			return fmt.Errorf("delete groups %v: %w", groups, err)
		}
	}
	return nil
}

// input is a produced workload topic and what a correct run must produce from it.
type input struct {
	w      *workload
	topic  string
	base   int64
	total  int64 // records in the topic, sentinels and probes included
	expect *expectation
	// registry is a join workload's entity registry topic, "" otherwise.
	registry string
}

// ensureInput produces the workload into a topic of its own, or reuses the topic a previous run
// produced (same workload, same size, complete): runs before and after a change then read the
// same records. A topic of the right name whose record count is off is deleted and produced again.
func (a *admin) ensureInput(ctx context.Context, log *slog.Logger, w *workload, prefix string, reuse bool) (*input, error) {
	in := &input{w: w, topic: w.topicName(prefix)}
	want := int64(w.events())
	if w.sentinels {
		want += partitions
	}
	total, nparts, err := a.endOffsets(ctx, in.topic)
	exists := err == nil && nparts > 0
	if exists && reuse && nparts == partitions && total == want {
		if in.base, err = a.firstEventTime(ctx, in.topic); err != nil {
			return nil, err
		}
		in.base = in.base / windowMs * windowMs
		in.total = total
		log.Info("reusing input", "topic", in.topic, "records", total)
	} else {
		if exists {
			log.Info("input topic incomplete or not reusable: producing it again", "topic", in.topic, "records", total, "want", want)
			if _, err := a.adm.DeleteTopics(ctx, in.topic); err != nil {
				return nil, fmt.Errorf("delete %s: %w", in.topic, err)
			}
			if err := a.waitGone(ctx, in.topic); err != nil {
				return nil, err
			}
		}
		// Event time starts three hours back, on a minute: far enough from the wall clock that
		// no system sees an event from the future (abacus dead-letters events more than 5
		// minutes ahead), recent enough for the broker's 7-day retention.
		in.base = time.Now().Add(-3*time.Hour).UnixMilli() / windowMs * windowMs
		if err := a.produce(ctx, log, in); err != nil {
			return nil, err
		}
		// Metadata of a topic created moments ago may still be missing: retry a little.
		for try := 0; ; try++ {
			if in.total, _, err = a.endOffsets(ctx, in.topic); err == nil || try == 50 {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		if err != nil {
			return nil, err
		}
		if in.total != want {
			return nil, fmt.Errorf("input %s holds %d records after producing, want %d", in.topic, in.total, want)
		}
	}
	if w.join {
		in.registry = w.registryName(prefix)
		if err := a.ensureRegistry(ctx, log, w, in, reuse); err != nil {
			return nil, err
		}
	}
	if w.sentinels {
		in.expect = w.expect(in.base)
	}
	return in, nil
}

// ensureRegistry produces a join workload's registry (every entity's region, regionOf, stamped an
// hour before the input's first window, partitioned as the input), or reuses the topic a previous
// run produced. Kafka Streams' versioned table needs it partitioned as the input (co-partitioned);
// abacus reads it whole.
func (a *admin) ensureRegistry(ctx context.Context, log *slog.Logger, w *workload, in *input, reuse bool) error {
	total, nparts, err := a.endOffsets(ctx, in.registry)
	if err == nil && nparts == partitions && int(total) == w.entities && reuse {
		log.Info("reusing registry", "topic", in.registry, "records", total)
		return nil
	}
	if err == nil && nparts > 0 {
		if _, err := a.adm.DeleteTopics(ctx, in.registry); err != nil {
			return fmt.Errorf("delete %s: %w", in.registry, err)
		}
		if err := a.waitGone(ctx, in.registry); err != nil {
			return err
		}
	}
	if err := a.createTopic(ctx, in.registry, false); err != nil {
		return err
	}
	p, err := a.producer(in.registry)
	if err != nil {
		return err
	}
	defer p.Close()
	// Stamped before the base of any input (a reused input's base is older than a new registry's).
	at := time.UnixMilli(in.base).Add(-24 * time.Hour)
	var recs []*kgo.Record
	for i := range w.entities {
		name := entityName(i)
		recs = append(recs, &kgo.Record{Key: []byte(name), Value: []byte(regionOf(name)), Timestamp: at})
		if len(recs) == 10_000 || i == w.entities-1 {
			if err := p.ProduceSync(ctx, recs...).FirstErr(); err != nil {
				return fmt.Errorf("produce %s: %w", in.registry, err)
			}
			recs = recs[:0]
		}
	}
	log.Info("produced registry", "topic", in.registry, "entities", w.entities)
	return nil
}

func (a *admin) waitGone(ctx context.Context, topic string) error {
	for range 100 {
		ts, err := a.adm.ListTopics(ctx, topic)
		if err == nil && !ts.Has(topic) {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("topic %s still exists 10 s after its deletion", topic)
}

// firstEventTime reads the record timestamp (= event time) of one record of the topic.
func (a *admin) firstEventTime(ctx context.Context, topic string) (int64, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(a.brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		fs := cl.PollRecords(ctx, 1)
		if err := ctx.Err(); err != nil {
			return 0, fmt.Errorf("read the first record of %s: %w", topic, err)
		}
		if recs := fs.Records(); len(recs) > 0 {
			return recs[0].Timestamp.UnixMilli(), nil
		}
	}
}

// producer writes records keyed by entity, partitioned as goka/sarama partition keys.
func (a *admin) producer(topic string) (*kgo.Client, error) {
	return kgo.NewClient(kgo.SeedBrokers(a.brokers...), kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kgo.StickyKeyPartitioner(kgo.SaramaCompatHasher(fnv32a))),
		kgo.ProducerLinger(5*time.Millisecond), kgo.ProducerBatchMaxBytes(1<<20))
}

func (a *admin) produce(ctx context.Context, log *slog.Logger, in *input) error {
	if err := a.createTopic(ctx, in.topic, false); err != nil {
		return err
	}
	p, err := a.producer(in.topic)
	if err != nil {
		return err
	}
	defer p.Close()
	t0 := time.Now()
	var mu sync.Mutex
	var perr error
	done := func(_ *kgo.Record, err error) {
		if err != nil {
			mu.Lock()
			perr = errors.Join(perr, err)
			mu.Unlock()
		}
	}
	in.w.each(in.base, func(e event) {
		name := entityName(e.entity)
		// The record timestamp is the event time too: it keeps the topic's retention honest,
		// though every system reads event time from the payload.
		p.Produce(ctx, &kgo.Record{Key: []byte(name), Value: encodeEvent(nil, e), Timestamp: time.UnixMilli(e.ts)}, done)
	})
	if err := p.Flush(ctx); err != nil {
		return fmt.Errorf("produce %s: %w", in.topic, err)
	}
	if perr != nil {
		return fmt.Errorf("produce %s: %w", in.topic, perr)
	}
	if in.w.sentinels {
		// After every real event (Flush above), so each is the last record of its partition.
		st := in.w.sentinelTime(in.base)
		var recs []*kgo.Record
		for i, k := range keysPerPartition(sentinelPrefix, partitions) {
			recs = append(recs, sentinelRecord(k, st, i))
		}
		if err := p.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			return fmt.Errorf("produce sentinels to %s: %w", in.topic, err)
		}
	}
	log.Info("produced input", "topic", in.topic, "events", in.w.events(), "entities", in.w.entities,
		"took", time.Since(t0).Round(time.Millisecond))
	return nil
}

func sentinelRecord(key string, ts int64, i int) *kgo.Record {
	v := fmt.Appendf(nil, `{"entity":%q,"ts":%d,"v":%d}`, key, ts, i)
	return &kgo.Record{Key: []byte(key), Value: v, Timestamp: time.UnixMilli(ts)}
}

// produceProbes writes one event per partition in the restore workload's open window: a
// restarted processor handles them only once its state is rebuilt.
func (a *admin) produceProbes(ctx context.Context, in *input, round int) error {
	p, err := a.producer(in.topic)
	if err != nil {
		return err
	}
	defer p.Close()
	var recs []*kgo.Record
	ts := in.base + windowMs - 1 // same window as every restore event: closes nothing
	for i, k := range keysPerPartition(fmt.Sprintf("%s%d-", probePrefix, round), partitions) {
		recs = append(recs, sentinelRecord(k, ts, i))
	}
	if err := p.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return fmt.Errorf("produce probes to %s: %w", in.topic, err)
	}
	in.total += partitions
	return nil
}
