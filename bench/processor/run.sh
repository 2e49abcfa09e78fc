#!/usr/bin/env bash
# Runs the processor benchmark: abacus beside franz-go consume-only, a naive goka processor and
# Kafka Streams (at_least_once, exactly_once_v2) on the same topics, one system after another, and
# prints one table per workload (sparse, dense) with abacus's ratio to each, then abacus's state
# size and restore times. Every run checks the finals it reads back, window by window, and fails
# loudly when they differ. See bench/processor/doc.go for what is measured.
#
#   bench/processor/run.sh                                  everything, 1M events per workload
#   bench/processor/run.sh -events 100000 -restore=false    smaller, no state/restore part
#   bench/processor/run.sh -systems abacus -workloads sparse -restore-systems abacus \
#       -cpuprofile /tmp/prof -json after.json              only abacus, with a CPU profile
#   bench/processor/run.sh -systems abacus -restore=false \
#       -workloads sparse,sparse-late10,sparse-late50       abacus with 0, 10 and 50% late events
#   bench/processor/run.sh -h                               every flag
#
# Input topics are kept (procbench-<workload>-<size>-v2) and reused by later runs of the same
# size, so before/after comparisons read the same records; -reuse-input=false produces them again.
#
# Needs Go and a running Kafka: ABACUS_KAFKA_BROKERS, else testenv/services.sh's (KAFKA_PORT).
# The Kafka Streams systems also need a JDK 17 and Maven 3 (the app is built here when stale).
# The machine should be otherwise idle: timings on a shared machine are noisy (use -runs 3).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$root"

if [ -z "${ABACUS_KAFKA_BROKERS:-}" ]; then
  eval "$(SERVICES=kafka testenv/services.sh env)"
fi

# argval NAME ARGS...: the value of -NAME / --NAME (next argument or =value), empty if absent.
argval() {
  local name=$1 a next=0
  shift
  for a in "$@"; do
    if [ "$next" = 1 ]; then printf '%s' "$a"; return; fi
    case $a in
      -"$name"=* | --"$name"=*) printf '%s' "${a#*=}"; return ;;
      -"$name" | --"$name") next=1 ;;
    esac
  done
}

# Build the Kafka Streams application when its jar is missing or older than its sources.
jar=$here/java/target/processor-kstreams-bench-1.jar
if [ ! -f "$jar" ] || [ ! -f "$here/java/target/classpath.txt" ] \
    || [ -n "$(find "$here/java/pom.xml" "$here/java/src" -newer "$jar" -print -quit)" ]; then
  if command -v mvn >/dev/null && command -v java >/dev/null; then
    echo "[bench] building the Kafka Streams application (Maven)" >&2
    buildlog=$(mktemp)
    mvn -B -q -f "$here/java/pom.xml" package dependency:build-classpath \
      -Dmdep.outputFile=target/classpath.txt -DskipTests >"$buildlog" 2>&1 \
      || { tail -n 30 "$buildlog" >&2; rm -f "$buildlog"; exit 1; }
    rm -f "$buildlog"
  else
    echo "[bench] no JDK/Maven: the Kafka Streams systems will fail (select others with -systems)" >&2
  fi
fi

bin=$(mktemp -d)/procbench
trap 'rm -rf "$(dirname "$bin")"' EXIT
go build -o "$bin" ./bench/processor

status=0
"$bin" -brokers "$ABACUS_KAFKA_BROKERS" -java-dir "$here/java" "$@" || status=$?

# The CPU profiles of the abacus steps, if asked for: where abacus spends its time.
prof=$(argval cpuprofile "$@")
if [ -n "$prof" ] && [ -d "$prof" ]; then
  for f in "$prof"/abacus-*.pprof; do
    [ -s "$f" ] || continue
    echo
    echo "== CPU profile $f: where the time goes (flat), then through which calls (cumulative)"
    go tool pprof -top -nodecount=25 "$bin" "$f" 2>/dev/null | sed -n '5,32p'
    go tool pprof -top -cum -nodecount=40 "$bin" "$f" 2>/dev/null | sed -n '7,48p'
  done
fi
exit "$status"
