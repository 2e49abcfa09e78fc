#!/usr/bin/env bash
# The project's test command (README): every test, against a real Kafka broker and a real HBase that
# testenv/services.sh fetches from Maven Central and starts on loopback, in stages that run side by
# side, each with the services it needs, and that can each be run alone by name.
#
#   testenv/run-tests.sh                    every stage (what CI runs: .ci/run)
#   testenv/run-tests.sh main chaos         only these stages, with the services they need
#   testenv/run-tests.sh --list             the stages and what each proves
#   testenv/run-tests.sh main -- -v -run TestSinkE2E   what follows -- goes to every `go test`
#
# Settings (environment):
#   ABACUS_TEST_JOBS   how many stages run at once (default 4). The stages mostly wait on servers,
#                      timeouts and restarts, so several share two cores well; 1 runs them in turn.
#   ABACUS_FUZZTIME    how long the fuzz stage fuzzes each target (default 5s)
#
# Each stage's output goes to testenv/.data/run/STAGE.log and is printed whole when the stage ends
# (live when one stage runs alone). At the end: each stage's result and seconds, and the ten slowest
# Go tests of the run (from the `go test -json` files beside the logs). A service that does not come
# up fails its stage, so does a test that finds a service missing; any failed stage fails the run,
# after the other stages have run.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
services=$root/testenv/services.sh
data=$root/testenv/.data
run_dir=$data/run # this run's logs, `go test -json` files and job markers
bin=$data/bin

# The stages, in the order the run starts them: the unit tests first, then the main stage as soon as
# they end (it runs the tests they skipped for want of a service), the others by length, longest
# first, as slots free up.
stage_order=(unit main disruptive chaos-cluster hbase-cluster cluster kerberos chaos fuzz browser)
declare -A stage_about=(
  [unit]="gofmt, go vet, the tests compile; every Go test that needs no server (kfake, the test driver, the embedded store, the CLI), the in-memory packages under -race, deploy/ checked against abacus, docker-compose.yml checked by docker-compose"
  [main]="every test that needs a server, against the real Kafka broker (PLAINTEXT and SASL_SSL) and the real standalone HBase: the sinks end to end, the processor on a real broker, the HBase client, queries, the CLI, pyopentsdb against the OpenTSDB API"
  [disruptive]="the TestDisruptive* tests, on Kafka brokers and HBases of their own that they stop, kill and restart: HBase down for five minutes (the sinks hold their poll and stay in their group) beside the others: the broker restarted and SIGKILLed, HBase stopped and SIGKILLed"
  [cluster]="the TestCluster* tests on a three-broker Kafka cluster whose brokers they SIGKILL and restart (leaders killed mid-stream, two of three brokers down)"
  [chaos]="the failure suite's short form (bench/chaos): the whole pipeline while its roles are SIGKILLed again and again, HBase is stopped and killed, the broker restarted, regions split and moved; every cell compared with an oracle and a crash-free run; beside it, on the shared broker, the processor's crash test (processors TestCrashRealKafka)"
  [hbase-cluster]="the TestHBaseCluster* tests on an HBase cluster of three region servers, which they SIGKILL, pause, stop and restart, and whose regions they move, while the whole pipeline writes"
  [chaos-cluster]="the failure suite's short form on an HBase cluster of three region servers (bench/chaos -hbase-cluster): region servers and hbase:meta's server SIGKILLed, regions moved, beside the roles' SIGKILLs"
  [kerberos]="an MIT KDC and a Kerberized HBase: HBase's own Java client proves the server, then the TestKerberos* tests, then the client, store, query and sink tests again with Kerberos"
  [fuzz]="each fuzz target (decoders and parsers of what others control) fuzzed for ABACUS_FUZZTIME; their corpora already ran as tests in the unit stage"
  [browser]="the dashboard pages in Debian's headless Chromium (query/httpapi: *InChromium)"
)
# What each stage needs that the run prepares in the background (see the job_ functions):
# Debian's packages, the Python venv, the Maven jars, the shared Kafka and HBase.
declare -A stage_needs=(
  [unit]="packages" [main]="jars services venv" [disruptive]="jars" [cluster]="jars services"
  [chaos]="jars services" [hbase-cluster]="jars services" [chaos-cluster]="jars" [kerberos]="packages jars services"
  [fuzz]="" [browser]="packages"
)
# Tests that belong to a stage of their own: the main stage leaves them out.
# The crash test runs in the chaos stage, beside the failure suite.
crash_test=TestCrashRealKafka
own_stage_tests="^(TestDisruptive|TestCluster|TestHBaseCluster|TestKerberos|$crash_test\$)"
browser_tests='InChromium$'
# Fuzz targets of every decoder and parser that reads what others control (state, totals and loop
# records, JSON events, HBase responses, row keys, the config file, the query server's parameters).
fuzz_targets="./state FuzzDecode
./totals FuzzDecode
./internal/engine FuzzDecodeLoop
./topology FuzzJSONDecode
./hbase FuzzResponseDecoding
./schema FuzzParseAggregateRow
./app FuzzConfig
./query FuzzParseTime
./query/httpapi FuzzAPIParams
./query/opentsdb FuzzOpenTSDBParams
./query/opentsdb FuzzTSDBTime"

log() { printf '[run-tests] %s\n' "$*"; }

list_stages() {
  local s
  echo "Stages of testenv/run-tests.sh (all of them, side by side, when none is named):"
  for s in "${stage_order[@]}"; do
    fold -s -w 82 <<<"${stage_about[$s]}" | sed "1s/^/  $(printf '%-15s' "$s")/; 2,\$s/^/                 /; s/ *$//"
  done
}

selected=() gotest_args=()
while (($#)); do
  case $1 in
    --list | -l) list_stages; exit 0 ;;
    --) shift; gotest_args+=("$@"); break ;;
    -*) gotest_args+=("$1") ;;
    *)
      if [ -z "${stage_about[$1]+x}" ]; then
        echo "run-tests.sh: no stage \"$1\"; the stages: ${stage_order[*]} (--list says what each proves)" >&2
        exit 2
      fi
      selected+=("$1") ;;
  esac
  shift
done
if [ ${#selected[@]} = 0 ]; then selected=("${stage_order[@]}"); fi
is_selected() { [[ " ${selected[*]} " == *" $1 "* ]]; }
jobs_max=${ABACUS_TEST_JOBS:-4}
[[ $jobs_max =~ ^[1-9][0-9]*$ ]] || { echo "ABACUS_TEST_JOBS=$jobs_max: say a number of stages, 1 or more" >&2; exit 2; }

rm -rf "$run_dir"
mkdir -p "$run_dir" "$bin"
t_start=$SECONDS

# ---- background jobs: what stages need, prepared while other stages run ----------------------

# start_job NAME: runs job_NAME in the background, its output in $run_dir/NAME.log; it leaves
# NAME.ok or NAME.failed there, which await reads.
start_job() {
  local name=$1
  touch "$run_dir/$name.started"
  {
    set +e
    (set -e; "job_$name") >"$run_dir/$name.log" 2>&1 </dev/null
    if [ $? = 0 ]; then touch "$run_dir/$name.ok"; else touch "$run_dir/$name.failed"; fi
  } &
}

# await NAME: waits until the background job NAME has succeeded; fails, showing its log, if it failed.
await() {
  local name=$1
  [ -e "$run_dir/$name.started" ] || { log "$name: not prepared by this run (stage_needs is wrong)"; return 1; }
  until [ -e "$run_dir/$name.ok" ]; do
    if [ -e "$run_dir/$name.failed" ]; then
      log "$name failed (log: $run_dir/$name.log):"
      tail -n 30 "$run_dir/$name.log"
      return 1
    fi
    sleep 1
  done
}

# sudo_cmd: how to run a command as root: directly, or through password-less sudo.
sudo_cmd() {
  if [ "$(id -u)" = 0 ]; then return 0; fi
  if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then echo sudo; return 0; fi
  return 1
}

# job_packages installs, in one apt-get run, the Debian packages the selected stages need and this
# machine lacks: a fresh machine (CI's) has none of them.
job_packages() {
  local want=()
  if is_selected unit && ! command -v docker-compose >/dev/null; then want+=(docker-compose); fi
  if is_selected browser && [ ! -x /usr/bin/chromium ]; then want+=(chromium); fi
  if is_selected kerberos; then
    local tool
    for tool in krb5kdc kdb5_util kadmin.local kinit faketime; do
      if ! command -v "$tool" >/dev/null; then want+=(krb5-kdc krb5-admin-server krb5-user faketime); break; fi
    done
  fi
  if [ ${#want[@]} = 0 ]; then echo "every Debian package needed is installed"; return 0; fi
  local sudo
  sudo=$(sudo_cmd) || { echo "missing Debian packages ${want[*]}, and neither root nor password-less sudo to install them"; return 1; }
  echo "apt-get install ${want[*]}"
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${want[@]}"
}

# job_venv: the Python packages of opentsdb.TestPyOpenTSDBClient (testenv/python-requirements.txt).
job_venv() {
  local venv=$root/testenv/.venv
  if "$venv/bin/python" -c "import pyopentsdb" 2>/dev/null; then echo "$venv has pyopentsdb"; return 0; fi
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q -r testenv/python-requirements.txt
}

# job_tools builds what the stages run: gotestsum (pinned in testenv/tools/go.mod) and testlog.
job_tools() {
  go build -C testenv/tools -o "$bin/gotestsum" gotest.tools/gotestsum
  go build -o "$bin/testlog" ./testenv/testlog
}

# job_jars resolves the Kafka and HBase jars once (Maven caches them in ~/.m2), for every stage.
job_jars() { SERVICES="kafka hbase" "$services" fetch; }

# job_services starts the shared single Kafka broker and standalone HBase, on their default ports,
# for the stages that only read and write them. Servers a developer already runs are used and left
# running; what this job starts, the run stops at its end.
job_services() {
  await jars
  if [[ $("$services" status) == *stopped* ]]; then
    touch "$run_dir/services.owned"
    "$services" start
  else
    echo "services already running: using them and leaving them up"
    "$services" status
  fi
}

# ---- helpers for the stages -------------------------------------------------------------------

# gotest NAME ARGS...: `go test -count=1 ARGS...` through gotestsum, which prints the packages' lines
# and the failures' output as go test does and keeps every test event in $run_dir/NAME.json (the
# time table and the main stage's list read them).
gotest() {
  local name=$1
  shift
  await tools
  "$bin/gotestsum" --format standard-quiet --format-hide-empty-pkg --hide-summary=skipped \
    --jsonfile "$run_dir/$name.json" -- -count=1 "$@" "${gotest_args[@]}"
}

# packages_with REGEX: the packages (./dir) with a test function whose name matches ^func REGEX.
packages_with() {
  git ls-files '*_test.go' | xargs grep -l -E "^func $1" | xargs -n1 dirname | sort -u | sed 's|^|./|'
}

# up: starts the services that the current environment (SERVICES, ports, ABACUS_TESTENV_DIR) names
# unless they all run already, and stops them when the stage ends.
up() {
  if [[ $("$services" status) == *stopped* ]]; then
    trap '"$services" stop || true' EXIT
    "$services" start
  else
    log "$SERVICES already running: using them and leaving them up"
  fi
}

# ---- the stages (each runs in a subshell of its own, with set -e) -----------------------------

# checks: before any stage, when the unit stage is selected: a run that would fail on them should not
# first spend its time on the service stages.
checks() {
  log "tracked files: no executables, nothing over 1 MiB outside testdata/"
  local built=0 f magic
  while IFS= read -r -d '' f; do
    [ -f "$f" ] || continue
    magic=$(head -c 4 "$f" | od -An -tx1 | tr -d ' \n')
    case $magic in
      7f454c46 | cffaedfe | cefaedfe | feedfacf | feedface | 4d5a*) log "tracked executable: $f"; built=1 ;;
    esac
    if [[ $f != */testdata/* && $f != testdata/* ]] && [ "$(stat -c %s "$f")" -gt 1048576 ]; then
      log "tracked file over 1 MiB outside testdata/: $f"; built=1
    fi
  done < <(git ls-files -z)
  if [ "$built" = 1 ]; then
    log "FAIL: build outputs are tracked: git rm --cached them and ignore them in .gitignore"
    return 1
  fi
  # Commit subjects fit `git log --oneline` (under 72 characters, the why in the body); commits up
  # to 47da8d7 came before the rule.
  if git cat-file -e 47da8d7^{commit} 2>/dev/null; then
    log "commit subjects since 47da8d7: at most 72 characters"
    local long
    long=$(git log --format='%h %s' 47da8d7..HEAD | awk '{ s = substr($0, index($0, " ") + 1); if (length(s) > 72) print }')
    if [ -n "$long" ]; then
      log "FAIL: these commit subjects are longer than 72 characters (say the why in the body):"
      echo "$long"
      return 1
    fi
  else
    log "commit subjects not checked: 47da8d7 is not in this clone's history"
  fi
  log "gofmt -l, go vet ./... (and deploy/)"
  local unformatted
  unformatted=$(git ls-files '*.go' | xargs gofmt -l)
  if [ -n "$unformatted" ]; then
    log "gofmt would change these files (run gofmt -w):"
    echo "$unformatted"
    return 1
  fi
  go vet ./...
  (cd deploy && go vet ./...)
  log "every test compiles (go test -run '^\$' ./...): the stages then only link"
  go test -count=1 -run '^$' ./... >"$run_dir/compile.log" 2>&1 || { cat "$run_dir/compile.log"; return 1; }
}

stage_unit() {
  local failed=0
  export ABACUS_NO_SERVICES=1 # tests that need a service skip at once; the main stage runs them
  log "go test ./... without services (the main stage runs what skips here for want of one)"
  gotest unit -skip "$browser_tests" ./... || failed=1
  "$bin/testlog" needs-services "$run_dir/unit.json" >"$run_dir/needs-services.tmp"
  mv "$run_dir/needs-services.tmp" "$run_dir/needs-services.txt" # whole, or not there: main starts on it
  log "$(wc -l <"$run_dir/needs-services.txt") tests need a service: the main stage runs them"
  log "go test -race (the engine, the test driver and the in-memory packages)"
  # Not the checks of docs and imports (internal/doccheck, internal/layers): they run no goroutines
  # of abacus's, and under -race they took 175 s of the stage for nothing the plain run misses.
  local race_internal
  race_internal=$(go list ./internal/... | grep -v -e '/internal/doccheck$' -e '/internal/layers$')
  # shellcheck disable=SC2086 # one package a word
  gotest unit-race -race ./abacustest $race_internal ./state ./totals ./windows ./topology ./tables \
    ./schema ./deadletter ./partitioner ./store/cellstore ./testenv/testlog || failed=1
  # The query cache is shared by every request's goroutines: its tests on the embedded store.
  gotest unit-race-cache -race -run '^TestCache(UnderConcurrentReads|NeedsACompleteKeyIndex|LeavesOutWhatTheTTLExpired)$' ./query || failed=1
  log "go test ./... in deploy/ (compose file and Kubernetes overlays, checked against abacus)"
  (cd deploy && "$bin/gotestsum" --format standard-quiet --jsonfile "$run_dir/unit-deploy.json" -- -count=1 ./...) || failed=1
  log "docker-compose config (docker-compose.yml)"
  await packages
  docker-compose -f docker-compose.yml config -q || failed=1
  return "$failed"
}

stage_main() {
  await services
  await venv
  eval "$("$services" env)"
  export ABACUS_REQUIRE_SERVICES=1
  # -p 4: the packages' tests mostly wait on the servers; four share the two cores.
  if is_selected unit && [ -e "$run_dir/needs-services.txt" ]; then
    local pkgs run
    pkgs=$(cut -d' ' -f1 "$run_dir/needs-services.txt" | sort -u)
    run="^($(cut -d' ' -f2 "$run_dir/needs-services.txt" | sort -u | paste -sd'|'))\$"
    if [ -z "$pkgs" ]; then
      log "FAIL: the unit stage found no test that needs a service: the gate's mark is lost"
      return 1
    fi
    log "go test the $(wc -l <"$run_dir/needs-services.txt") tests that skipped in the unit stage for want of a service"
    # shellcheck disable=SC2086 # one package a word
    gotest main -p 4 -timeout 30m -run "$run" -skip "$own_stage_tests|$browser_tests" $pkgs
  else
    log "go test ./... (every test but those of other stages)"
    gotest main -p 4 -timeout 30m -skip "$own_stage_tests|$browser_tests" ./...
  fi
  # The benchmarks' loader writes from several goroutines, and the dashboards benchmark asks from
  # 16 at once: a small load and one round of every panel over it, under the race detector.
  log "go test -race the benchmark loader and dashboards (bench/query TestLoadSmall)"
  gotest main-race -race -timeout 10m -run '^TestLoadSmall$' ./bench/query
  # The backfill benchmark on a small fleet, so that it keeps working: it fails when a run reads
  # fewer facts than were loaded or writes no window.
  # Plain go test: gotestsum lists a benchmark's results as failures of unknown status.
  log "go test -bench the backfill benchmark on a small fleet (bench/backfill)"
  ABACUS_BENCH_DEVICES=20 ABACUS_BENCH_HOURS=2 go test -count=1 -run '^$' -bench '^BenchmarkBackfill$' -benchtime 1x -timeout 10m ./bench/backfill "${gotest_args[@]}"
}

# disruptive_tests NAME PORTS GO-TEST-ARGS...: `go test GO-TEST-ARGS` with ABACUS_DISRUPTIVE=1 on a
# Kafka and an HBase of their own (ports PORTS092, PORTS181, ..., folder testenv/.data/NAME), which
# the tests stop, kill and restart (gate.StopService runs testenv/services.sh with this environment).
disruptive_tests() {
  local name=$1 p=$2
  shift 2
  export KAFKA_PORT=${p}092 KAFKA_CONTROLLER_PORT=${p}093 KAFKA_SASL_PORT=0 HBASE_ZK_PORT=${p}181 \
    HBASE_MASTER_PORT=${p}000 HBASE_RS_PORT=${p}020 ABACUS_TESTENV_DIR=$data/$name SERVICES="kafka hbase"
  up
  eval "$("$services" env)"
  export ABACUS_DISRUPTIVE=1 ABACUS_REQUIRE_SERVICES=1
  # -p 1: one package at a time, each stopping the servers under its own tests only.
  gotest "$name" -p 1 -timeout 30m "$@"
}

stage_disruptive() {
  # The five-minute HBase outage on one pair of servers, the other disruptive tests beside it on
  # another: the stage takes as long as the outage test, not as long as all of them in a row.
  local outage='^TestDisruptiveHBaseDownFiveMinutes$' rc=0 pid
  (set -e; trap 'exit 130' INT TERM; disruptive_tests disruptive-outage 27 -run "$outage" \
    $(packages_with TestDisruptiveHBaseDownFiveMinutes)) >"$run_dir/disruptive-outage.out" 2>&1 &
  pid=$!
  # shellcheck disable=SC2046
  (set -e; trap 'exit 130' INT TERM; disruptive_tests disruptive 23 -run '^TestDisruptive' -skip "$outage" \
    $(packages_with TestDisruptive)) >"$run_dir/disruptive.out" 2>&1 &
  wait $! || rc=1
  wait "$pid" || rc=1
  log "the five-minute HBase outage (ports 27092, 27181; testenv/.data/disruptive-outage):"
  cat "$run_dir/disruptive-outage.out"
  log "the other disruptive tests (ports 23092, 23181; testenv/.data/disruptive):"
  cat "$run_dir/disruptive.out"
  return "$rc"
}

stage_cluster() {
  await services # the sinks' cluster test writes to the shared HBase
  export KAFKA_BROKERS=3 SERVICES=kafka # ports from 19192, folder testenv/.data/kafka-cluster
  up
  eval "$(env -u KAFKA_BROKERS SERVICES=hbase "$services" env)"
  eval "$("$services" env)"
  export ABACUS_REQUIRE_CLUSTER=1 ABACUS_REQUIRE_SERVICES=1
  # shellcheck disable=SC2046
  gotest cluster -timeout 20m -run '^TestCluster' $(packages_with TestCluster)
  "$services" status # the RSS of each broker after the tests
}

stage_chaos() {
  # Beside the suite, on the shared broker: the processor's crash test (processor processes
  # SIGKILLed mid-stream, state lost once). It is the processors package's longest test (275 s
  # in the main stage), which was the main stage's longest package and so the run's critical path.
  await services
  local rc=0 pid
  (set -e; eval "$("$services" env)"; export ABACUS_REQUIRE_SERVICES=1
    gotest chaos-crash -timeout 15m -run "^$crash_test\$" ./processors) >"$run_dir/chaos-crash.out" 2>&1 &
  pid=$!
  # bench/chaos starts its own Kafka and HBase (ports 29092, 24181, folder testenv/.data/chaos),
  # stops and kills them, and stops them at the end.
  go run ./bench/chaos || rc=1
  wait "$pid" || rc=1
  log "the processor's crash test on the shared broker:"
  cat "$run_dir/chaos-crash.out"
  return "$rc"
}

stage_hbase_cluster() {
  await services # the pipeline's Kafka: the shared broker
  export HBASE_REGIONSERVERS=3 SERVICES=hbase # ports from 31100, folder testenv/.data/hbase-cluster
  up
  eval "$(env -u HBASE_REGIONSERVERS SERVICES=kafka "$services" env)"
  eval "$("$services" env)"
  export ABACUS_REQUIRE_HBASE_CLUSTER=1 ABACUS_REQUIRE_SERVICES=1
  # shellcheck disable=SC2046
  gotest hbase-cluster -timeout 30m -run '^TestHBaseCluster' $(packages_with TestHBaseCluster)
  "$services" status # the RSS of each JVM after the tests
}

stage_chaos_cluster() {
  # Ports of its own (Kafka 29192, ZooKeeper 25100), folder testenv/.data/chaos-cluster.
  go run ./bench/chaos -hbase-cluster
}

stage_kerberos() {
  await services # Kafka, for the sinks' tests
  await packages # MIT Kerberos
  export SERVICES="kdc secure-hbase"
  up
  log "HBase's Java client against the Kerberized HBase"
  "$services" check-secure-java
  eval "$(SERVICES=kafka "$services" env)"
  eval "$("$services" env)"
  log "go test -run '^TestKerberos' ./hbase/"
  ABACUS_REQUIRE_SECURE_HBASE=1 ABACUS_REQUIRE_SERVICES=1 gotest kerberos -timeout 15m -run '^TestKerberos' ./hbase/
  # Tests whose HBase clients come from testenv.HBaseConfig or testenv.HBaseClient: the client, the
  # store, queries and the sinks' end-to-end tests, against the Kerberized HBase.
  log "tests of the plain HBase, again with Kerberos"
  export ABACUS_HBASE_AUTH=kerberos ABACUS_HBASE_ZK=$ABACUS_SECURE_HBASE_ZK ABACUS_REQUIRE_SERVICES=1
  # Not TestComposeHBaseImageServes: it starts an HBase of its own (no Kerberos) on fixed ports,
  # which the main stage's run of it holds at the same time.
  gotest kerberos-again -timeout 15m -skip "$own_stage_tests|$browser_tests|^TestPyOpenTSDB|^TestComposeHBaseImageServes" \
    ./internal/testenv/ ./store/hbasestore/ ./query/ ./query/opentsdb/
  gotest kerberos-sinks -timeout 15m -run '^TestSink' ./sinks/
  "$services" status
}

stage_fuzz() {
  # Go 1.26's fuzz coordinator can report its own -fuzztime deadline as a failure of the target
  # (go.dev/issue/75804, fixed in Go 1.27): "--- FAIL: FuzzX ... context deadline exceeded" with no
  # failing input written, most often on a loaded machine. Such a run, and only such a run, is run
  # again once; a second one, or any failure with an input, a panic or a test's own message, fails.
  # A failing input is written to the package's testdata/fuzz/.
  local fuzztime=${ABACUS_FUZZTIME:-5s} pkg target out
  deadline_flake() {
    [[ $1 == *"context deadline exceeded"* && $1 != *"Failing input written"* && $1 != *"panic:"* ]] || return 1
    # The only indented line of the output must be the deadline itself: a t.Fatal would add its own.
    [ "$(printf '%s\n' "$1" | grep -c '^    ')" = 1 ]
  }
  while read -r pkg target; do
    log "go test -fuzz $target -fuzztime $fuzztime $pkg"
    if ! out=$(go test -run '^$' -fuzz "^$target\$" -fuzztime "$fuzztime" "$pkg" 2>&1); then
      if deadline_flake "$out"; then
        printf '%s\n' "$out" | tail -3
        log "$target stopped on Go's fuzz deadline race (go.dev/issue/75804), no input: once more"
        out=$(go test -run '^$' -fuzz "^$target\$" -fuzztime "$fuzztime" "$pkg" 2>&1) || { printf '%s\n' "$out"; return 1; }
      else
        printf '%s\n' "$out"
        return 1
      fi
    fi
    if [[ $out != *"fuzz: elapsed"* ]]; then
      log "$pkg did not fuzz $target (no such target?): fix fuzz_targets in testenv/run-tests.sh"
      printf "%s\n" "$out"
      return 1
    fi
  done <<<"$fuzz_targets"
}

stage_browser() {
  await packages # Debian's chromium
  ABACUS_REQUIRE_SERVICES=1 gotest browser -run "$browser_tests" ./query/httpapi/
}

# ---- the run ----------------------------------------------------------------------------------

stage_pids=() # pid of each running stage, by position in running_stages
running_stages=()

# run_stage NAME: runs stage NAME in a subshell of its own with set -e, its output in
# $run_dir/NAME.log (and on the terminal too when only one stage runs); leaves "STATUS SECONDS" in
# $run_dir/NAME.result.
run_stage() {
  local s=$1 t0=$SECONDS rc
  set +e
  if [ ${#selected[@]} = 1 ]; then
    (set -eo pipefail; trap 'exit 130' INT TERM; "stage_${s//-/_}") 2>&1 </dev/null | tee "$run_dir/$s.log"
    rc=${PIPESTATUS[0]}
  else
    (set -e; trap 'exit 130' INT TERM; "stage_${s//-/_}") >"$run_dir/$s.log" 2>&1 </dev/null
    rc=$?
  fi
  echo "$rc $((SECONDS - t0))" >"$run_dir/$s.result"
}

# finish_stage NAME: prints a finished stage's log (unless it went to the terminal) and its result.
finish_stage() {
  local s=$1 rc secs
  read -r rc secs <"$run_dir/$s.result"
  if [ ${#selected[@]} != 1 ]; then
    echo "===== stage $s: $([ "$rc" = 0 ] && echo PASS || echo FAIL) in $secs s ($run_dir/$s.log) ====="
    cat "$run_dir/$s.log"
  fi
  log "stage $s $([ "$rc" = 0 ] && echo passed || echo FAILED) after $secs s ($(($(date +%s) - run_epoch)) s into the run)"
}

# kill_tree PID: TERM to a process and all its descendants, children first, so that a stage's
# subshell runs its EXIT trap (stopping its services) after its tests are gone.
kill_tree() {
  local child
  for child in $(pgrep -P "$1" 2>/dev/null); do kill_tree "$child"; done
  kill -TERM "$1" 2>/dev/null || true
}

# cleanup, when the run ends or is stopped: stops what is still running, then the shared services
# if this run started them.
cleanup() {
  local pid
  trap - EXIT INT TERM
  for pid in $(jobs -p); do kill_tree "$pid"; done
  wait 2>/dev/null || true
  if [ -e "$run_dir/services.owned" ]; then "$services" stop || true; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
run_epoch=$(date +%s)

# What the selected stages need, started now in the background.
declare -A needed=()
for s in "${selected[@]}"; do for n in ${stage_needs[$s]}; do needed[$n]=1; done; done
for n in packages venv jars services; do
  if [ -n "${needed[$n]+x}" ]; then start_job "$n"; fi
done
start_job tools

checks_secs=
if is_selected unit; then
  t0=$SECONDS
  set +e
  (set -e; checks)
  rc=$?
  set -e
  if [ "$rc" != 0 ]; then
    log "FAIL: the checks failed: no stage runs"
    exit 1
  fi
  checks_secs=$((SECONDS - t0))
  log "checks passed in $checks_secs s"
fi

# main_ready: the main stage may start: the unit stage is not in this run, or it has listed the
# tests that need a service (its other steps may still run), or it ended without listing them.
main_ready() {
  ! is_selected unit || [ -e "$run_dir/needs-services.txt" ] || [ -e "$run_dir/unit.result" ]
}

# busy_slots: how many slots the running stages hold (the unit stage none once it has listed).
busy_slots() {
  local n=${#running_stages[@]}
  if [[ " ${running_stages[*]} " == *" unit "* ]] && [ -e "$run_dir/needs-services.txt" ]; then n=$((n - 1)); fi
  echo "$n"
}

# The stages: at most jobs_max at once, in stage_order; main once unit has listed its tests. The
# unit stage's slot is free for main as soon as it has: its last steps (-race, deploy/) are short.
pending=()
for s in "${stage_order[@]}"; do if is_selected "$s"; then pending+=("$s"); fi; done
failed=()
while [ ${#pending[@]} -gt 0 ] || [ ${#running_stages[@]} -gt 0 ]; do
  next=()
  for s in "${pending[@]}"; do
    if [ "$(busy_slots)" -lt "$jobs_max" ] && { [ "$s" != main ] || main_ready; }; then
      log "stage $s started ($(($(date +%s) - run_epoch)) s into the run)"
      run_stage "$s" &
      stage_pids+=($!)
      running_stages+=("$s")
    else
      next+=("$s")
    fi
  done
  pending=("${next[@]}")
  sleep 2
  # Collect the stages that ended.
  still=() still_pids=()
  for i in "${!running_stages[@]}"; do
    s=${running_stages[$i]}
    if [ -e "$run_dir/$s.result" ]; then
      wait "${stage_pids[$i]}" 2>/dev/null || true
      finish_stage "$s"
      read -r rc _ <"$run_dir/$s.result"
      if [ "$rc" != 0 ]; then failed+=("$s"); fi
    else
      still+=("$s") still_pids+=("${stage_pids[$i]}")
    fi
  done
  running_stages=("${still[@]}") stage_pids=("${still_pids[@]}")
done

# The time table: each stage's seconds, then the ten slowest Go tests of the run.
echo
log "time table ($(($(date +%s) - run_epoch)) s in all; ABACUS_TEST_JOBS=$jobs_max stages at once)"
if [ -n "$checks_secs" ]; then printf '  %-14s %-5s %5s s\n' checks pass "$checks_secs"; fi
for s in "${stage_order[@]}"; do
  if [ -e "$run_dir/$s.result" ]; then
    read -r rc secs <"$run_dir/$s.result"
    printf '  %-14s %-5s %5s s\n' "$s" "$([ "$rc" = 0 ] && echo pass || echo FAIL)" "$secs"
  fi
done
shopt -s nullglob
jsons=()
for f in "$run_dir"/*.json; do jsons+=("$(basename "$f" .json)=$f"); done
if [ ${#jsons[@]} -gt 0 ]; then
  log "the ten slowest Go tests of the run:"
  "$bin/testlog" slowest -n 10 "${jsons[@]}"
fi
if [ ${#failed[@]} -gt 0 ]; then
  for s in "${failed[@]}"; do
    log "the end of stage $s's log ($run_dir/$s.log):"
    tail -n 40 "$run_dir/$s.log"
  done
  log "FAIL: stage(s) ${failed[*]}"
  exit 1
fi
log "PASS"
