#!/usr/bin/env bash
# Runs a real single-node Kafka (KRaft) broker and a real standalone HBase on loopback, for tests and
# development, with no Docker: the jars come from Maven Central through testenv/{kafka,hbase}/pom.xml.
#
#   testenv/services.sh fetch    resolve the jars (once; Maven caches them in ~/.m2)
#   testenv/services.sh start    fetch, start whatever is not running, wait until both really answer
#   testenv/services.sh stop     stop both (data is kept; `clean` removes it)
#   testenv/services.sh status   say what runs, where it listens and where its logs are
#   testenv/services.sh env      print the environment the Go tests read (eval "$(... env)")
#   testenv/services.sh clean    stop and remove the data folder
#
# Settings (environment):
#   ABACUS_TESTENV_DIR   data, logs and pid files (default: testenv/.data, git-ignored)
#   KAFKA_PORT           broker listener port (default 9092); KAFKA_CONTROLLER_PORT (default 9093)
#   HBASE_ZK_PORT        embedded ZooKeeper client port (default 2181)
#   HBASE_MASTER_PORT    master RPC port (default 16000); HBASE_RS_PORT region server RPC (default 16020)
#   SERVICES             which to run: "kafka hbase" (default), "kafka" or "hbase"
#   READY_TIMEOUT        seconds to wait for each service (default 240)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
data=${ABACUS_TESTENV_DIR:-$here/.data}
mkdir -p "$data"
data=$(cd "$data" && pwd)

kafka_port=${KAFKA_PORT:-9092}
kafka_ctl_port=${KAFKA_CONTROLLER_PORT:-9093}
zk_port=${HBASE_ZK_PORT:-2181}
master_port=${HBASE_MASTER_PORT:-16000}
rs_port=${HBASE_RS_PORT:-16020}
services=${SERVICES:-kafka hbase}
ready_timeout=${READY_TIMEOUT:-240}

log() { printf '[testenv] %s\n' "$*" >&2; }
die() { printf '[testenv] error: %s\n' "$*" >&2; exit 1; }

need_java() {
  command -v java >/dev/null || die "java not found: install a JDK 17 (Debian: apt-get install openjdk-17-jdk-headless)"
  command -v mvn >/dev/null || die "mvn not found: install Maven (Debian: apt-get install maven)"
}

# fetch NAME: resolve testenv/NAME/pom.xml into $data/NAME.classpath.
fetch_one() {
  local name=$1 cp=$data/$1.classpath
  if [ -s "$cp" ] && [ "$cp" -nt "$here/$name/pom.xml" ] && all_jars_exist "$cp"; then return 0; fi
  log "resolving $name jars from Maven Central (first time can take a few minutes)"
  local t0=$SECONDS
  if ! mvn -B -q -f "$here/$name/pom.xml" dependency:build-classpath -Dmdep.outputFile="$cp.tmp" \
      >"$data/$name-fetch.log" 2>&1; then
    tail -n 30 "$data/$name-fetch.log" >&2
    die "could not resolve the $name jars (full log: $data/$name-fetch.log)"
  fi
  mv "$cp.tmp" "$cp"
  log "$name jars resolved in $((SECONDS - t0)) s"
}

all_jars_exist() {
  local jar
  while IFS= read -r jar; do [ -f "$jar" ] || return 1; done < <(tr ':' '\n' <"$1")
}

is_running() { # is_running NAME: the pid file names a live process
  local pid
  pid=$(cat "$data/$1.pid" 2>/dev/null) || return 1
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null
}

# probe NAME: one readiness check through the project's own Go probe (a real Metadata request for
# Kafka; for HBase the meta region's server, found through ZooKeeper, must answer an RPC on hbase:meta).
probe_bin=$data/bin/probe
build_probe() {
  mkdir -p "$data/bin"
  (cd "$root" && go build -o "$probe_bin" ./testenv/probe) || die "could not build testenv/probe"
}
probe() {
  case $1 in
    kafka) "$probe_bin" -kafka "127.0.0.1:$kafka_port" ;;
    hbase) "$probe_bin" -zookeeper "127.0.0.1:$zk_port" ;;
  esac
}

wait_ready() { # wait_ready NAME LOGFILE
  local name=$1 logf=$2 t0=$SECONDS out
  while :; do
    if out=$(probe "$name" 2>&1); then
      log "$name ready after $((SECONDS - t0)) s: $out"
      return 0
    fi
    if ! is_running "$name"; then
      tail -n 40 "$logf" >&2 || true
      die "$name exited before it was ready (log: $logf)"
    fi
    if (( SECONDS - t0 > ready_timeout )); then
      tail -n 40 "$logf" >&2 || true
      die "$name not ready after ${ready_timeout} s: $out (log: $logf)"
    fi
    sleep 1
  done
}

port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

start_kafka() {
  local dir=$data/kafka logf=$data/kafka/kafka.log
  if is_running kafka; then log "kafka already running (pid $(cat "$data/kafka.pid"))"; return 0; fi
  port_busy "$kafka_port" && die "port $kafka_port is taken by another process: set KAFKA_PORT"
  fetch_one kafka
  mkdir -p "$dir/logs"
  cat >"$dir/server.properties" <<EOF
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$kafka_ctl_port
listeners=PLAINTEXT://127.0.0.1:$kafka_port,CONTROLLER://127.0.0.1:$kafka_ctl_port
advertised.listeners=PLAINTEXT://127.0.0.1:$kafka_port
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$dir/data
num.partitions=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=true
log.cleaner.backoff.ms=1000
EOF
  cat >"$dir/log4j2.properties" <<EOF
rootLogger.level=INFO
rootLogger.appenderRef.f.ref=F
appender.f.type=File
appender.f.name=F
appender.f.fileName=$logf
appender.f.layout.type=PatternLayout
appender.f.layout.pattern=%d{ISO8601} %-5p [%t] %c{1}: %m%n
logger.kafka.name=kafka
logger.kafka.level=INFO
logger.state.name=state.change.logger
logger.state.level=WARN
EOF
  local cp
  cp=$(cat "$data/kafka.classpath")
  if [ ! -f "$dir/data/meta.properties" ]; then
    # A fixed cluster id keeps restarts of the same data folder consistent.
    java -cp "$cp" -Dlog4j2.configurationFile="$dir/log4j2.properties" kafka.tools.StorageTool format \
      -t abacusTestenvKafka0001 -c "$dir/server.properties" >"$dir/format.log" 2>&1 \
      || { cat "$dir/format.log" >&2; die "kafka storage format failed"; }
  fi
  log "starting kafka on 127.0.0.1:$kafka_port"
  nohup java -Xms256m -Xmx768m -XX:+UseG1GC -Djava.awt.headless=true \
    -Dlog4j2.configurationFile="$dir/log4j2.properties" \
    -cp "$cp" kafka.Kafka "$dir/server.properties" >"$dir/stdout.log" 2>&1 </dev/null &
  echo $! >"$data/kafka.pid"
  wait_ready kafka "$logf"
}

hbase_java_opts=(
  -Dorg.apache.hbase.thirdparty.io.netty.tryReflectionSetAccessible=true
  --add-modules jdk.unsupported
  --add-opens java.base/java.io=ALL-UNNAMED --add-opens java.base/java.nio=ALL-UNNAMED
  --add-opens java.base/sun.nio.ch=ALL-UNNAMED --add-opens java.base/java.lang=ALL-UNNAMED
  --add-opens java.base/jdk.internal.ref=ALL-UNNAMED --add-opens java.base/java.lang.reflect=ALL-UNNAMED
  --add-opens java.base/java.util=ALL-UNNAMED --add-opens java.base/java.util.concurrent=ALL-UNNAMED
  --add-exports java.base/jdk.internal.misc=ALL-UNNAMED
  --add-exports java.security.jgss/sun.security.krb5=ALL-UNNAMED
  --add-exports java.base/sun.net.dns=ALL-UNNAMED --add-exports java.base/sun.net.util=ALL-UNNAMED
)

start_hbase() {
  local dir=$data/hbase logf=$data/hbase/hbase.log
  if is_running hbase; then log "hbase already running (pid $(cat "$data/hbase.pid"))"; return 0; fi
  for p in "$zk_port" "$master_port" "$rs_port"; do
    port_busy "$p" && die "port $p is taken by another process: set HBASE_ZK_PORT/HBASE_MASTER_PORT/HBASE_RS_PORT"
  done
  fetch_one hbase
  mkdir -p "$dir/conf" "$dir/tmp"
  prop() { printf '  <property><name>%s</name><value>%s</value></property>\n' "$1" "$2"; }
  {
    echo '<?xml version="1.0"?>'
    echo '<configuration>'
    prop hbase.cluster.distributed false
    prop hbase.rootdir "file://$dir/root"
    prop hbase.zookeeper.property.dataDir "$dir/zk"
    prop hbase.tmp.dir "$dir/tmp"
    prop hbase.unsafe.stream.capability.enforce false
    prop hbase.zookeeper.quorum 127.0.0.1
    prop hbase.zookeeper.property.clientPort "$zk_port"
    prop hbase.master.port "$master_port"
    prop hbase.regionserver.port "$rs_port"
    prop hbase.master.info.port -1
    prop hbase.regionserver.info.port -1
    prop hbase.master.hostname 127.0.0.1
    prop hbase.unsafe.regionserver.hostname 127.0.0.1
    prop hbase.regionserver.hostname 127.0.0.1
    # Small heap on a 2-core machine: fewer handler threads, smaller caches.
    prop hbase.regionserver.handler.count 16
    prop hbase.client.retries.number 5
    prop hbase.master.wait.on.regionservers.mintostart 1
    prop hbase.balancer.period 3600000
    prop hbase.normalizer.period 3600000
    prop hbase.procedure.store.wal.use.hsync false
    # A 20 s scanner lease (60 s by default) lets hbase.TestScannerSurvivesLeaseExpiry run in every
    # test run; abacus's scans never idle that long.
    prop hbase.client.scanner.timeout.period 20000
    echo '</configuration>'
  } >"$dir/conf/hbase-site.xml"
  cat >"$dir/conf/log4j2.properties" <<EOF
rootLogger.level=INFO
rootLogger.appenderRef.f.ref=F
appender.f.type=File
appender.f.name=F
appender.f.fileName=$logf
appender.f.layout.type=PatternLayout
appender.f.layout.pattern=%d{ISO8601} %-5p [%t] %c{1}: %m%n
logger.zk.name=org.apache.zookeeper
logger.zk.level=WARN
logger.hadoop.name=org.apache.hadoop.hbase.shaded
logger.hadoop.level=WARN
logger.hdfs.name=org.apache.hadoop.hdfs
logger.hdfs.level=WARN
EOF
  log "starting hbase (zookeeper 127.0.0.1:$zk_port, master :$master_port, region server :$rs_port)"
  nohup java -Xms512m -Xmx1g -XX:+UseG1GC -Djava.awt.headless=true -Djava.net.preferIPv4Stack=true \
    "${hbase_java_opts[@]}" \
    -Dlog4j2.configurationFile="$dir/conf/log4j2.properties" \
    -Dhbase.log.dir="$dir" -Dhbase.home.dir="$dir" \
    -cp "$dir/conf:$(cat "$data/hbase.classpath")" \
    org.apache.hadoop.hbase.master.HMaster start >"$dir/stdout.log" 2>&1 </dev/null &
  echo $! >"$data/hbase.pid"
  wait_ready hbase "$logf"
}

stop_one() { # stop_one NAME: TERM, then KILL after 30 s
  local name=$1 pid i
  if ! is_running "$name"; then rm -f "$data/$name.pid"; return 0; fi
  pid=$(cat "$data/$name.pid")
  log "stopping $name (pid $pid)"
  kill "$pid" 2>/dev/null || true
  for ((i = 0; i < 60; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
  if kill -0 "$pid" 2>/dev/null; then log "$name did not stop in 30 s: killing"; kill -9 "$pid" 2>/dev/null || true; fi
  rm -f "$data/$name.pid"
}

status() {
  local name rss
  for name in $services; do
    if is_running "$name"; then
      rss=$(awk '/VmRSS/ {printf "%d MiB", $2/1024}' "/proc/$(cat "$data/$name.pid")/status" 2>/dev/null || echo "?")
      case $name in
        kafka) echo "kafka: running (pid $(cat "$data/kafka.pid"), rss $rss) on 127.0.0.1:$kafka_port; log $data/kafka/kafka.log" ;;
        hbase) echo "hbase: running (pid $(cat "$data/hbase.pid"), rss $rss) zookeeper 127.0.0.1:$zk_port, master 127.0.0.1:$master_port, region server 127.0.0.1:$rs_port; log $data/hbase/hbase.log" ;;
      esac
    else
      echo "$name: stopped"
    fi
  done
}

print_env() {
  case " $services " in *" kafka "*) echo "export ABACUS_KAFKA_BROKERS=127.0.0.1:$kafka_port" ;; esac
  case " $services " in *" hbase "*) echo "export ABACUS_HBASE_ZK=127.0.0.1:$zk_port" ;; esac
}

cmd=${1:-}
case $cmd in
  fetch) need_java; for s in $services; do fetch_one "$s"; done ;;
  start)
    need_java
    build_probe
    for s in $services; do "start_$s"; done
    status
    ;;
  stop) for s in $services; do stop_one "$s"; done ;;
  status) status ;;
  env) print_env ;;
  clean) for s in $services; do stop_one "$s"; done; rm -rf "${data:?}/kafka" "${data:?}/hbase" ;;
  *) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
