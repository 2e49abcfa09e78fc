package tables

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the tables' Prometheus instruments, labelled by table. Make them once per
// registry (NewMetrics) and hand them to every Open of that processor: a processor opens its
// tables again after a broker outage, and a registry refuses a second registration.
type Metrics struct {
	versions   *prometheus.GaugeVec
	lag        *prometheus.GaugeVec
	updates    *prometheus.CounterVec
	late       *prometheus.CounterVec
	undecoded  *prometheus.CounterVec
	unsaved    *prometheus.CounterVec
	pruned     *prometheus.CounterVec
	waits      *prometheus.CounterVec
	waitsSpent *prometheus.CounterVec
	expired    *prometheus.CounterVec
	missing    *prometheus.CounterVec
}

// NewMetrics registers the tables' metrics of a topology on reg.
func NewMetrics(reg prometheus.Registerer, topology string) (*Metrics, error) {
	cl := prometheus.Labels{"topology": topology}
	counter := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "abacus", Subsystem: "table", Name: name, Help: help, ConstLabels: cl},
			[]string{"table"})
	}
	m := &Metrics{
		versions: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "abacus", Subsystem: "table", Name: "versions", ConstLabels: cl,
			Help: "Versions held of the table's keys (every key's current one and the superseded ones within History)."}, []string{"table"}),
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "abacus", Subsystem: "table", Name: "lag_records", ConstLabels: cl,
			Help: "Records of the table's topic not read yet, as of the latest fetch or listing of its end offsets."}, []string{"table"}),
		updates:    counter("updates_total", "Records read from the table's topic and applied."),
		late:       counter("updates_late_total", "Versions read after an event at or past their time had looked the table up: that event saw the version before (a replay may see this one)."),
		undecoded:  counter("updates_undecodable_total", "Records of the table's topic its codec refused (or whose value time panicked): the key's version before stays in force."),
		unsaved:    counter("versions_unsaved_total", "Versions the versions topic refused for good (too large): kept in memory, lost to a restart if the table's topic is compacted meanwhile."),
		pruned:     counter("versions_pruned_total", "Superseded versions dropped once older than History."),
		waits:      counter("waits_total", "Events that waited for the table to catch up with their event time."),
		waitsSpent: counter("wait_seconds_total", "Time events spent waiting for the table."),
		expired:    counter("waits_expired_total", "Events that waited the table's whole Grace and looked it up as it was."),
		missing:    counter("lookups_missing_total", "Lookups that found no value for their key at their event time."),
	}
	for _, c := range []prometheus.Collector{m.versions, m.lag, m.updates, m.late, m.undecoded, m.unsaved, m.pruned, m.waits, m.waitsSpent, m.expired, m.missing} {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				continue
			}
			return nil, err
		}
	}
	return m, nil
}

// tableMetrics are one table's instruments (discarded when there are no Metrics).
type tableMetrics struct {
	versions, lag                                                                  prometheus.Gauge
	updates, late, undecoded, unsaved, pruned, waits, waitsSpent, expired, missing prometheus.Counter
}

func (m *Metrics) of(table string) tableMetrics {
	if m == nil {
		c := func() prometheus.Counter { return prometheus.NewCounter(prometheus.CounterOpts{Name: "unused"}) }
		g := func() prometheus.Gauge { return prometheus.NewGauge(prometheus.GaugeOpts{Name: "unused"}) }
		return tableMetrics{g(), g(), c(), c(), c(), c(), c(), c(), c(), c(), c()}
	}
	return tableMetrics{m.versions.WithLabelValues(table), m.lag.WithLabelValues(table), m.updates.WithLabelValues(table), m.late.WithLabelValues(table),
		m.undecoded.WithLabelValues(table), m.unsaved.WithLabelValues(table), m.pruned.WithLabelValues(table),
		m.waits.WithLabelValues(table), m.waitsSpent.WithLabelValues(table), m.expired.WithLabelValues(table), m.missing.WithLabelValues(table)}
}
