package sinks

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are a sink's Prometheus metrics. A nil *Metrics records nothing.
type Metrics struct {
	records      prometheus.Counter
	batchCells   prometheus.Histogram
	batchBytes   prometheus.Histogram
	writeLatency prometheus.Histogram
	failed       *prometheus.CounterVec
	dead         *prometheus.CounterVec
	skipped      *prometheus.CounterVec
	held         prometheus.Gauge
	heldOld      prometheus.Gauge // the deprecated name of held
	commits      prometheus.Counter
	commitFails  prometheus.Counter
	commitLat    prometheus.Histogram
	lastCommit   prometheus.Gauge
	rebalances   *prometheus.CounterVec
	expired      prometheus.Counter
	lag          *prometheus.GaugeVec
	deleted      *prometheus.CounterVec
	epochs       prometheus.Counter
}

// NewMetrics registers a sink's metrics on reg, labelled with the sink's name.
func NewMetrics(reg prometheus.Registerer, sink string) *Metrics {
	l := prometheus.Labels{"sink": sink}
	m := &Metrics{
		records: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "abacus", Subsystem: "sink",
			Name: "records_total", Help: "Records consumed.", ConstLabels: l}),
		batchCells: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "abacus", Subsystem: "sink",
			Name: "batch_cells", Help: "Cells per write.", ConstLabels: l,
			Buckets: prometheus.ExponentialBuckets(1, 4, 10)}),
		batchBytes: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "abacus", Subsystem: "sink",
			Name: "batch_bytes", Help: "Bytes of cells per write.", ConstLabels: l,
			Buckets: prometheus.ExponentialBuckets(256, 4, 10)}),
		writeLatency: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "abacus", Subsystem: "sink",
			Name: "write_seconds", Help: "Time of one write to the store.", ConstLabels: l,
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)}),
		failed: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "abacus", Subsystem: "sink",
			Name: "failed_actions_total", Help: "Cells whose write failed, by cause.", ConstLabels: l}, []string{"cause"}),
		dead: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "abacus", Subsystem: "sink",
			Name: "dead_lettered_total", Help: "Records sent to the dead-letter topic, by reason.", ConstLabels: l}, []string{"reason"}),
		skipped: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "abacus", Subsystem: "sink",
			Name: "skipped_total", Help: "Records refused without a dead letter of the sink's own: the processor dead-letters them (by reason).", ConstLabels: l}, []string{"reason"}),
		held: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "abacus", Subsystem: "sink",
			Name: "held_partitions", Help: "Partitions of the full batch while the sink holds its poll because the store is behind.", ConstLabels: l}),
		// Until release 0.2 the gauge was named paused_partitions; dashboards that read it keep
		// working for one more release.
		heldOld: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "abacus", Subsystem: "sink",
			Name: "paused_partitions", Help: "Deprecated: use abacus_sink_held_partitions (removed in the next release).", ConstLabels: l}),
		commits: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "abacus", Subsystem: "sink",
			Name: "committed_records_total", Help: "Records covered by committed offsets.", ConstLabels: l}),
		commitFails: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "abacus", Subsystem: "sink",
			Name: "commit_failures_total", Help: "Offset commits that failed.", ConstLabels: l}),
		commitLat: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "abacus", Subsystem: "sink",
			Name: "commit_seconds", Help: "Time of one offset commit.", ConstLabels: l,
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)}),
		lastCommit: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "abacus", Subsystem: "sink",
			Name: "last_commit_timestamp_seconds", Help: "When offsets were last committed; commit lag is now minus this.", ConstLabels: l}),
		rebalances: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "abacus", Subsystem: "sink",
			Name: "partition_changes_total", Help: "Partitions assigned, revoked or lost in rebalances.", ConstLabels: l}, []string{"kind"}),
		expired: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "abacus", Subsystem: "sink",
			Name: "expired_on_arrival_total", Help: "Cells written with a timestamp older than the table's TTL: HBase expires them at once.", ConstLabels: l}),
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "abacus", Subsystem: "sink",
			Name: "lag_records", Help: "Records of an owned partition after the committed offset, as of the partition's last fetch.", ConstLabels: l},
			[]string{"topic", "partition"}),
		deleted: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "abacus", Subsystem: "sink",
			Name: "records_deleted_unread_total", ConstLabels: l,
			Help: "Records the broker deleted (retention, DeleteRecords) after the group's committed offset and before the sink read them: lost to this sink."},
			[]string{"topic"}),
		epochs: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "abacus", Subsystem: "sink",
			Name: "epochs_moved_total", ConstLabels: l,
			Help: "Epoch cells written after a batch wrote a set's settled windows (a replay, a sink that fell behind): each clears what query caches keep of the set."}),
	}
	reg.MustRegister(m.epochs, m.deleted, m.lag, m.expired, m.rebalances, m.records, m.batchCells, m.batchBytes, m.writeLatency, m.failed, m.dead, m.skipped, m.held, m.heldOld,
		m.commits, m.commitFails, m.commitLat, m.lastCommit)
	return m
}

func (m *Metrics) recordsIn(n int) {
	if m != nil {
		m.records.Add(float64(n))
	}
}

func (m *Metrics) wrote(cells, bytes int, d time.Duration) {
	if m != nil {
		m.batchCells.Observe(float64(cells))
		m.batchBytes.Observe(float64(bytes))
		m.writeLatency.Observe(d.Seconds())
	}
}

func (m *Metrics) failedActions(cause string, n int) {
	if m != nil {
		m.failed.WithLabelValues(cause).Add(float64(n))
	}
}

func (m *Metrics) deadLettered(reason string) {
	if m != nil {
		m.dead.WithLabelValues(reason).Inc()
	}
}

func (m *Metrics) skippedRecord(reason string) {
	if m != nil {
		m.skipped.WithLabelValues(reason).Inc()
	}
}

func (m *Metrics) setHeld(n int) {
	if m != nil {
		m.held.Set(float64(n))
		m.heldOld.Set(float64(n))
	}
}

func (m *Metrics) commitFailed() {
	if m != nil {
		m.commitFails.Inc()
	}
}

func (m *Metrics) committed(records int, d time.Duration) {
	if m != nil {
		m.commits.Add(float64(records))
		m.commitLat.Observe(d.Seconds())
		m.lastCommit.SetToCurrentTime()
	}
}

func (m *Metrics) partitionsChanged(kind string, parts map[string][]int32) {
	if m != nil {
		m.rebalances.WithLabelValues(kind).Add(float64(countParts(parts)))
	}
}

func (m *Metrics) expiredOnArrival() {
	if m != nil {
		m.expired.Inc()
	}
}

func (m *Metrics) setLag(topic string, partition int32, lag int64) {
	if m != nil {
		m.lag.WithLabelValues(topic, strconv.Itoa(int(partition))).Set(float64(max(lag, 0)))
	}
}

func (m *Metrics) dropLag(topic string, partition int32) {
	if m != nil {
		m.lag.DeleteLabelValues(topic, strconv.Itoa(int(partition)))
	}
}

func (m *Metrics) deletedUnread(topic string, n int64) {
	if m != nil {
		m.deleted.WithLabelValues(topic).Add(float64(n))
	}
}

func (m *Metrics) epochsMoved(n int) {
	if m != nil {
		m.epochs.Add(float64(n))
	}
}
