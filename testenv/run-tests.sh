#!/usr/bin/env bash
# The project's test command (README): fetch and start a real Kafka broker and a real HBase on
# loopback, run every Go test against them, stop the services; before that, the TestCluster* tests
# against a real three-broker Kafka cluster, the failure suite's short form (bench/chaos) on
# services of its own, and the TestHBaseCluster* tests and the failure suite's short form on a real
# three-region-server HBase cluster (bench/chaos -hbase-cluster, on a cluster of its own).
# Extra arguments go to `go test`.
# A service that does not come up fails the run; so does a test that finds a service missing.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mkdir -p "$root/testenv/.data" # the chaos stages keep their logs here
cd "$root"
services=testenv/services.sh

# The dashboard's browser test (query.TestDashboardInChromium) drives Debian's headless Chromium,
# and fails under this script when it is missing; CI starts from a fresh machine, so install it.
if [ ! -x /usr/bin/chromium ]; then
  if [ "$(id -u)" = 0 ]; then
    echo "[run-tests] /usr/bin/chromium missing: apt-get update -qq && apt-get install -y -qq chromium"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium
  elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
    echo "[run-tests] /usr/bin/chromium missing: sudo apt-get update -qq && sudo apt-get install -y -qq chromium"
    sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium
  else
    echo "[run-tests] /usr/bin/chromium missing and neither root nor sudo: the dashboard's browser test will fail (install Debian's chromium package)"
  fi
fi

# docker-compose.yml is checked with Debian's docker-compose (its `config` needs no engine), and
# the OpenTSDB client test (query.TestPyOpenTSDBClient) needs pyopentsdb: install both when missing.
if ! command -v docker-compose >/dev/null; then
  if [ "$(id -u)" = 0 ]; then
    echo "[run-tests] docker-compose missing: apt-get install -y -qq docker-compose"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker-compose
  elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
    sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker-compose
  fi
fi
# Nothing built goes into git: a tracked executable (ELF, Mach-O or PE by its first bytes) or a
# tracked file over 1 MiB outside a testdata/ folder fails the run, naming it.
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  echo "[run-tests] tracked files: no executables, nothing over 1 MiB outside testdata/"
  built=0
  while IFS= read -r -d '' f; do
    [ -f "$f" ] || continue
    magic=$(head -c 4 "$f" | od -An -tx1 | tr -d ' \n')
    case $magic in
      7f454c46|cffaedfe|cefaedfe|feedfacf|feedface|4d5a*) echo "[run-tests] tracked executable: $f"; built=1 ;;
    esac
    if [[ $f != */testdata/* && $f != testdata/* ]] && [ "$(stat -c %s "$f")" -gt 1048576 ]; then
      echo "[run-tests] tracked file over 1 MiB outside testdata/: $f"; built=1
    fi
  done < <(git ls-files -z)
  if [ "$built" = 1 ]; then
    echo "[run-tests] FAIL: build outputs are tracked: git rm --cached them and ignore them in .gitignore"
    exit 1
  fi
fi

# Formatting and vet first: they take a minute and need no server, and a run that would fail on
# them should not first spend half an hour on the service stages.
echo "[run-tests] gofmt -l, go vet ./..."
gofiles=$(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './.git/*' -not -path './testenv/.data/*')
unformatted=$([ -z "$gofiles" ] || gofmt -l $gofiles)
if [ -n "$unformatted" ]; then
  echo "[run-tests] gofmt would change these files (run gofmt -w):"
  echo "$unformatted"
  exit 1
fi
go vet ./...

echo "[run-tests] docker-compose config (docker-compose.yml)"
docker-compose -f docker-compose.yml config -q
venv=testenv/.venv
if ! "$venv/bin/python" -c "import pyopentsdb" 2>/dev/null; then
  echo "[run-tests] $venv: installing testenv/python-requirements.txt"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q -r testenv/python-requirements.txt
fi

started=0 cluster_started=0 secure_started=0 hbase_started=0 hbc_started=0 chaos_failed=0 chaos_cluster_failed=0
cluster() { KAFKA_BROKERS=3 SERVICES=kafka "$services" "$@"; }
hbase_cluster() { HBASE_REGIONSERVERS=3 SERVICES=hbase "$services" "$@"; }
cleanup() {
  if [ "$cluster_started" = 1 ]; then cluster stop || true; fi
  if [ "$hbc_started" = 1 ]; then hbase_cluster stop || true; fi
  if [ "$secure_started" = 1 ]; then SERVICES="kdc secure-hbase" "$services" stop || true; fi
  if [ "$started" = 1 ]; then "$services" stop || true; fi
  if [ "$hbase_started" = 1 ] && [ "$started" = 0 ]; then SERVICES=hbase "$services" stop || true; fi
}
trap cleanup EXIT INT TERM

# Cluster stage: a real three-broker KRaft cluster (its own ports from 19192 and its own folder,
# testenv/.data/kafka-cluster) for the TestCluster* tests, which SIGKILL and restart its brokers,
# and the HBase the later stages use (the sinks' cluster test writes to it). It runs first, before
# the single broker starts, so that the two never share the two cores; the cluster tests take
# the cluster one at a time (a lock in its folder), whichever package they are in.
# ABACUS_CLUSTER_STAGE=0 leaves it out.
if [ "${ABACUS_CLUSTER_STAGE:-1}" != 0 ]; then
  t0=$SECONDS
  if [[ $(cluster status) == *stopped* ]]; then cluster_started=1; fi
  cluster start
  if [[ $(SERVICES=hbase "$services" status) == *stopped* ]]; then hbase_started=1; fi
  SERVICES=hbase "$services" start
  echo "[run-tests] go test -run '^TestCluster' ./... (three-broker cluster: brokers are killed and restarted)"
  (
    eval "$(cluster env)"
    eval "$(SERVICES=hbase "$services" env)"
    export ABACUS_REQUIRE_CLUSTER=1 ABACUS_REQUIRE_SERVICES=1
    go test -count=1 -timeout 20m "$@" -run '^TestCluster' ./...
  )
  cluster status # the RSS of each broker after the tests
  if [ "$cluster_started" = 1 ]; then cluster stop; cluster_started=0; fi
  echo "[run-tests] cluster stage took $((SECONDS - t0)) s"
fi

# Chaos stage: the failure suite's short form (bench/chaos, a few minutes) on a Kafka and an HBase
# of its own (ports 29092/24181/24000/24020, folder testenv/.data/chaos), which it stops, kills and
# restarts while the pipeline runs; it starts them and stops them again. Like the cluster stage it
# runs alone, before the shared services start. ABACUS_CHAOS_STAGE=0 leaves it out.
if [ "${ABACUS_CHAOS_STAGE:-1}" != 0 ]; then
  t0=$SECONDS
  echo "[run-tests] go run ./bench/chaos (short form: the whole pipeline under faults, compared cell by cell)"
  # A failure is reported at the end, after the other tests have run too.
  if ! env KAFKA_PORT=29092 KAFKA_CONTROLLER_PORT=29093 KAFKA_SASL_PORT=0 HBASE_ZK_PORT=24181 HBASE_MASTER_PORT=24000 \
      HBASE_RS_PORT=24020 ABACUS_TESTENV_DIR="$root/testenv/.data/chaos" go run ./bench/chaos 2>&1 | tee "$root/testenv/.data/chaos.log"; then
    chaos_failed=1
  fi
  echo "[run-tests] chaos stage took $((SECONDS - t0)) s"
fi

# HBase-cluster stage: a real HBase cluster (ZooKeeper, HMaster and three HRegionServers, each its
# own JVM, ports from 31100, folder testenv/.data/hbase-cluster) for the TestHBaseCluster* tests,
# which SIGKILL, pause, stop and restart region servers and move regions while the whole pipeline
# writes to it, beside the single Kafka broker (which the main stage then uses). The standalone
# HBase the cluster stage started idles meanwhile. ABACUS_HBASE_CLUSTER_STAGE=0 leaves it out.
if [ "${ABACUS_HBASE_CLUSTER_STAGE:-1}" != 0 ]; then
  t0=$SECONDS
  if [[ $(hbase_cluster status) == *stopped* ]]; then hbc_started=1; fi
  hbase_cluster start
  if [[ $(SERVICES=kafka "$services" status) == *stopped* ]]; then started=1; fi
  SERVICES=kafka "$services" start
  echo "[run-tests] go test -run '^TestHBaseCluster' ./... (HBase cluster: region servers are killed, paused and restarted)"
  (
    eval "$(SERVICES=kafka "$services" env)"
    eval "$(hbase_cluster env)"
    export ABACUS_REQUIRE_HBASE_CLUSTER=1 ABACUS_REQUIRE_SERVICES=1
    go test -count=1 -timeout 30m "$@" -run '^TestHBaseCluster' ./...
  )
  hbase_cluster status # the RSS of each JVM after the tests
  if [ "$hbc_started" = 1 ]; then hbase_cluster stop; hbc_started=0; fi
  # Then the failure suite's short form on a cluster of its own (ZooKeeper 25100, Kafka 29092,
  # folder testenv/.data/chaos-cluster): region servers and hbase:meta's server SIGKILLed,
  # regions moved, beside the roles' SIGKILLs. A failure is reported at the end.
  echo "[run-tests] go run ./bench/chaos -hbase-cluster (short form on three region servers)"
  if ! env KAFKA_PORT=29092 KAFKA_CONTROLLER_PORT=29093 KAFKA_SASL_PORT=0 HBASE_CLUSTER_PORT=25100 \
      ABACUS_TESTENV_DIR="$root/testenv/.data/chaos-cluster" go run ./bench/chaos -hbase-cluster 2>&1 | tee "$root/testenv/.data/chaos-cluster.log"; then
    chaos_cluster_failed=1
  fi
  echo "[run-tests] HBase-cluster stage took $((SECONDS - t0)) s"
fi

# Leave servers alone that a developer already runs; stop only what this run started.
status=$("$services" status)
if [[ $status != *stopped* ]]; then
  echo "[run-tests] services already running: using them and leaving them up"
else
  started=1
  "$services" start
fi
eval "$("$services" env)"
export ABACUS_REQUIRE_SERVICES=1


# Fuzz targets of every decoder and parser that reads what others control (state, totals and loop
# records, JSON events, HBase responses, row keys, the config file, the query server's
# parameters), each for a few seconds, one after another: their committed corpora
# (testdata/fuzz/) already ran as ordinary tests; this looks for new failing inputs. A failing
# input is written to the package's testdata/fuzz/ and fails the run. ABACUS_FUZZTIME=0 skips it.
#
# Go 1.26's fuzz coordinator can report its own -fuzztime deadline as a failure of the target
# (go.dev/issue/75804, fixed in Go 1.27): "--- FAIL: FuzzX ... context deadline exceeded" with no
# failing input written, most often on a loaded machine. Such a run, and only such a run, is run
# again once; a second one, or any failure with an input, a panic or a test's own message, fails.
fuzztime=${ABACUS_FUZZTIME:-5s}
deadline_flake() {
  [[ $1 == *"context deadline exceeded"* && $1 != *"Failing input written"* && $1 != *"panic:"* ]] || return 1
  # The only indented line of the output must be the deadline itself: a t.Fatal would add its own.
  [ "$(printf '%s\n' "$1" | grep -c '^    ')" = 1 ]
}
if [ "$fuzztime" != 0 ]; then
  t0=$SECONDS
  while read -r pkg target; do
    echo "[run-tests] go test -fuzz $target -fuzztime $fuzztime $pkg"
    if ! out=$(go test -run '^$' -fuzz "^$target\$" -fuzztime "$fuzztime" "$pkg" 2>&1); then
      if deadline_flake "$out"; then
        printf '%s\n' "$out" | tail -3
        echo "[run-tests] $target stopped on Go's fuzz deadline race (go.dev/issue/75804), no input: once more"
        out=$(go test -run '^$' -fuzz "^$target\$" -fuzztime "$fuzztime" "$pkg" 2>&1) || { printf '%s\n' "$out"; exit 1; }
      else
        printf '%s\n' "$out"
        exit 1
      fi
    fi
    if [[ $out != *"fuzz: elapsed"* ]]; then
      echo "[run-tests] $pkg did not fuzz $target (no such target?): fix the list in testenv/run-tests.sh"; printf "%s\n" "$out"
      exit 1
    fi
  done <<'TARGETS'
./state FuzzDecode
./totals FuzzDecode
./internal/engine FuzzDecodeLoop
./topology FuzzJSONDecode
./hbase FuzzResponseDecoding
./schema FuzzParseAggregateRow
./app FuzzConfig
./query FuzzParseTime
./query FuzzAPIParams
./query FuzzOpenTSDBParams
TARGETS
  echo "[run-tests] fuzzing took $((SECONDS - t0)) s"
fi
# Tests that stop and restart the shared services (TestDisruptive*) run alone, one package at a
# time, before the others: a run must not have other tests beside them, and ending with the main
# run leaves its results as the last word.
echo "[run-tests] go test ./... (disruptive tests: services are stopped and restarted)"
ABACUS_DISRUPTIVE=1 go test -count=1 -timeout 30m -p 1 -run '^TestDisruptive' "$@" ./...
echo "[run-tests] go test -race (the engine, the test driver and the in-memory packages)"
go test -race -count=1 -timeout 15m "$@" ./abacustest ./internal/... ./state ./totals ./windows ./topology \
  ./schema ./deadletter ./partitioner ./store/cellstore
echo "[run-tests] go test ./... (everything else)"
go test -count=1 -timeout 45m -skip '^(TestDisruptive|TestCluster|TestHBaseCluster)' "$@" ./...
echo "[run-tests] go test ./... in deploy/ (compose file and Kubernetes overlays, checked against abacus)"
(cd deploy && go test -count=1 ./...)

# Kerberos (issue 17): an MIT KDC and a Kerberized HBase beside the plain services, on their own
# ports and data folder. HBase's own Java client first proves the server (and that it refuses a
# client without credentials), then the Go client's TestKerberos* tests run against it, and tests
# written for the plain HBase that take their settings from testenv.HBaseConfig run again with
# Kerberos. The services are stopped afterwards unless they were already running.
secure=(env SERVICES="kdc secure-hbase" "$services")
kerberos_t0=$SECONDS
if [[ $("${secure[@]}" status) != *stopped* ]]; then
  echo "[run-tests] Kerberos: KDC and Kerberized HBase already running: using them and leaving them up"
else
  secure_started=1
  echo "[run-tests] Kerberos: starting the KDC and the Kerberized HBase"
  "${secure[@]}" start
fi
echo "[run-tests] Kerberos: HBase's Java client against the Kerberized HBase"
"${secure[@]}" check-secure-java
eval "$("${secure[@]}" env)"
echo "[run-tests] Kerberos: go test -run '^TestKerberos' ./hbase/"
ABACUS_REQUIRE_SECURE_HBASE=1 go test -count=1 -timeout 15m -run '^TestKerberos' "$@" ./hbase/
# Tests whose HBase clients come from testenv.HBaseConfig or testenv.HBaseClient: the client, the
# store, queries and the sinks' end-to-end tests against real HBase.
echo "[run-tests] Kerberos: tests of the plain HBase, again with Kerberos"
ABACUS_HBASE_AUTH=kerberos ABACUS_HBASE_ZK=$ABACUS_SECURE_HBASE_ZK \
  go test -count=1 -timeout 15m -skip '^(TestDisruptive|TestCluster|TestHBaseCluster|TestDashboardInChromium|TestPyOpenTSDB)' "$@" \
  ./internal/testenv/ ./store/hbasestore/ ./query/
ABACUS_HBASE_AUTH=kerberos ABACUS_HBASE_ZK=$ABACUS_SECURE_HBASE_ZK \
  go test -count=1 -timeout 15m -run '^TestSink' "$@" ./sinks/
"${secure[@]}" status
echo "[run-tests] Kerberos stage: $((SECONDS - kerberos_t0)) s before stopping its services"

if [ "$chaos_cluster_failed" = 1 ]; then
  echo "[run-tests] FAIL: the chaos stage on the HBase cluster (go run ./bench/chaos -hbase-cluster) failed; its summary again:"
  sed -n '/^=====/,$p' "$root/testenv/.data/chaos-cluster.log" || true
  exit 1
fi
if [ "$chaos_failed" = 1 ]; then
  echo "[run-tests] FAIL: the chaos stage (go run ./bench/chaos) failed; its summary again (the whole run: testenv/.data/chaos.log):"
  sed -n '/^=====/,$p' "$root/testenv/.data/chaos.log" || true
  exit 1
fi
