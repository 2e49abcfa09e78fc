package sinkbench

import (
	"fmt"

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

// histograms sums up the sink's histograms (count and mean of each), to say where a run's time
// went: writes, commits and batch sizes.
func (b benchMetrics) histograms() string {
	mfs, err := b.reg.Gather()
	if err != nil {
		return err.Error()
	}
	out := ""
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if h := m.GetHistogram(); h != nil && h.GetSampleCount() > 0 {
				out += fmt.Sprintf("%s: %d, mean %.4g; ", mf.GetName(), h.GetSampleCount(), h.GetSampleSum()/float64(h.GetSampleCount()))
			}
		}
	}
	return out
}
