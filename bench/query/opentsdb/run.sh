#!/usr/bin/env bash
# OpenTSDB beside abacus on the same HBase (testenv/services.sh must run it): resolves OpenTSDB
# 2.4.1 and asynchbase 1.8.2 from Maven Central (pom.xml here), loads the dataset into abacus's
# table (bench/query's BenchmarkLoad) and, as raw readings, into OpenTSDB's tables
# (BenchmarkOpenTSDB starts a TSD on 127.0.0.1:24242 and stops it after), asks both the same
# panels from 1 and 16 dashboards, and prints both tables and each store's bytes on disk.
#
#   ABACUS_BENCH_ENTITIES=100 ABACUS_BENCH_ROUNDS=3 bench/query/opentsdb/run.sh   what docs/BENCHMARKS.md used
#
# Start HBase with HBASE_HEAP=3g (testenv/services.sh), 8g for 1,000 entities: at the default 1g
# (3g for 1,000 entities) its region server ran out of heap under the TSD's load and aborted.
#
# The sizes are bench/query/run.sh's; ABACUS_BENCH_PANELS too, except that it defaults to the
# panels both sides answer. OpenTSDB is given every reading
# (about 6.5 per entity-minute): 1,000 entities x 7 days would be 65M points, loaded through its
# HTTP API at the rate the load prints.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../../.." && pwd)
cd "$root"
cp_file=$(mktemp)
trap 'rm -f "$cp_file"' EXIT
mvn -q -B -f "$here/pom.xml" dependency:build-classpath -Dmdep.outputFile="$cp_file" >&2
export ABACUS_OPENTSDB_CLASSPATH=$(cat "$cp_file")
export ABACUS_HBASE_ZK=${ABACUS_HBASE_ZK:-127.0.0.1:2181}
export ABACUS_REQUIRE_SERVICES=1
# Both sides ask the same panels (OpenTSDB's, "tsdb ..."), so that their 16 dashboards load the
# machine alike: abacus's own page panels (the heaviest of its run) would weigh on its side alone.
export ABACUS_BENCH_PANELS=${ABACUS_BENCH_PANELS:-^tsdb }
# abacus's latencies, for the OpenTSDB run to print the ratios beside its own.
results=$(mktemp)
trap 'rm -f "$cp_file" "$results"' EXIT
export ABACUS_BENCH_RESULTS=$results
"$here/../run.sh" "$@"
echo "[bench] OpenTSDB: ${ABACUS_BENCH_ROUNDS:-100} rounds per dashboard" >&2
go test -run '^$' -bench 'OpenTSDB' -benchtime 1x -timeout 4h -v ./bench/query/ "$@"
# Bytes on disk of each store's tables (flushed by BenchmarkOpenTSDB), from the standalone
# HBase's root directory: testenv keeps it under testenv/.data/hbase/root.
data="$root/testenv/.data/hbase/root/data/default"
if [ -d "$data" ]; then
  e=${ABACUS_BENCH_ENTITIES:-5000} d=${ABACUS_BENCH_DAYS:-7}
  for t in "bench_query_v2_e${e}_d${d}" "bench_otsdb_e${e}_d${d}" "bench_otsdb_e${e}_d${d}_uid" "bench_otsdb_e${e}_d${d}_meta"; do
    printf '%-32s %12s bytes on disk\n' "$t" "$(du -sb "$data/$t" | cut -f1)"
  done
fi
