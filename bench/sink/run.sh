#!/usr/bin/env bash
# Runs the facts sink benchmark: abacus's facts sink and the hand-written Java loop (KafkaConsumer +
# BufferedMutator + flush + commitSync) on the same topic, broker and HBase, in one run, and prints
# cells/s for both and the Go/Java ratio.
#
#   bench/sink/run.sh                       1M events (the issue's workload)
#   ABACUS_BENCH_EVENTS=200000 bench/sink/run.sh
#   HBASE_REGIONSERVERS=3 bench/sink/run.sh             the same on the HBase cluster
#   HBASE_REGIONSERVERS=3 bench/sink/run.sh kill        a region server SIGKILLed under each sink:
#                                                       seconds to resume and to lag 0 (BenchmarkRegionServerKill)
#
# Needs Go, a JDK 17 and Maven 3; Kafka and HBase must be running (testenv/services.sh start).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$root"
eval "$(testenv/services.sh env)"

echo "[bench] building the Java loop" >&2
mvn -B -q -f "$here/java/pom.xml" package dependency:build-classpath \
  -Dmdep.outputFile=target/classpath.txt -DskipTests >/tmp/abacus-sink-bench-build.log 2>&1 \
  || { tail -n 30 /tmp/abacus-sink-bench-build.log >&2; exit 1; }

out=$(mktemp)
trap 'rm -f "$out"' EXIT
if [ "${1:-}" = kill ]; then
  echo "[bench] go test -bench RegionServerKill (abacus's facts sink, then the Java loop) on the HBase cluster" >&2
  ABACUS_REQUIRE_HBASE_CLUSTER=1 ABACUS_REQUIRE_SERVICES=1 go test -run '^$' -bench 'RegionServerKill' -benchtime 1x -timeout 60m ./bench/sink/ | tee "$out"
  echo
  awk '$1 ~ /^BenchmarkRegionServerKill\// { r = l = o = a = ""; for (i = 2; i < NF; i++) { if ($(i+1) == "s-to-resume") r = $i; if ($(i+1) == "s-to-lag0") l = $i
      if ($(i+1) == "s-to-reopen") o = $i; if ($(i+1) == "s-reopen-to-resume") a = $i }
    printf "%-40s regions reopened %6ss  resume %6ss (%ss after the reopen)  lag 0 %6ss\n", $1, o, r, a, l }' "$out"
  exit 0
fi
echo "[bench] go test -bench (facts sink, then the Java loop), ${ABACUS_BENCH_EVENTS:-1000000} events" >&2
ABACUS_REQUIRE_SERVICES=1 go test -run '^$' -bench 'FactsSink|JavaSinkLoop' -benchtime 1x -timeout 60m ./bench/sink/ | tee "$out"

rate() { awk -v b="$1" '$1 ~ b { for (i = 2; i < NF; i++) if ($(i+1) == "cells/s") print $i }' "$out" | head -n1; }
go_rate=$(rate '^BenchmarkFactsSink')
java_rate=$(rate '^BenchmarkJavaSinkLoop')
echo
printf '%-12s %14s\n' sink cells/s
printf '%-12s %14.0f\n' abacus "$go_rate" java-loop "$java_rate"
printf 'abacus/java  %14.2f\n' "$(awk -v a="$go_rate" -v b="$java_rate" 'BEGIN{print a/b}')"
