#!/usr/bin/env bash
# Runs the facts sink benchmark: abacus's facts sink, the hand-written Java loop (KafkaConsumer +
# BufferedMutator + flush + commitSync) and the native client's Apply of the very cells the sink
# writes, on the same topic, broker and HBase, interleaved over several rounds (each run on a fresh
# table once the servers are idle again), and prints each one's median cells/s, the HBase servers'
# CPU seconds per million cells, and the ratios.
#
#   bench/sink/run.sh                       1M events (the issue's workload), 3 rounds
#   ABACUS_BENCH_EVENTS=200000 ABACUS_BENCH_ROUNDS=5 bench/sink/run.sh
#   HBASE_REGIONSERVERS=3 bench/sink/run.sh             the same on the HBase cluster
#   bench/sink/run.sh discard               the facts sink alone, into a store that discards
#                                           every cell (its own ceiling; BenchmarkFactsSinkDiscard)
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
if [ "${1:-}" = discard ]; then
  ABACUS_REQUIRE_SERVICES=1 go test -run '^$' -bench 'FactsSinkDiscard' -benchtime 1x -count "${ABACUS_BENCH_ROUNDS:-3}" -timeout 30m ./bench/sink/
  exit 0
fi
rounds=${ABACUS_BENCH_ROUNDS:-3}
echo "[bench] go test -bench SideBySide: the facts sink, the Java loop and the native client's Apply of the same cells, ${ABACUS_BENCH_EVENTS:-1000000} events, $rounds rounds interleaved" >&2
ABACUS_BENCH_ROUNDS=$rounds ABACUS_REQUIRE_SERVICES=1 go test -run '^$' -bench 'SideBySide' -benchtime 1x -timeout 120m ./bench/sink/ | tee "$out"

metric() { awk -v u="$1" '$1 ~ /^BenchmarkSideBySide/ { for (i = 2; i < NF; i++) if ($(i+1) == u) print $i }' "$out" | head -n1; }
echo
echo "medians of $rounds rounds (each run on a fresh table and idle servers):"
printf '%-28s %14s %16s\n' system cells/s "HBase CPU-s/M"
printf '%-28s %14.0f %16.2f\n' "abacus facts sink" "$(metric abacus-cells/s)" "$(metric abacus-hbase-cpu-s/M)"
printf '%-28s %14.0f\n' "  steady (first commit on)" "$(metric abacus-steady-cells/s)"
printf '%-28s %14.0f %16.2f\n' "java loop" "$(metric java-cells/s)" "$(metric java-hbase-cpu-s/M)"
printf '%-28s %14.0f %16.2f\n' "native Apply, same cells" "$(metric native-cells/s)" "$(metric native-hbase-cpu-s/M)"
printf 'abacus/java %.2f   abacus/native %.2f   abacus steady/native %.2f\n' "$(metric abacus/java)" "$(metric abacus/native)" "$(metric abacus-steady/native)"
