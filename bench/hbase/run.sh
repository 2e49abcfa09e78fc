#!/usr/bin/env bash
# Runs the HBase client benchmark: the Go client (package hbase) and HBase's own Java client
# (BufferedMutator) on the same workload, in one run, against the HBase that testenv/services.sh runs,
# and prints cells/s for both and the Go/Java ratio.
#
#   bench/hbase/run.sh                 1M cells (the issue's workload)
#   ABACUS_BENCH_CELLS=100000 bench/hbase/run.sh
#
# Needs Go, a JDK 17 and Maven 3; HBase must be running (testenv/services.sh start).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$root"
export ABACUS_HBASE_ZK=${ABACUS_HBASE_ZK:-127.0.0.1:2181}

echo "[bench] building the Java benchmark" >&2
mvn -B -q -f "$here/java/pom.xml" package dependency:build-classpath \
  -Dmdep.outputFile=target/classpath.txt -DskipTests >/tmp/abacus-java-bench-build.log 2>&1 \
  || { tail -n 30 /tmp/abacus-java-bench-build.log >&2; exit 1; }

out=$(mktemp)
trap 'rm -f "$out"' EXIT
echo "[bench] go test -bench (Go client, then Java client), ${ABACUS_BENCH_CELLS:-1000000} cells" >&2
ABACUS_REQUIRE_SERVICES=1 go test -run '^$' -bench 'GoClient|JavaClient' -benchtime 1x -timeout 60m ./bench/hbase/ | tee "$out"

metric() { # metric BENCH-REGEX UNIT
  awk -v b="$1" -v u="$2" '$1 ~ b { for (i = 2; i < NF; i++) if ($(i+1) == u) print $i }' "$out" | head -n1
}
go_put=$(metric '^BenchmarkGoClient/put' 'cells/s')
go_scan=$(metric '^BenchmarkGoClient/scan' 'cells/s')
java_put=$(metric '^BenchmarkJavaClient' 'put-cells/s')
java_scan=$(metric '^BenchmarkJavaClient' 'scan-cells/s')
echo
printf '%-6s %14s %14s %8s\n' phase go_cells/s java_cells/s go/java
printf '%-6s %14.0f %14.0f %8.2f\n' put "$go_put" "$java_put" "$(awk -v a="$go_put" -v b="$java_put" 'BEGIN{print a/b}')"
printf '%-6s %14.0f %14.0f %8.2f\n' scan "$go_scan" "$java_scan" "$(awk -v a="$go_scan" -v b="$java_scan" 'BEGIN{print a/b}')"
