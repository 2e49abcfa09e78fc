package app

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/abacus-stream/abacus/hbase"
)

// hbaseCollector exports a process's HBase client counters, per region server, on /metrics. It
// reads them when scraped, so the client's hot path keeps its plain atomic counters.
type hbaseCollector struct {
	c *hbase.Client

	requests, errors, dialErrors, sent, resent, actionErrs, relocations, seconds *prometheus.Desc
	inFlight, waiting, lastError, lookups, relocationsAll                        *prometheus.Desc
}

func newHBaseCollector(c *hbase.Client) *hbaseCollector {
	server := []string{"server"}
	d := func(name, help string, labels []string) *prometheus.Desc {
		return prometheus.NewDesc("abacus_hbase_"+name, help, labels, nil)
	}
	return &hbaseCollector{c: c,
		requests:       d("requests_total", "RPCs begun to the region server, failed dials included.", server),
		errors:         d("request_errors_total", "RPCs to the region server that failed as a whole: refused or timed-out dials, dropped connections, no answer within the RPC timeout.", server),
		dialErrors:     d("dial_errors_total", "Failed attempts to connect to the region server.", server),
		sent:           d("actions_sent_total", "Multi actions (cells' mutations) sent to the region server, resends included.", server),
		resent:         d("actions_resent_total", "Of the actions sent to the region server, those sent again after an earlier round failed them.", server),
		actionErrs:     d("action_errors_total", "Actions the region server refused in an answered Multi (busy, overloaded, region moved, bad cell).", server),
		relocations:    d("region_relocations_total", "Regions the region server refused because they moved, split or closed.", server),
		seconds:        d("request_seconds_total", "Time spent in RPCs to the region server; over requests_total, the mean latency.", server),
		inFlight:       d("in_flight_requests", "RPCs sent to the region server and not answered yet.", server),
		waiting:        d("waiting_requests", "Multi requests waiting for one of the region server's in-flight slots.", server),
		lastError:      d("last_error_timestamp_seconds", "When the region server last failed a request or refused an action (0: never).", server),
		lookups:        d("region_lookups_total", "hbase:meta lookups of a region's location.", nil),
		relocationsAll: d("relocations_total", "Regions refused by any server with a relocate-class error.", nil),
	}
}

// Describe implements prometheus.Collector.
func (h *hbaseCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{h.requests, h.errors, h.dialErrors, h.sent, h.resent, h.actionErrs,
		h.relocations, h.seconds, h.inFlight, h.waiting, h.lastError, h.lookups, h.relocationsAll} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (h *hbaseCollector) Collect(ch chan<- prometheus.Metric) {
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for _, s := range h.c.ServerStats() {
		counter(h.requests, float64(s.Requests), s.Server)
		counter(h.errors, float64(s.Errors), s.Server)
		counter(h.dialErrors, float64(s.DialErrors), s.Server)
		counter(h.sent, float64(s.ActionsSent), s.Server)
		counter(h.resent, float64(s.ActionsResent), s.Server)
		counter(h.actionErrs, float64(s.ActionErrors), s.Server)
		counter(h.relocations, float64(s.Relocations), s.Server)
		counter(h.seconds, s.RequestTime.Seconds(), s.Server)
		gauge(h.inFlight, float64(s.InFlight), s.Server)
		gauge(h.waiting, float64(s.Waiting), s.Server)
		last := 0.0
		if !s.LastErrorAt.IsZero() {
			last = float64(s.LastErrorAt.UnixMilli()) / 1000
		}
		gauge(h.lastError, last, s.Server)
	}
	st := h.c.Stats()
	counter(h.lookups, float64(st.RegionLookups))
	counter(h.relocationsAll, float64(st.Relocations))
}

// hbaseLatency is the latency histogram of the HBase client's RPCs, per server and method, and
// the hook (hbase.Config.ObserveRPC) that fills it: a mean per server hides the slow tail that
// holds a sink's flush, and a scan's latency is not a Multi's.
func hbaseLatency() (*prometheus.HistogramVec, func(server, method string, took time.Duration)) {
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "abacus", Subsystem: "hbase", Name: "rpc_duration_seconds",
		Help:    "Latency of the HBase client's RPCs, answered or failed, by server and method (Multi, Scan, Get, ...).",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)}, []string{"server", "method"})
	return h, func(server, method string, took time.Duration) {
		h.WithLabelValues(server, method).Observe(took.Seconds())
	}
}
