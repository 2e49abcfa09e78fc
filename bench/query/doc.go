// Package querybench measures what a fleet's dashboards cost the query server: it loads a fleet's
// window aggregates (per entity by minute and by hour, per region and fleet-wide by minute) into
// the real HBase, written by the aggregates sink's own encoder, and asks them the panels Grafana
// and the dashboard page send, through the query server's HTTP handler, at 1 and at 16 concurrent
// dashboards. It holds benchmarks only; run.sh loads once and runs them (README, Performance,
// "Dashboards at fleet scale").
package querybench
