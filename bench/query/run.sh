#!/usr/bin/env bash
# Runs the dashboard benchmark against the HBase that testenv/services.sh runs: loads the dataset
# once (BenchmarkLoad; a complete load of the same size is reused), then asks every panel from 1
# and from 16 concurrent dashboards (BenchmarkPanels) and prints p50/p99 per panel.
#
#   bench/query/run.sh                                            5,000 entities x 7 days (the issue's fleet)
#   ABACUS_BENCH_ENTITIES=1000 ABACUS_BENCH_ROUNDS=3 bench/query/run.sh    1,000 entities, 3 rounds
#
# Ask at least 3 rounds: the first round's picks are the ones asked before the clock (warm), and
# the p50 of two samples is the lower one, so with 2 rounds a p50 is a cached read.
#
#   bench/query/run.sh cold                                       cold reads: every panel once after each of
#                                                                 ABACUS_BENCH_COLD_RESTARTS (3) restarts of
#                                                                 HBase's region servers (BenchmarkPanelsCold:
#                                                                 it restarts the testenv HBase, so run it alone)
#
# ABACUS_BENCH_MAX_SCANS sets the reader's query.max_scans (default 16); ABACUS_BENCH_CACHE=off
# reads every window from HBase (query.no_cache; the cold benchmark always does), and
# ABACUS_BENCH_CACHE_BYTES sizes the cache (query.cache_bytes); ABACUS_BENCH_COARSER=off reads
# every panel from the set it names, never a coarser one (query.no_coarser); ABACUS_BENCH_PICKS=refresh has
# each dashboard ask the same entities at every round (by default each round asks others).
# ABACUS_BENCH_DAYS sets the days of history (default 7); ABACUS_BENCH_ROUNDS the rounds of every
# panel per dashboard (default 100); ABACUS_BENCH_PANELS a regular expression of the panels to ask
# (all by default), e.g. to profile one with -cpuprofile; ABACUS_BENCH_KEY_INDEX=off hides the key
# index, so that listings walk the aggregates table as they do before `abacus admin reindex`;
# ABACUS_BENCH_RESULTS names a file to keep the latencies in (JSON, per panel), which
# opentsdb/run.sh uses to print both stores' ratios.
# Needs Go; HBase must be running (testenv/services.sh start; with HBASE_REGIONSERVERS=3 and its
# env evaluated, the cluster).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$root"
export ABACUS_HBASE_ZK=${ABACUS_HBASE_ZK:-127.0.0.1:2181}
export ABACUS_REQUIRE_SERVICES=1
echo "[bench] load: ${ABACUS_BENCH_ENTITIES:-5000} entities x ${ABACUS_BENCH_DAYS:-7} days" >&2
go test -run '^$' -bench 'Load' -benchtime 1x -timeout 4h -v ./bench/query/
if [ "${1:-}" = cold ]; then
  shift
  echo "[bench] cold panels: ${ABACUS_BENCH_COLD_RESTARTS:-3} restarts of the region servers" >&2
  go test -run '^$' -bench 'PanelsCold' -benchtime 1x -timeout 4h -v ./bench/query/ "$@"
  exit 0
fi
echo "[bench] panels: ${ABACUS_BENCH_ROUNDS:-100} rounds per dashboard" >&2
go test -run '^$' -bench 'Panels$' -benchtime 1x -timeout 4h -v ./bench/query/ "$@"
