package main

// Everything that names abacus's own packages is in this file, so that moving them (the totals
// record is about to leave processors/) is a change here only.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/abacus-stream/abacus/deadletter"
	"github.com/abacus-stream/abacus/processors"
	"github.com/abacus-stream/abacus/state"
	"github.com/abacus-stream/abacus/topology"
	"github.com/abacus-stream/abacus/totals"
	"github.com/abacus-stream/abacus/windows"
)

// reading is the workload's event as the Go systems decode it.
type reading struct {
	Entity string  `json:"entity"`
	TS     int64   `json:"ts"`
	V      float64 `json:"v"`
	Region string  `json:"-"` // a join workload's, from the registry
}

// abacusTopology is the benchmark's aggregation: per entity, 1-minute tumbling windows with no
// grace, count + sum + max of v, finals only (the default emission). With late set, late events
// go to that topic, as users who keep them configure it: writing their late records is part of
// what a late event costs. With rollup, the same source has two more sets with the same window
// and aggregations: per region (By, regionOf the entity; sentinels have none, so they are left
// out) and for all events (Global). With a registry, the region is the one the registry gave the
// entity at the event's time (a table join), "" when it had none (the sentinels).
func abacusTopology(group, input, output, late string, rollup bool, registry string) (*topology.Topology, error) {
	b := topology.New(group).TotalsTopic(output)
	if late != "" {
		b.LateTopic(late)
	}
	src := topology.NewSource(b, input, topology.JSON[reading](),
		func(r reading) string { return r.Entity },
		func(r reading) time.Time { return time.UnixMilli(r.TS) })
	src.Aggregate(setName, windows.Tumbling(time.Minute)).Grace(0).
		Count("count").Sum("sum", "v").Max("max", "v")
	region := func(r reading) string { return regionOf(r.Entity) }
	if registry != "" {
		regions := topology.NewTable[string](b, "regions", registry, stringCodec{})
		topology.Join(src, regions, func(r reading) string { return r.Entity }, func(r reading, region string, found bool) (reading, error) {
			if found {
				r.Region = region
			}
			return r, nil
		})
		region = func(r reading) string { return r.Region }
	}
	if rollup {
		src.Aggregate(regionSet, windows.Tumbling(time.Minute)).Grace(0).
			By("region", region).
			Count("count").Sum("sum", "v").Max("max", "v")
		src.Aggregate(globalSet, windows.Tumbling(time.Minute)).Grace(0).Global().
			Count("count").Sum("sum", "v").Max("max", "v")
	}
	return b.Build()
}

// stringCodec decodes a registry value into a string once, when the table reads it, so that a
// lookup hands the join a string and allocates nothing per event.
type stringCodec struct{}

func (stringCodec) Encode(v any) ([]byte, error) { return []byte(v.(string)), nil }
func (stringCodec) Decode(b []byte) (any, error) { return string(b), nil }

// runAbacus runs the abacus processor until ctx is done, reporting the events it received.
func runAbacus(ctx context.Context, a childArgs, progress func(int64)) error {
	topo, err := abacusTopology(a.group, a.input, a.output, a.late, a.rollup, a.registry)
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	p, err := processors.New(topo, processors.Config{
		Brokers:     a.brokers,
		Group:       a.group,
		StoragePath: a.storage,
		Registerer:  reg,
		Logger:      slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		// The input replays minutes of event time in seconds and ends with its sentinels; an
		// idle partition must not advance stream time with the wall clock and close the
		// sentinels' windows (or, in the restore runs, every window) on its own.
		IdleTimeout: time.Hour,
		// Ticks at the pace of the default IdleTimeout (its quarter, the default tick), not of
		// the hour above, as a deployment's would. (dense-rollup once stalled with an hour's
		// 15-minute tick: partitions then noticed the acknowledgements their rollup progress
		// waits for only at a tick; they nudge themselves since, processors'
		// TestRollupFinalsWithoutTicks.)
		TickInterval:   processors.DefaultIdleTimeout / 4,
		FinalRetention: a.finalRetention,
	})
	if err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case err := <-done:
			if err == nil && ctx.Err() == nil {
				return errors.New("processors.Run returned before it was asked to stop")
			}
			return err
		case <-t.C:
			progress(counterSum(reg, "abacus_processor_events_in_total"))
		}
	}
}

func counterSum(reg *prometheus.Registry, name string) int64 {
	mfs, err := reg.Gather()
	if err != nil {
		return 0
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return int64(sum)
}

// decodeAbacus reads one record of abacus's totals topic.
func decodeAbacus(rec *kgo.Record) (final, bool, error) {
	r, err := totals.Decode(rec.Value)
	if err != nil {
		return final{}, false, err
	}
	f := final{set: r.Set, entity: r.Entity, start: r.Start}
	c, ok1 := r.Value("count")
	s, ok2 := r.Value("sum")
	m, ok3 := r.Value("max")
	if !ok1 || !ok2 || !ok3 {
		return final{}, false, fmt.Errorf("total of %s lacks count, sum or max: %+v", r.Entity, r.Values)
	}
	f.agg = winAgg{count: c.Int, sum: s.Float, max: m.Float}
	return f, r.Final, nil
}

// setName is the benchmark topology's per-entity set, its one set outside the rollup workloads
// (which have no late events): each late event gives one late record, which names it.
const setName = "minute"

// lateRecord is what the harness checks of a record of abacus's late topic.
type lateRecord struct {
	late      bool   // the reason is "late" (not another dead-letter reason)
	reason    string // for failure messages
	set       string // the set the event was late for
	topic     string // the event's input position
	partition int32
	offset    int64
}

// decodeLate reads one record of abacus's late topic.
func decodeLate(rec *kgo.Record) (lateRecord, error) {
	hs := make([]deadletter.Header, len(rec.Headers))
	for i, h := range rec.Headers {
		hs[i] = deadletter.Header{Key: h.Key, Value: h.Value}
	}
	r, err := deadletter.Parse(rec.Value, hs)
	if err != nil {
		return lateRecord{}, err
	}
	return lateRecord{late: r.Reason == deadletter.Late, reason: string(r.Reason), set: r.Set,
		topic: r.Source.Topic, partition: r.Source.Partition, offset: r.Source.Offset}, nil
}

// tableStats describes abacus's local window table (LevelDB) at rest.
type tableStats struct {
	entities, windows               int64
	keyBytes, valueBytes, diskBytes int64
	// Parts of the values: the offset fences, the windows' accumulators, and the rest (entity
	// and window headers: version, stream time, bounds, revision, lengths).
	fenceBytes, aggBytes int64
}

// decodeEntity returns an encoded entity's window count and the bytes its fences and its
// accumulators take in the encoding (measured by encoding it without them).
func decodeEntity(v []byte) (windows, fenceBytes, aggBytes int64, err error) {
	e, err := state.Decode(v)
	if err != nil {
		return 0, 0, 0, err
	}
	full := int64(len(v))
	noFences := *e
	noFences.Fences = nil
	fenceBytes = full - int64(len(noFences.Append(nil)))
	noAggs := *e
	noAggs.Windows = make([]state.Window, len(e.Windows))
	for i, w := range e.Windows {
		w.Aggs = nil
		noAggs.Windows[i] = w
	}
	aggBytes = full - int64(len(noAggs.Append(nil)))
	return int64(len(e.Windows)), fenceBytes, aggBytes, nil
}
