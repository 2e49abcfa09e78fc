// Package querybench measures what a fleet's dashboards cost the query server: it loads a fleet's
// window aggregates (per entity by minute and by hour, per region and fleet-wide by minute) into
// the real HBase, written by the aggregates sink's own encoder, and asks them the panels Grafana
// and the dashboard page send, through the query server's HTTP handler, at 1 and at 16 concurrent
// dashboards. BenchmarkOpenTSDB puts the same fleet's readings as raw points into OpenTSDB 2.4.1
// on the same HBase and asks it the same panels, for the side-by-side table. It holds benchmarks
// only; run.sh (and opentsdb/run.sh for both) loads once and runs them (docs/BENCHMARKS.md,
// "Dashboards at fleet scale").
package querybench
