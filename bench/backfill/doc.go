// Package backfillbench measures `abacus backfill` against the HBase client's raw scan rate on the
// same facts table: it loads a fleet's readings into a facts table of the real HBase (written by
// the facts sink's own encoder), scans it raw (every cell counted, nothing kept), then backfills
// the example's per-device sets and rollups from it into an aggregates table. Both read the same
// table in one run, so the ratio (backfill's facts per second over the raw scan's) is what the
// engine, the ordering and the writes cost. It then runs the three entity sets alone (their
// partitions side by side), and writes a million of the cells backfill wrote again with no engine:
// backfill's cells per second over that rate is what the engine costs beside HBase. run.sh runs it.
package backfillbench
