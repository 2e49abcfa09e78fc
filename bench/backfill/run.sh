#!/usr/bin/env bash
# Runs the backfill benchmark against the HBase that testenv/services.sh runs: it loads a fleet's
# facts once (kept for later runs), then scans them raw and backfills the example's sets from
# them, in one run, and prints both rates and their ratio.
#
#   bench/backfill/run.sh                                  1,000 devices, a reading a minute, 24 h
#   ABACUS_BENCH_DEVICES=100 ABACUS_BENCH_HOURS=2 bench/backfill/run.sh    a quick look
#
# HBase must be running (testenv/services.sh start; HBASE_HEAP=3g for the larger fleets).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
export ABACUS_HBASE_ZK=${ABACUS_HBASE_ZK:-127.0.0.1:2181}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
ABACUS_REQUIRE_SERVICES=1 go test -run '^$' -bench 'Backfill' -benchtime 1x -timeout 120m ./bench/backfill/ | tee "$out"
metric() { # metric BENCH-REGEX UNIT
  awk -v b="$1" -v u="$2" '$1 ~ b { for (i = 2; i < NF; i++) if ($(i+1) == u) print $i }' "$out" | head -n1
}
scan=$(metric '^BenchmarkBackfill/scan' 'facts/s')
bf=$(metric '^BenchmarkBackfill/backfill(-[0-9]+)?$' 'facts/s')
ent=$(metric '^BenchmarkBackfill/backfill-entity-sets' 'facts/s')
echo
printf '%-22s %14s %10s\n' phase facts/s 'of scan'
printf '%-22s %14.0f\n' raw-scan "$scan"
printf '%-22s %14.0f %10.3f\n' backfill-five-sets "$bf" "$(awk -v a="$bf" -v b="$scan" 'BEGIN{print a/b}')"
printf '%-22s %14.0f %10.3f\n' backfill-entity-sets "$ent" "$(awk -v a="$ent" -v b="$scan" 'BEGIN{print a/b}')"
# Backfill writes several cells per fact; the write of such cells alone bounds it.
rw=$(metric '^BenchmarkBackfill/rewrite' 'cells/s')
bfc=$(metric '^BenchmarkBackfill/backfill(-[0-9]+)?$' 'cells/s')
entc=$(metric '^BenchmarkBackfill/backfill-entity-sets' 'cells/s')
echo
printf '%-22s %14s %10s\n' phase cells/s 'of write'
printf '%-22s %14.0f\n' write-alone "$rw"
printf '%-22s %14.0f %10.3f\n' backfill-five-sets "$bfc" "$(awk -v a="$bfc" -v b="$rw" 'BEGIN{print a/b}')"
printf '%-22s %14.0f %10.3f\n' backfill-entity-sets "$entc" "$(awk -v a="$entc" -v b="$rw" 'BEGIN{print a/b}')"
