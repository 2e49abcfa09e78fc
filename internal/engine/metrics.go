package engine

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the processor's Prometheus instruments. They are registered on the registry the
// caller passes in (Config.Registerer), never on the global default, so two processors in one
// process (tests, the demo) do not collide.
type metrics struct {
	eventsIn      *prometheus.CounterVec // source, partition
	duplicates    *prometheus.CounterVec // partition
	lateDropped   *prometheus.CounterVec // set
	lateRouted    *prometheus.CounterVec // set
	deadLettered  *prometheus.CounterVec // reason
	asideWritten  *prometheus.CounterVec // topic
	windowsOpen   *prometheus.GaugeVec   // partition
	windowsHeld   *prometheus.GaugeVec   // partition
	emitted       *prometheus.CounterVec // set, final
	streamTimeLag *prometheus.GaugeVec   // partition
	entities      *prometheus.GaugeVec   // partition
	scheduled     *prometheus.GaugeVec   // partition
	panics        *prometheus.CounterVec // stage
	unknownLayout prometheus.Counter
	ticks         *prometheus.CounterVec // partition
	waiting       *prometheus.GaugeVec   // partition
	// rollupPartials counts partial totals sent to rollup owners, rollupIgnored those an owner
	// received again after its window's total was final.
	rollupPartials *prometheus.CounterVec // set, final
	rollupIgnored  *prometheus.CounterVec // set
	// rollupUnknown counts partial totals of a set this topology does not have as a rollup,
	// sent by another version of it; loopUnknown loop messages of a source it no longer has.
	rollupUnknown *prometheus.CounterVec // set
	loopUnknown   *prometheus.CounterVec // what
	// beforeLive counts windows that closed without a total: they started before their set ran.
	beforeLive *prometheus.CounterVec // set
}

func newMetrics(reg prometheus.Registerer, topology string) (*metrics, error) {
	cl := prometheus.Labels{"topology": topology}
	m := &metrics{
		eventsIn: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "abacus", Subsystem: "processor", Name: "events_in_total", ConstLabels: cl,
			Help: "Source records received, per source topic and partition (before dedup).",
		}, []string{"source", "partition"}),
		duplicates: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "abacus", Subsystem: "processor", Name: "duplicates_skipped_total", ConstLabels: cl,
			Help: "Replayed records skipped because the entity had already applied them.",
		}, []string{"partition"}),
		lateDropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "abacus", Subsystem: "processor", Name: "late_dropped_total", ConstLabels: cl,
			Help: "Events that arrived after all their windows of a set had closed, dropped.",
		}, []string{"set"}),
		lateRouted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "abacus", Subsystem: "processor", Name: "late_routed_total", ConstLabels: cl,
			Help: "Late events routed to the late topic.",
		}, []string{"set"}),
		deadLettered: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "abacus", Subsystem: "processor", Name: "dead_lettered_total", ConstLabels: cl,
			Help: "Records sent to the dead-letter topic, by reason.",
		}, []string{"reason"}),
		asideWritten: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "abacus", Subsystem: "processor", Name: "set_aside_already_written_total", ConstLabels: cl,
			Help: "Dead letters and late records not written again after a restart: a run before this one wrote them for the record processed again.",
		}, []string{"topic"}),
		windowsOpen: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "abacus", Subsystem: "processor", Name: "windows_open", ConstLabels: cl,
			Help: "Windows whose final total has not been emitted yet, per partition.",
		}, []string{"partition"}),
		windowsHeld: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "abacus", Subsystem: "processor", Name: "windows_held", ConstLabels: cl,
			Help: "Windows in the partition's table: open ones plus closed ones kept for FinalRetention.",
		}, []string{"partition"}),
		emitted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "abacus", Subsystem: "processor", Name: "windows_emitted_total", ConstLabels: cl,
			Help: "Window totals written to the totals topic.",
		}, []string{"set", "final"}),
		streamTimeLag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "abacus", Subsystem: "processor", Name: "stream_time_lag_seconds", ConstLabels: cl,
			Help: "Wall clock minus the partition's stream time, at the last event or tick.",
		}, []string{"partition"}),
	}
	m.entities = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "abacus", Subsystem: "processor", Name: "entities", ConstLabels: cl,
		Help: "Entities in the partition's table: those with open windows, or closed ones not yet acknowledged.",
	}, []string{"partition"})
	m.scheduled = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "abacus", Subsystem: "processor", Name: "close_schedule_entries", ConstLabels: cl,
		Help: "Entries of the partition's close schedule: one per entity with a window whose final is not emitted.",
	}, []string{"partition"})
	m.panics = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "abacus", Subsystem: "processor", Name: "user_code_panics_total", ConstLabels: cl,
		Help: "Panics of user code (codecs, extractors, aggregations): on a record (dead-lettered) or at a window's close.",
	}, []string{"stage"})
	m.unknownLayout = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "abacus", Subsystem: "processor", Name: "unknown_layout_reads_total", ConstLabels: cl,
		Help: "Entities read that were written under a topology layout the partition's record does not hold (read by position).",
	})
	m.ticks = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "abacus", Subsystem: "processor", Name: "ticks_total", ConstLabels: cl,
		Help: "Ticks a partition handled (idle advances, retention, the partition's record).",
	}, []string{"partition"})
	m.waiting = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "abacus", Subsystem: "processor", Name: "waiting_for_acks", ConstLabels: cl,
		Help: "Closes and idle advances of the partition waiting for Kafka to acknowledge the state they follow.",
	}, []string{"partition"})
	m.rollupPartials = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "abacus", Subsystem: "processor", Name: "rollup_partials_sent_total", ConstLabels: cl,
		Help: "Partial totals of rollup windows a partition sent to the keys' owners (final or early).",
	}, []string{"set", "final"})
	m.rollupIgnored = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "abacus", Subsystem: "processor", Name: "rollup_partials_repeated_total", ConstLabels: cl,
		Help: "Partial totals an owner received again after it had their final (replays, restarts), ignored.",
	}, []string{"set"})
	m.rollupUnknown = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "abacus", Subsystem: "processor", Name: "rollup_partials_unknown_total", ConstLabels: cl,
		Help: "Partial totals of a set this version of the topology does not have as a rollup (sent by another version, or before the set was removed), ignored.",
	}, []string{"set"})
	m.loopUnknown = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "abacus", Subsystem: "processor", Name: "loop_messages_unknown_total", ConstLabels: cl,
		Help: "Messages of the loop topic for something this version of the topology does not have (a re-keyed event of a source removed), ignored.",
	}, []string{"what"})
	m.beforeLive = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "abacus", Subsystem: "processor", Name: "windows_before_set_total", ConstLabels: cl,
		Help: "Windows that closed without a final total because they started before their set was added to the running topology (abacus backfill computes them from the facts).",
	}, []string{"set"})
	for _, c := range []prometheus.Collector{m.beforeLive, m.rollupUnknown, m.loopUnknown, m.rollupPartials, m.rollupIgnored, m.eventsIn, m.duplicates, m.lateDropped, m.lateRouted,
		m.deadLettered, m.asideWritten, m.windowsOpen, m.windowsHeld, m.emitted, m.streamTimeLag, m.entities, m.scheduled, m.panics, m.unknownLayout,
		m.ticks, m.waiting} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
