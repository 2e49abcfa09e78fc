package processors

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/lovoo/goka"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/abacus-stream/abacus/internal/localtable"
)

// Status is what one instance of the processor is doing, for readiness checks.
type Status struct {
	// Started is set while Run runs.
	Started bool
	// Joined is set once the instance has received an assignment from its group.
	Joined bool
	// Partitions is how many partitions the last assignment gave this instance (0 when the group
	// has more instances than partitions).
	Partitions int
	// Running is set while every assigned partition is restored and processing; it is unset while
	// a rebalance sets up partitions and restores their state from the changelog.
	Running bool
}

// Status says what the instance is doing now.
func (p *Processor) Status() Status {
	gp := p.gp.Load()
	s := Status{Started: gp != nil, Joined: p.joined.Load(), Partitions: int(p.partitions.Load())}
	s.Running = gp != nil && s.Joined && gp.Recovered()
	return s
}

// Ready returns nil when the instance has joined its group and every partition it was assigned is
// restored and processing, or an error saying what it waits for.
func (p *Processor) Ready() error {
	s := p.Status()
	switch {
	case !s.Started:
		return errors.New("processor not started")
	case !s.Joined:
		return fmt.Errorf("processor not in group %s yet", p.cfg.Group)
	case !s.Running:
		return fmt.Errorf("processor setting up %d partitions (restoring their state from the changelog)", s.Partitions)
	}
	return nil
}

// rebalanced is goka's rebalance callback: the engine keeps the partitions it still owns, and the
// status and metrics follow the assignment.
func (p *Processor) rebalanced(a goka.Assignment) {
	p.moves.rebalanced(a)
	p.eng.Rebalanced(a)
	p.partitions.Store(int64(len(a)))
	p.joined.Store(true)
	p.m.assigned.Set(float64(len(a)))
	p.m.rebalances.Inc()
}

// processorMetrics are the processor's own metrics, beside the engine's.
type processorMetrics struct {
	assigned   prometheus.Gauge
	rebalances prometheus.Counter
	restarts   prometheus.Counter
	deleted    *prometheus.CounterVec // topic
}

// deletedUnread counts records the broker deleted before the group read them.
func (m *processorMetrics) deletedUnread(topic string, n int64) {
	m.deleted.WithLabelValues(topic).Add(float64(n))
}

func newProcessorMetrics(p *Processor, reg prometheus.Registerer, topology string) (*processorMetrics, error) {
	cl := prometheus.Labels{"topology": topology}
	m := &processorMetrics{
		assigned: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "abacus", Subsystem: "processor",
			Name: "partitions_assigned", ConstLabels: cl,
			Help: "Partitions the group's last assignment gave this instance."}),
		rebalances: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "abacus", Subsystem: "processor",
			Name: "assignments_total", ConstLabels: cl,
			Help: "Assignments this instance received: one at its start, then one per rebalance of its group."}),
		restarts: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "abacus", Subsystem: "processor",
			Name: "restarts_total", ConstLabels: cl,
			Help: "Times the processor group stopped on a broker outage and was run again in this process, from its changelogs."}),
		deleted: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "abacus", Subsystem: "processor",
			Name: "records_deleted_unread_total", ConstLabels: cl,
			Help: "Records the broker deleted (retention, DeleteRecords) after the group's committed offset and before the processor read them: lost to it."},
			[]string{"topic"}),
	}
	for _, c := range []prometheus.Collector{m.assigned, m.rebalances, m.restarts, m.deleted, &statsCollector{p: p, labels: cl}} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// statsCollector reads goka's statistics of the running partitions at each scrape: how far each
// input is behind its high watermark, and how much of a partition's changelog is left to restore.
type statsCollector struct {
	p      *Processor
	labels prometheus.Labels
}

func (c *statsCollector) lagDesc() *prometheus.Desc {
	return prometheus.NewDesc("abacus_processor_input_lag_records",
		"Records of an input partition (source or loop topic) after the last one processed, at its last high watermark.",
		[]string{"topic", "partition"}, c.labels)
}

func (c *statsCollector) restoreDesc() *prometheus.Desc {
	return prometheus.NewDesc("abacus_processor_restore_remaining_records",
		"Changelog records of a partition's state still to restore before it processes (0 once running).",
		[]string{"partition"}, c.labels)
}

func (c *statsCollector) bytesDesc() *prometheus.Desc {
	return prometheus.NewDesc("abacus_processor_state_bytes",
		"About how many bytes a partition's local table takes on disk (LevelDB's estimate: deleted entities count until a compaction drops them); abacus_processor_entities counts its entities.",
		[]string{"partition"}, c.labels)
}

// Describe implements prometheus.Collector.
func (c *statsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.lagDesc()
	ch <- c.restoreDesc()
	ch <- c.bytesDesc()
}

// Collect implements prometheus.Collector.
func (c *statsCollector) Collect(ch chan<- prometheus.Metric) {
	bytes := c.bytesDesc()
	c.p.tables.Range(func(k, v any) bool {
		if n, err := v.(*localtable.Table).Bytes(); err == nil { // a closed table: a partition given up
			ch <- prometheus.MustNewConstMetric(bytes, prometheus.GaugeValue, float64(n), strconv.Itoa(int(k.(int32))))
		}
		return true
	})
	gp := c.p.gp.Load()
	if gp == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	lag, restore := c.lagDesc(), c.restoreDesc()
	for part, ps := range gp.StatsWithContext(ctx).Group {
		if ps == nil {
			continue
		}
		label := strconv.Itoa(int(part))
		for topic, in := range ps.Input {
			if in != nil {
				ch <- prometheus.MustNewConstMetric(lag, prometheus.GaugeValue, float64(max(in.OffsetLag, 0)), topic, label)
			}
		}
		if ts := ps.TableStats; ts != nil {
			remaining := int64(0)
			if ts.Status < goka.PartitionRunning && ts.Recovery != nil {
				remaining = max(ts.Recovery.Hwm-max(ts.Recovery.Offset, -1)-1, 0)
			}
			ch <- prometheus.MustNewConstMetric(restore, prometheus.GaugeValue, float64(remaining), label)
		}
	}
}
