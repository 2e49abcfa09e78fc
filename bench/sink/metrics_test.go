package sinkbench

import (
	"github.com/abacus-stream/abacus/sinks"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

type benchMetrics struct {
	reg *prometheus.Registry
	m   *sinks.Metrics
}

func sinksMetrics() benchMetrics {
	reg := prometheus.NewRegistry()
	return benchMetrics{reg, sinks.NewMetrics(reg, "bench")}
}

// committed reads abacus_sink_committed_records_total: records covered by committed offsets.
func (b benchMetrics) committed() float64 {
	mfs, err := b.reg.Gather()
	if err != nil {
		return 0
	}
	for _, mf := range mfs {
		if mf.GetName() == "abacus_sink_committed_records_total" {
			var total float64
			for _, m := range mf.GetMetric() {
				total += metricValue(m)
			}
			return total
		}
	}
	return 0
}

func metricValue(m *dto.Metric) float64 { return m.GetCounter().GetValue() }
