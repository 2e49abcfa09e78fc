#!/usr/bin/env bash
# Runs a real single-node Kafka (KRaft) broker (PLAINTEXT and SASL_SSL listeners), or a real
# three-broker KRaft cluster, and a real standalone HBase on loopback, for tests and development,
# with no Docker: the jars come from Maven Central through testenv/{kafka,hbase}/pom.xml.
#
#   testenv/services.sh fetch    resolve the jars (once; Maven caches them in ~/.m2)
#   testenv/services.sh start    fetch, start whatever is not running, wait until both really answer
#   testenv/services.sh stop     stop both (data is kept; `clean` removes it)
#   testenv/services.sh status   say what runs, where it listens and where its logs are
#   testenv/services.sh env      print the environment the Go tests read (eval "$(... env)")
#   testenv/services.sh clean    stop and remove the data (of the cluster, with KAFKA_BROKERS=3)
#   testenv/services.sh kill-broker N    SIGKILL Kafka broker N (1 for the single broker)
#   testenv/services.sh start-broker N   start broker N again and wait until it answers
#   testenv/services.sh kill-hbase       SIGKILL HBase (master, region server and ZooKeeper: one JVM),
#                                        as a crash would; `start` brings it back through WAL recovery
#   With HBASE_REGIONSERVERS=3 (the HBase cluster):
#   testenv/services.sh kill-rs N        SIGKILL region server N; stop-rs N: stop it cleanly
#   testenv/services.sh start-rs N       start region server N again and wait until it registers
#   testenv/services.sh pause-rs N       SIGSTOP region server N; resume-rs N: SIGCONT it
#   testenv/services.sh regions [TABLE...]   where hbase:meta and each region of the tables is open
#   testenv/services.sh move-region TABLE ENCODED_REGION N   move a region to region server N
#   testenv/services.sh balance          run the master's balancer once
#
# Settings (environment):
#   ABACUS_TESTENV_DIR   data, logs and pid files (default: testenv/.data, git-ignored)
#   KAFKA_PORT           broker listener port (default 9092); KAFKA_CONTROLLER_PORT (default 9093)
#   KAFKA_SASL_PORT      SASL_SSL listener of the single broker (default 9094; 0: none), with
#                        PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 and certificates made at start
#   KAFKA_BROKERS        1 (default): the single broker above; 3: a KRaft cluster of three combined
#                        broker+controller nodes (replication 3, min.insync.replicas 2) instead,
#                        under <data>/kafka-cluster, PLAINTEXT only
#   KAFKA_CLUSTER_PORT   first port of the cluster (default 19192): node i serves clients on
#                        PORT+i-1 and its controller on PORT+KAFKA_BROKERS+i-1
#   KAFKA_CLUSTER_HEAP   -Xmx of each cluster node (default 384m)
#   HBASE_ZK_PORT        embedded ZooKeeper client port (default 2181)
#   HBASE_MASTER_PORT    master RPC port (default 16000); HBASE_RS_PORT region server RPC (default 16020)
#   HBASE_HEAP           -Xmx of the HBase JVM (default 1g; the failure suite's long form uses 4g)
#   HBASE_REGIONSERVERS  1 (default): the standalone HBase above; 3 (2..9): a distributed cluster
#                        instead, under <data>/hbase-cluster: a ZooKeeper, an HMaster and N
#                        HRegionServers, each its own JVM, rootdir on the local filesystem
#   HBASE_CLUSTER_PORT   first port of the cluster (default 31100): ZooKeeper PORT, master PORT+1,
#                        region server i PORT+10+i
#   HBASE_CLUSTER_HEAP   -Xmx of each cluster JVM (default 384m)
#   HBASE_CLUSTER_ZK_SESSION_MS  the cluster's zookeeper.session.timeout (default 30000): how long a
#                        dead region server goes unnoticed; a pause longer than it makes a zombie
#                        (see "What the local-filesystem rootdir weakens" below)
#   SERVICES             which to run: "kafka hbase" (default), "kafka" or "hbase"; the secure mode is
#                        "kdc secure-hbase" (see below)
#   READY_TIMEOUT        seconds to wait for each service (default 240)
#
# Secure mode (SERVICES="kdc secure-hbase"): an MIT Kerberos KDC from Debian's packages (installed
# with apt-get when missing) for realm ABACUS.TEST on loopback, and a second standalone HBase that
# requires Kerberos (SASL GSSAPI) from every client, its embedded ZooKeeper authenticating HBase by
# SASL too. Both run beside the plain services, on their own ports, under $ABACUS_TESTENV_DIR/secure:
#   KDC_PORT                   the KDC, UDP and TCP (default 28088)
#   SECURE_HBASE_ZK_PORT       its ZooKeeper (default 22181); SECURE_HBASE_MASTER_PORT (default 26000),
#                              SECURE_HBASE_RS_PORT (default 26020)
#   SECURE_HBASE_PROTECTION    its hbase.rpc.protection (default "authentication,integrity,privacy":
#                              the client picks; a single level makes the server insist on it)
#   testenv/services.sh check-secure-java   proves the secure HBase with HBase's own Java client
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
data=${ABACUS_TESTENV_DIR:-$here/.data}
mkdir -p "$data"
data=$(cd "$data" && pwd)

# Every default port here, and those of the failure suite and the HBase cluster, is below 32768,
# where Linux's ephemeral range (net.ipv4.ip_local_port_range, 32768-60999 by default) begins: a
# listener inside that range can find its port taken by some outgoing connection's local port, and
# a start or restart then fails with "Address already in use" (seen: the HBase cluster's ZooKeeper
# on 36100 while Go modules downloaded). warn_ephemeral says so for ports set by hand.
kafka_port=${KAFKA_PORT:-9092}
kafka_ctl_port=${KAFKA_CONTROLLER_PORT:-9093}
zk_port=${HBASE_ZK_PORT:-2181}
master_port=${HBASE_MASTER_PORT:-16000}
rs_port=${HBASE_RS_PORT:-16020}
hbase_heap=${HBASE_HEAP:-1g}
services=${SERVICES:-kafka hbase}
kdc_port=${KDC_PORT:-28088}
shb_zk_port=${SECURE_HBASE_ZK_PORT:-22181}
shb_master_port=${SECURE_HBASE_MASTER_PORT:-26000}
shb_rs_port=${SECURE_HBASE_RS_PORT:-26020}
shb_protection=${SECURE_HBASE_PROTECTION:-authentication,integrity,privacy}
realm=ABACUS.TEST
secure=$data/secure
kdc_dir=$secure/kdc
# Debian keeps krb5kdc, kdb5_util and kadmin.local in /usr/sbin, which a non-root PATH may lack.
PATH=$PATH:/usr/sbin
ready_timeout=${READY_TIMEOUT:-240}

log() { printf '[testenv] %s\n' "$*" >&2; }
die() { printf '[testenv] error: %s\n' "$*" >&2; exit 1; }

need_java() {
  command -v java >/dev/null || die "java not found: install a JDK 17 (Debian: apt-get install openjdk-17-jdk-headless)"
  command -v mvn >/dev/null || die "mvn not found: install Maven (Debian: apt-get install maven)"
}

# fetch NAME: resolve testenv/NAME/pom.xml into $cp_dir/NAME.classpath. Every data folder shares
# the resolved classpaths (testenv/.data), so the services of the test command's stages, each in a
# folder of its own, resolve the jars once.
cp_dir=$here/.data
fetch_one() {
  local name=$1 cp=$cp_dir/$1.classpath
  mkdir -p "$cp_dir"
  if [ -s "$cp" ] && [ "$cp" -nt "$here/$name/pom.xml" ] && all_jars_exist "$cp"; then return 0; fi
  log "resolving $name jars from Maven Central (first time can take a few minutes)"
  local t0=$SECONDS
  if ! mvn -B -q -f "$here/$name/pom.xml" dependency:build-classpath -Dmdep.outputFile="$cp.tmp" \
      >"$cp_dir/$name-fetch.log" 2>&1; then
    tail -n 30 "$cp_dir/$name-fetch.log" >&2
    die "could not resolve the $name jars (full log: $cp_dir/$name-fetch.log)"
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
    kafka)
      if [ -n "$kafka_sasl_port" ]; then
        # Also: the SCRAM users exist (added through the Admin API to a folder formatted without
        # them), and each mechanism logs in over TLS on the SASL_SSL listener.
        sasl_env "$probe_bin" -kafka "127.0.0.1:$kafka_port" -sasl "127.0.0.1:$kafka_sasl_port" -ca "$tls_dir/ca.pem"
      else
        "$probe_bin" -kafka "127.0.0.1:$kafka_port"
      fi
      ;;
    kafka-cluster/node-*) "$probe_bin" -kafka "127.0.0.1:$(node_port "${1##*-}")" -brokers "$kafka_brokers" ;;
    hbase) "$probe_bin" -zookeeper "127.0.0.1:$zk_port" ;;
    hbase-cluster/master) "$probe_bin" -zookeeper "127.0.0.1:$(hbc_zk_port)" ;;
    # A real AS exchange: the KDC answers and the client keytab is good.
    kdc) KRB5_CONFIG=$kdc_dir/krb5.conf KRB5CCNAME=FILE:$kdc_dir/probe.ccache \
           kinit -k -t "$kdc_dir/client.keytab" "client@$realm" 2>&1 ;;
    secure-hbase) "$probe_bin" -zookeeper "127.0.0.1:$shb_zk_port" -krb5conf "$kdc_dir/krb5.conf" \
           -principal "client@$realm" -keytab "$kdc_dir/client.keytab" -server-principal "hbase/_HOST@$realm" ;;
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
    sleep 0.5 # a probe is a ~70 ms Go process; finer polling shortens every start
  done
}

# warn_ephemeral warns about configured ports inside the kernel's ephemeral port range.
warn_ephemeral() {
  local lo hi p
  read -r lo hi </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || return 0
  for p in $kafka_port $kafka_ctl_port $zk_port $master_port $rs_port $kafka_sasl_port $cluster_port $hbc_port; do
    if [ "$p" -ge "$lo" ] && [ "$p" -le "$hi" ]; then
      echo "[testenv] warning: port $p is in the ephemeral range $lo-$hi: an outgoing connection may hold it and a start fail with \"Address already in use\"" >&2
    fi
  done
}

port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# SASL users of the single broker's SASL_SSL listener: one per mechanism, so a test can also show
# that a user of one mechanism cannot log in with another. Test credentials, printed by `env`.
sasl_plain_user=abacus-plain sasl_plain_password=testenv-plain-secret
sasl_scram256_user=abacus-scram256 sasl_scram256_password=testenv-scram256-secret
sasl_scram512_user=abacus-scram512 sasl_scram512_password=testenv-scram512-secret
kafka_sasl_port=${KAFKA_SASL_PORT:-9094}
[ "$kafka_sasl_port" = 0 ] && kafka_sasl_port=
tls_dir=$data/kafka/tls

kafka_brokers=${KAFKA_BROKERS:-1}
[[ $kafka_brokers =~ ^[1-9]$ ]] || die "KAFKA_BROKERS=$kafka_brokers: say 1 (the single broker) or 3 (a cluster; 2..9 work too)"
cluster_port=${KAFKA_CLUSTER_PORT:-19192}
cluster_heap=${KAFKA_CLUSTER_HEAP:-384m}
hbase_rs=${HBASE_REGIONSERVERS:-1}
[[ $hbase_rs =~ ^[1-9]$ ]] || die "HBASE_REGIONSERVERS=$hbase_rs: say 1 (the standalone HBase) or 3 (a cluster; 2..9 work too)"
hbc_port=${HBASE_CLUSTER_PORT:-31100}
hbc_heap=${HBASE_CLUSTER_HEAP:-384m}
hbc_session_ms=${HBASE_CLUSTER_ZK_SESSION_MS:-30000}

# Broker N's name (its pid file is $data/NAME.pid), folder, client and controller ports.
node_name() { if [ "$kafka_brokers" = 1 ]; then echo kafka; else echo "kafka-cluster/node-$1"; fi; }
node_dir() { echo "$data/$(node_name "$1")"; }
node_port() { if [ "$kafka_brokers" = 1 ]; then echo "$kafka_port"; else echo $((cluster_port + $1 - 1)); fi; }
node_ctl_port() { if [ "$kafka_brokers" = 1 ]; then echo "$kafka_ctl_port"; else echo $((cluster_port + kafka_brokers + $1 - 1)); fi; }
broker_list() {
  local i out=
  for ((i = 1; i <= kafka_brokers; i++)); do out+="${out:+,}127.0.0.1:$(node_port "$i")"; done
  echo "$out"
}

# make_certs: a CA, a broker certificate for 127.0.0.1 and localhost signed by it (with its key, as
# the PEM keystore Kafka reads), and a second CA that signed nothing, for tests that must be refused.
# Made once per data folder; made again when missing or expiring within a day.
make_certs() {
  local d=$tls_dir
  if [ -s "$d/broker.pem" ] && [ -s "$d/untrusted-ca.pem" ] \
      && openssl x509 -checkend 86400 -noout -in "$d/broker-cert.pem" >/dev/null 2>&1; then
    return 0
  fi
  command -v openssl >/dev/null || die "openssl not found (Debian: apt-get install openssl)"
  log "making test certificates in $d"
  rm -rf "$d" && mkdir -p "$d"
  local ec=(-newkey ec -pkeyopt ec_paramgen_curve:P-256 -noenc)
  {
    openssl req -x509 "${ec[@]}" -keyout "$d/ca.key" -out "$d/ca.pem" -days 3650 -subj "/CN=abacus testenv CA"
    openssl req "${ec[@]}" -keyout "$d/broker.key" -out "$d/broker.csr" -subj "/CN=localhost"
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n' >"$d/broker.ext"
    openssl x509 -req -in "$d/broker.csr" -CA "$d/ca.pem" -CAkey "$d/ca.key" -CAcreateserial \
      -days 825 -extfile "$d/broker.ext" -out "$d/broker-cert.pem"
    openssl req -x509 "${ec[@]}" -keyout "$d/untrusted-ca.key" -out "$d/untrusted-ca.pem" -days 3650 \
      -subj "/CN=abacus testenv untrusted CA"
  } >"$d/openssl.log" 2>&1 || { cat "$d/openssl.log" >&2; die "could not make test certificates"; }
  # Kafka's PEM keystore: the (unencrypted PKCS#8) key, then the certificate chain.
  cat "$d/broker.key" "$d/broker-cert.pem" "$d/ca.pem" >"$d/broker.pem"
}

# write_kafka_config N: server.properties and log4j2.properties of broker N.
write_kafka_config() {
  local n=$1 dir logf port ctl
  dir=$(node_dir "$n"); logf=$dir/kafka.log; port=$(node_port "$n"); ctl=$(node_ctl_port "$n")
  mkdir -p "$dir/logs"
  if [ "$kafka_brokers" = 1 ]; then
    local listeners="PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$ctl"
    local advertised="PLAINTEXT://127.0.0.1:$port" map="CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT"
    if [ -n "$kafka_sasl_port" ]; then
      listeners+=",SASL_SSL://127.0.0.1:$kafka_sasl_port"
      advertised+=",SASL_SSL://127.0.0.1:$kafka_sasl_port"
      map+=",SASL_SSL:SASL_SSL"
    fi
    cat >"$dir/server.properties" <<EOF
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$ctl
listeners=$listeners
advertised.listeners=$advertised
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=$map
log.dirs=$dir/data
num.partitions=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=true
log.cleaner.backoff.ms=1000
# Tests write records stamped with fixed dates (2023, March 2026): with the default seven days of
# retention by time, every five minutes the broker deleted them in the middle of tests (a
# restarted consumer then found its offset below the log start and went to the end). Time never
# deletes test data; a topic's own retention.ms still does.
log.retention.ms=-1
EOF
    if [ -n "$kafka_sasl_port" ]; then
      # Only the SASL_SSL listener authenticates; PLAINTEXT and the controller stay open, as the
      # other tests expect. PLAIN users live in the JAAS line, SCRAM users in the metadata log.
      cat >>"$dir/server.properties" <<EOF
listener.name.sasl_ssl.sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512
listener.name.sasl_ssl.ssl.keystore.type=PEM
listener.name.sasl_ssl.ssl.keystore.location=$tls_dir/broker.pem
listener.name.sasl_ssl.ssl.client.auth=none
listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_$sasl_plain_user="$sasl_plain_password";
listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
EOF
    fi
  else
    local voters= i rf=3 isr
    for ((i = 1; i <= kafka_brokers; i++)); do voters+="${voters:+,}$i@127.0.0.1:$(node_ctl_port "$i")"; done
    ((kafka_brokers < 3)) && rf=$kafka_brokers
    isr=$((rf > 1 ? rf - 1 : 1))
    cat >"$dir/server.properties" <<EOF
process.roles=broker,controller
node.id=$n
controller.quorum.voters=$voters
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$ctl
advertised.listeners=PLAINTEXT://127.0.0.1:$port
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$dir/data
num.partitions=1
default.replication.factor=$rf
min.insync.replicas=$isr
offsets.topic.replication.factor=$rf
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=$rf
transaction.state.log.min.isr=$isr
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=true
log.cleaner.backoff.ms=1000
# Tests write records stamped with fixed dates (2023, March 2026): with the default seven days of
# retention by time, every five minutes the broker deleted them in the middle of tests (a
# restarted consumer then found its offset below the log start and went to the end). Time never
# deletes test data; a topic's own retention.ms still does.
log.retention.ms=-1
# Light nodes: three JVMs share two cores with the tests.
num.network.threads=2
num.io.threads=2
num.replica.fetchers=1
background.threads=2
log.cleaner.threads=1
EOF
  fi
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
}

# format_kafka N: format broker N's storage unless done already. A fixed cluster id keeps restarts
# of the same data folder consistent. The single broker's SCRAM users are written here; a folder
# formatted before they existed gets them from the probe (Admin API) instead.
format_kafka() {
  local n=$1 dir cp args=()
  dir=$(node_dir "$n")
  [ -f "$dir/data/meta.properties" ] && return 0
  cp=$(cat "$cp_dir/kafka.classpath")
  if [ "$kafka_brokers" = 1 ] && [ -n "$kafka_sasl_port" ]; then
    args=(-S "SCRAM-SHA-256=[name=$sasl_scram256_user,password=$sasl_scram256_password]"
      -S "SCRAM-SHA-512=[name=$sasl_scram512_user,password=$sasl_scram512_password]")
  fi
  java -Xshare:auto -XX:TieredStopAtLevel=1 -cp "$cp" -Dlog4j2.configurationFile="$dir/log4j2.properties" \
    kafka.tools.StorageTool format -t abacusTestenvKafka0001 -c "$dir/server.properties" "${args[@]}" \
    >"$dir/format.log" 2>&1 || { cat "$dir/format.log" >&2; die "kafka storage format of $(node_name "$n") failed"; }
}

# launch_kafka N: start broker N's JVM in the background (its config and storage exist).
launch_kafka() {
  local n=$1 dir heap=(-Xms256m -Xmx768m -XX:+UseG1GC)
  dir=$(node_dir "$n")
  # Cluster nodes: small heaps, the serial collector and C1 only, so three of them start quickly
  # and stay light on two cores; throughput is not what they are for.
  [ "$kafka_brokers" = 1 ] || heap=(-Xms128m "-Xmx$cluster_heap" -XX:+UseSerialGC -XX:TieredStopAtLevel=1)
  log "starting $(node_name "$n") on 127.0.0.1:$(node_port "$n")${kafka_sasl_port:+$([ "$kafka_brokers" = 1 ] && echo " (SASL_SSL 127.0.0.1:$kafka_sasl_port)")}"
  nohup java "${heap[@]}" -Djava.awt.headless=true \
    -Dlog4j2.configurationFile="$dir/log4j2.properties" \
    -cp "$(cat "$cp_dir/kafka.classpath")" kafka.Kafka "$dir/server.properties" >"$dir/stdout.log" 2>&1 </dev/null &
  echo $! >"$data/$(node_name "$n").pid"
}

start_kafka() {
  local i name
  for ((i = 1; i <= kafka_brokers; i++)); do
    name=$(node_name "$i")
    if is_running "$name"; then continue; fi
    port_busy "$(node_port "$i")" && die "port $(node_port "$i") ($name) is taken by another process: set KAFKA_PORT or KAFKA_CLUSTER_PORT"
  done
  if [ "$kafka_brokers" = 1 ] && [ -n "$kafka_sasl_port" ] && ! is_running kafka; then
    port_busy "$kafka_sasl_port" && die "port $kafka_sasl_port is taken by another process: set KAFKA_SASL_PORT (0: no SASL_SSL listener)"
    make_certs
  fi
  fetch_one kafka
  local pids=()
  for ((i = 1; i <= kafka_brokers; i++)); do
    is_running "$(node_name "$i")" && continue
    write_kafka_config "$i"
    format_kafka "$i" & pids+=($!)
  done
  for i in "${pids[@]}"; do wait "$i" || exit 1; done
  for ((i = 1; i <= kafka_brokers; i++)); do
    name=$(node_name "$i")
    if is_running "$name"; then log "$name already running (pid $(cat "$data/$name.pid"))"; continue; fi
    launch_kafka "$i"
  done
  for ((i = 1; i <= kafka_brokers; i++)); do wait_ready "$(node_name "$i")" "$(node_dir "$i")/kafka.log"; done
}

# kill_broker N: SIGKILL broker N, as a crash would, and wait until it is gone.
kill_broker() {
  local n=$1 name pid
  name=$(node_name "$n")
  is_running "$name" || die "$name is not running"
  pid=$(cat "$data/$name.pid")
  kill -9 "$pid"
  while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
  rm -f "$data/$name.pid"
  log "killed $name (pid $pid, SIGKILL)"
}

# start_broker N: start broker N again (after kill-broker or stop) and wait until it answers with
# every broker of the cluster in its metadata.
start_broker() {
  local n=$1 name
  name=$(node_name "$n")
  if is_running "$name"; then log "$name already running (pid $(cat "$data/$name.pid"))"; return 0; fi
  [ -f "$(node_dir "$n")/server.properties" ] || die "$name was never started here: run start first"
  port_busy "$(node_port "$n")" && die "port $(node_port "$n") is taken by another process"
  write_kafka_config "$n"
  launch_kafka "$n"
  wait_ready "$name" "$(node_dir "$n")/kafka.log"
}

# kill_hbase: SIGKILL the HBase JVM, as a crash would, and wait until it is gone. Edits it
# acknowledged live only in its WAL; the next start replays them (the master splits the dead
# server's WAL before reopening its regions).
kill_hbase() {
  local pid
  is_running hbase || die "hbase is not running"
  pid=$(cat "$data/hbase.pid")
  kill -9 "$pid"
  while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
  rm -f "$data/hbase.pid"
  log "killed hbase (pid $pid, SIGKILL)"
}

# The JVM options every HBase JVM here starts with, in a java @-file the compose image reads too.
hbase_java_opts=("@$here/hbase/jvm.options")

start_hbase() {
  local dir=$data/hbase logf=$data/hbase/hbase.log
  if ((hbase_rs > 1)); then start_hbase_cluster; return; fi
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
    # Standalone HBase gives its region server a 10 s ZooKeeper session: on a busy shared machine a
    # pause of the host longer than about 7 s expired it, and the region server aborted for good
    # (seen in the failure suite's long run). 30 s rides such pauses out; a SIGKILLed HBase then
    # waits up to that long, at its next start, for its dead region server's session to expire.
    prop zookeeper.session.timeout.localHBaseCluster 30000
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
  log "starting hbase (zookeeper 127.0.0.1:$zk_port, master :$master_port, region server :$rs_port, heap $hbase_heap)"
  nohup java -Xms512m "-Xmx$hbase_heap" -XX:+UseG1GC -Djava.awt.headless=true -Djava.net.preferIPv4Stack=true \
    "${hbase_java_opts[@]}" \
    -Dlog4j2.configurationFile="$dir/conf/log4j2.properties" \
    -Dhbase.log.dir="$dir" -Dhbase.home.dir="$dir" \
    -cp "$dir/conf:$(cat "$cp_dir/hbase.classpath")" \
    org.apache.hadoop.hbase.master.HMaster start >"$dir/stdout.log" 2>&1 </dev/null &
  echo $! >"$data/hbase.pid"
  wait_ready hbase "$logf"
}

# HBase cluster mode (HBASE_REGIONSERVERS=2..9): a ZooKeeper, one HMaster and N HRegionServers, each
# its own JVM, from the same jars as the standalone HBase, distributed (hbase.cluster.distributed=true)
# with the rootdir on the local filesystem, under <data>/hbase-cluster and on its own ports, so it
# runs beside the standalone HBase. Process names (pid files <data>/NAME.pid): hbase-cluster/zk,
# hbase-cluster/master, hbase-cluster/rs-N.
# What the local-filesystem rootdir weakens: there is no HDFS, so a dead region server's WAL stays
# readable on the shared local disk and nothing tests HDFS lease recovery, pipelines or fencing; a
# WAL write is not replicated, and hsync is off (hbase.unsafe.stream.capability.enforce=false).
# Seen working with HBase 2.6.4: after a SIGKILL the master's ServerCrashProcedure splits the dead
# server's WAL into recovered.edits (another region server does the split) and the regions' new
# servers replay them; acknowledged writes that were only in that WAL read back.
# Not fenced without HDFS: a region server paused (SIGSTOP) past its ZooKeeper session is declared
# dead and its regions reopen elsewhere, but when it resumes it still appends to its WAL and
# acknowledges the requests queued on its sockets before it learns it is dead; with HDFS the WAL
# split's lease recovery makes those appends fail, here they succeed and the writes are lost
# (seen: 2,386 facts of a 20 s pause with a 10 s session). Hence the 30 s session, longer than the
# 20 s pause of TestHBaseClusterRegionServerPaused; production's default is 90 s.
hbc_dir=$data/hbase-cluster
hbc_zk_port() { echo "$hbc_port"; }
hbc_master_port() { echo $((hbc_port + 1)); }
hbc_rs_port() { echo $((hbc_port + 10 + $1)); }

# hbc_site DIR EXTRA...: hbase-site.xml of one cluster process (EXTRA: name value pairs).
hbc_site() {
  local f=$1/hbase-site.xml
  shift
  prop() { printf '  <property><name>%s</name><value>%s</value></property>\n' "$1" "$2"; }
  {
    echo '<?xml version="1.0"?>'
    echo '<configuration>'
    prop hbase.cluster.distributed true
    prop hbase.rootdir "file://$hbc_dir/root"
    prop hbase.unsafe.stream.capability.enforce false
    prop hbase.zookeeper.quorum 127.0.0.1
    prop hbase.zookeeper.property.clientPort "$(hbc_zk_port)"
    prop zookeeper.znode.parent /hbase
    prop hbase.master.port "$(hbc_master_port)"
    prop hbase.master.info.port -1
    prop hbase.regionserver.info.port -1
    prop hbase.master.hostname 127.0.0.1
    prop hbase.unsafe.regionserver.hostname 127.0.0.1
    prop hbase.regionserver.hostname 127.0.0.1
    prop hbase.regionserver.handler.count 8
    prop hbase.client.retries.number 5
    prop hbase.master.wait.on.regionservers.mintostart 1
    prop hbase.balancer.period 3600000
    prop hbase.normalizer.period 3600000
    prop hbase.procedure.store.wal.use.hsync false
    # How soon the master notices a dead region server: its ZooKeeper session must expire first.
    prop zookeeper.session.timeout "$hbc_session_ms"
    while (($# >= 2)); do prop "$1" "$2"; shift 2; done
    echo '</configuration>'
  } >"$f"
}

hbc_log4j() { # hbc_log4j DIR LOGFILE
  cat >"$1/log4j2.properties" <<EOF
rootLogger.level=INFO
rootLogger.appenderRef.f.ref=F
appender.f.type=File
appender.f.name=F
appender.f.fileName=$2
appender.f.layout.type=PatternLayout
appender.f.layout.pattern=%d{ISO8601} %-5p [%t] %c{1}: %m%n
logger.zk.name=org.apache.zookeeper
logger.zk.level=WARN
logger.hadoop.name=org.apache.hadoop.hbase.shaded
logger.hadoop.level=WARN
logger.hdfs.name=org.apache.hadoop.hdfs
logger.hdfs.level=WARN
EOF
}

# hbc_launch NAME MAINCLASS ARGS...: start one cluster JVM with conf dir <hbc_dir>/NAME-less-prefix/conf.
hbc_launch() {
  local name=$1 dir=$data/$1 main=$2
  shift 2
  nohup java -Xms64m "-Xmx$hbc_heap" -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Djava.awt.headless=true \
    -Djava.net.preferIPv4Stack=true "${hbase_java_opts[@]}" \
    -Dlog4j2.configurationFile="$dir/conf/log4j2.properties" \
    -Dhbase.log.dir="$dir" -Dhbase.home.dir="$dir" -Dzookeeper.jmx.log4j.disable=true \
    -cp "$dir/conf:$(cat "$cp_dir/hbase.classpath")" "$main" "$@" >"$dir/stdout.log" 2>&1 </dev/null &
  echo $! >"$data/$name.pid"
}

# hbc_start_zk: ZooKeeper's own standalone server (the zookeeper jar is on HBase's classpath).
hbc_start_zk() {
  local name=hbase-cluster/zk dir=$hbc_dir/zk
  if is_running "$name"; then log "$name already running (pid $(cat "$data/$name.pid"))"; return 0; fi
  port_busy "$(hbc_zk_port)" && die "port $(hbc_zk_port) is taken by another process: set HBASE_CLUSTER_PORT"
  mkdir -p "$dir/conf" "$dir/data"
  cat >"$dir/conf/zoo.cfg" <<EOF
tickTime=1000
dataDir=$dir/data
clientPort=$(hbc_zk_port)
clientPortAddress=127.0.0.1
maxSessionTimeout=60000
maxClientCnxns=0
admin.enableServer=false
4lw.commands.whitelist=ruok,stat,srvr,mntr,cons
EOF
  hbc_log4j "$dir/conf" "$dir/zk.log"
  sed -i 's/^logger.zk.level=WARN/logger.zk.level=INFO/' "$dir/conf/log4j2.properties"
  log "starting $name on 127.0.0.1:$(hbc_zk_port)"
  hbc_launch "$name" org.apache.zookeeper.server.ZooKeeperServerMain "$dir/conf/zoo.cfg"
  local t0=$SECONDS
  until port_busy "$(hbc_zk_port)"; do
    is_running "$name" || { tail -n 30 "$dir/stdout.log" "$dir/zk.log" >&2 || true; die "$name exited"; }
    ((SECONDS - t0 > ready_timeout)) && die "$name not listening after $ready_timeout s"
    sleep 0.2
  done
  log "$name ready after $((SECONDS - t0)) s"
}

hbc_start_master() {
  local name=hbase-cluster/master dir=$hbc_dir/master
  if is_running "$name"; then log "$name already running (pid $(cat "$data/$name.pid"))"; return 0; fi
  port_busy "$(hbc_master_port)" && die "port $(hbc_master_port) is taken by another process: set HBASE_CLUSTER_PORT"
  mkdir -p "$dir/conf" "$dir/tmp"
  hbc_site "$dir/conf" hbase.tmp.dir "$dir/tmp"
  hbc_log4j "$dir/conf" "$dir/master.log"
  log "starting $name on 127.0.0.1:$(hbc_master_port) (heap $hbc_heap)"
  hbc_launch "$name" org.apache.hadoop.hbase.master.HMaster start
}

# hbc_launch_rs N: start region server N's JVM in the background.
hbc_launch_rs() {
  local n=$1 name=hbase-cluster/rs-$1 dir=$hbc_dir/rs-$1
  port_busy "$(hbc_rs_port "$n")" && die "port $(hbc_rs_port "$n") ($name) is taken by another process: set HBASE_CLUSTER_PORT"
  mkdir -p "$dir/conf" "$dir/tmp"
  hbc_site "$dir/conf" hbase.tmp.dir "$dir/tmp" hbase.regionserver.port "$(hbc_rs_port "$n")"
  hbc_log4j "$dir/conf" "$dir/rs.log"
  log "starting $name on 127.0.0.1:$(hbc_rs_port "$n") (heap $hbc_heap)"
  hbc_launch "$name" org.apache.hadoop.hbase.regionserver.HRegionServer start
}

# hbc_wait_rs N: region server N registered with the master (its log says so) and is still alive.
hbc_wait_rs() {
  local n=$1 name=hbase-cluster/rs-$1 logf=$hbc_dir/rs-$1/rs.log t0=$SECONDS
  until grep -q 'Serving as 127.0.0.1,' "$logf" 2>/dev/null; do
    is_running "$name" || { tail -n 40 "$logf" "$hbc_dir/rs-$n/stdout.log" >&2 || true; die "$name exited before it was ready (log: $logf)"; }
    ((SECONDS - t0 > ready_timeout)) && { tail -n 40 "$logf" >&2 || true; die "$name not ready after $ready_timeout s (log: $logf)"; }
    sleep 0.5
  done
  log "$name registered after $((SECONDS - t0)) s"
}

start_hbase_cluster() {
  local i
  fetch_one hbase
  hbc_start_zk
  hbc_start_master
  for ((i = 1; i <= hbase_rs; i++)); do
    if is_running "hbase-cluster/rs-$i"; then log "hbase-cluster/rs-$i already running (pid $(cat "$data/hbase-cluster/rs-$i.pid"))"; continue; fi
    rm -f "$hbc_dir/rs-$i/rs.log"
    hbc_launch_rs "$i"
  done
  for ((i = 1; i <= hbase_rs; i++)); do hbc_wait_rs "$i"; done
  wait_ready hbase-cluster/master "$hbc_dir/master/master.log"
}

hbc_names() { # every cluster process, ZooKeeper last
  local i
  echo hbase-cluster/master
  for ((i = 1; i <= hbase_rs; i++)); do echo "hbase-cluster/rs-$i"; done
  echo hbase-cluster/zk
}

stop_hbase_cluster() {
  local i rs=()
  # Region servers and master together (a region server waits for its master to close its
  # regions), then ZooKeeper, which they need to shut down cleanly.
  for ((i = 1; i <= hbase_rs; i++)); do
    rs+=("hbase-cluster/rs-$i")
    # A paused (SIGSTOPped) one would never see its SIGTERM.
    is_running "hbase-cluster/rs-$i" && kill -CONT "$(cat "$data/hbase-cluster/rs-$i.pid")"
  done
  stop_one hbase-cluster/master "${rs[@]}"
  stop_one hbase-cluster/zk
}

status_hbase_cluster() {
  local name pid port
  while IFS= read -r name; do
    case $name in
      */zk) port=$(hbc_zk_port) ;;
      */master) port=$(hbc_master_port) ;;
      *) port=$(hbc_rs_port "${name##*-}") ;;
    esac
    if is_running "$name"; then
      pid=$(cat "$data/$name.pid")
      if grep -q '^State:.*T' "/proc/$pid/status" 2>/dev/null; then
        echo "$name: PAUSED (SIGSTOP; pid $pid, rss $(rss_of "$pid")) on 127.0.0.1:$port"
      else
        echo "$name: running (pid $pid, rss $(rss_of "$pid")) on 127.0.0.1:$port; log $(ls "$data/$name"/*.log 2>/dev/null | grep -v stdout | head -n 1)"
      fi
    else
      echo "$name: stopped (port $port)"
    fi
  done < <(hbc_names)
  # Where hbase:meta is open, as the probe finds it through ZooKeeper.
  if is_running hbase-cluster/master; then
    [ -x "$probe_bin" ] || build_probe
    echo "hbase-cluster meta: $(probe hbase-cluster/master 2>&1 | sed 's/;.*//')"
  fi
}

rs_arg() { # rs_arg N: N must name a region server of the cluster
  ((hbase_rs > 1)) || die "region server commands need the cluster: set HBASE_REGIONSERVERS=3"
  [[ ${1:-} =~ ^[1-9]$ ]] && (($1 <= hbase_rs)) || die "say a region server number from 1 to $hbase_rs (HBASE_REGIONSERVERS=$hbase_rs)"
}

rs_signal() { # rs_signal VERB N
  local name=hbase-cluster/rs-$2 pid
  is_running "$name" || die "$name is not running"
  pid=$(cat "$data/$name.pid")
  case $1 in
    kill)
      kill -9 "$pid"
      while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
      rm -f "$data/$name.pid"
      log "killed $name (pid $pid, SIGKILL) at $(date -u +%H:%M:%S.%3N)" ;;
    pause) kill -STOP "$pid"; log "paused $name (pid $pid, SIGSTOP) at $(date -u +%H:%M:%S.%3N)" ;;
    resume) kill -CONT "$pid"; log "resumed $name (pid $pid, SIGCONT) at $(date -u +%H:%M:%S.%3N)" ;;
  esac
}

cluster_cmd() { # cluster_cmd CMD ARGS...: an operator command on the cluster, through the probe
  ((hbase_rs > 1)) || die "$1 needs the cluster: set HBASE_REGIONSERVERS=3"
  is_running hbase-cluster/master || die "the HBase cluster is not running: run start first"
  build_probe # the binary of an older checkout may lack -cluster; go build's cache makes this quick
  "$probe_bin" -zookeeper "127.0.0.1:$(hbc_zk_port)" -timeout 2m -cluster "$@"
}

start_rs() {
  local n=$1 name=hbase-cluster/rs-$1
  if is_running "$name"; then log "$name already running (pid $(cat "$data/$name.pid"))"; return 0; fi
  is_running hbase-cluster/zk || die "the cluster's ZooKeeper is not running: run start first"
  fetch_one hbase
  rm -f "$hbc_dir/rs-$n/rs.log"
  hbc_launch_rs "$n"
  hbc_wait_rs "$n"
}

# need_krb5: the MIT Kerberos KDC and client tools, from Debian's packages when missing (a fresh
# machine has none). Root runs apt-get itself; others need password-less sudo.
need_krb5() {
  local tool missing=0
  # faketime: the clock-skew test runs a second KDC whose clock is ten minutes ahead.
  for tool in krb5kdc kdb5_util kadmin.local kinit faketime; do
    command -v "$tool" >/dev/null || missing=1
  done
  [ "$missing" = 0 ] && return 0
  local sudo=
  if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null && sudo -n true 2>/dev/null \
      || die "MIT Kerberos missing: install krb5-kdc krb5-admin-server krb5-user faketime (Debian), or run as root"
    sudo="sudo"
  fi
  log "installing MIT Kerberos from Debian's packages: krb5-kdc krb5-admin-server krb5-user faketime"
  # The packages' scripts may try to start system-wide daemons; this script never uses them: its
  # KDC runs from its own folder, on its own port.
  { $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq \
      && $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq krb5-kdc krb5-admin-server krb5-user faketime; } \
    >"$data/krb5-apt.log" 2>&1 \
    || { tail -n 20 "$data/krb5-apt.log" >&2; die "apt-get install of MIT Kerberos failed (log: $data/krb5-apt.log)"; }
}

kadmin_local() {
  KRB5_CONFIG=$kdc_dir/krb5.conf KRB5_KDC_PROFILE=$kdc_dir/kdc.conf kadmin.local -q "$1" >>"$kdc_dir/kadmin.log" 2>&1 \
    || { tail -n 5 "$kdc_dir/kadmin.log" >&2; die "kadmin.local -q '$1' failed (log: $kdc_dir/kadmin.log)"; }
}

# make_realm: realm ABACUS.TEST in $kdc_dir (once): krb5.conf for every client, the KDC's database,
# the principals and their keytabs.
#   hbase/127.0.0.1        the master and region server (they register as 127.0.0.1: their _HOST)
#   zookeeper/localhost    the embedded ZooKeeper (SASL for HBase's own ZooKeeper session; its
#                          client turns 127.0.0.1 into localhost to name the server)
#   client                 the tests' user: client.keytab; client-stale.keytab holds its previous keys
#                          (exported, then the principal was re-keyed), as a wrong keytab does
#   shortlived             a user whose tickets last 1 minute (renewable for a day): renewal tests
make_realm() {
  [ -f "$kdc_dir/principal" ] && [ -s "$kdc_dir/shortlived.keytab" ] && return 0
  rm -rf "${kdc_dir:?}"
  mkdir -p "$kdc_dir"
  # udp_preference_limit=1: TCP to the KDC, so that tickets of any size get through.
  {
    echo "[libdefaults]"
    echo "  default_realm = $realm"
    echo "  dns_lookup_kdc = false"
    echo "  dns_lookup_realm = false"
    echo "  rdns = false"
    echo "  dns_canonicalize_hostname = false"
    echo "  ticket_lifetime = 24h"
    echo "  renew_lifetime = 7d"
    echo "  forwardable = true"
    echo "  udp_preference_limit = 1"
    echo "  default_tkt_enctypes = aes256-cts-hmac-sha1-96 aes128-cts-hmac-sha1-96"
    echo "  default_tgs_enctypes = aes256-cts-hmac-sha1-96 aes128-cts-hmac-sha1-96"
    echo "  permitted_enctypes = aes256-cts-hmac-sha1-96 aes128-cts-hmac-sha1-96"
    echo "[realms]"
    echo "  $realm = {"
    echo "    kdc = 127.0.0.1:$kdc_port"
    echo "  }"
    echo "[domain_realm]"
    echo "  127.0.0.1 = $realm"
    echo "  localhost = $realm"
  } >"$kdc_dir/krb5.conf"
  {
    echo "[kdcdefaults]"
    echo "  kdc_listen = 127.0.0.1:$kdc_port"
    echo "  kdc_tcp_listen = 127.0.0.1:$kdc_port"
    echo "[realms]"
    echo "  $realm = {"
    echo "    database_name = $kdc_dir/principal"
    echo "    key_stash_file = $kdc_dir/stash"
    echo "    acl_file = $kdc_dir/kadm5.acl"
    echo "    max_life = 24h"
    echo "    max_renewable_life = 7d"
    echo "    supported_enctypes = aes256-cts-hmac-sha1-96:normal aes128-cts-hmac-sha1-96:normal"
    echo "  }"
    echo "[logging]"
    echo "  kdc = FILE:$kdc_dir/kdc.log"
  } >"$kdc_dir/kdc.conf"
  : >"$kdc_dir/kadm5.acl"
  KRB5_CONFIG=$kdc_dir/krb5.conf KRB5_KDC_PROFILE=$kdc_dir/kdc.conf \
    kdb5_util create -s -r "$realm" -P "abacus-testenv-master-key" >"$kdc_dir/create.log" 2>&1 \
    || { cat "$kdc_dir/create.log" >&2; die "kdb5_util create failed"; }
  local p
  for p in "hbase/127.0.0.1" "zookeeper/localhost" "client"; do kadmin_local "addprinc -randkey $p@$realm"; done
  kadmin_local "ktadd -k $kdc_dir/hbase.keytab hbase/127.0.0.1@$realm zookeeper/localhost@$realm"
  kadmin_local "ktadd -k $kdc_dir/client-stale.keytab client@$realm"
  kadmin_local "ktadd -k $kdc_dir/client.keytab client@$realm" # new keys: client-stale.keytab is now wrong
  kadmin_local "addprinc -randkey -maxlife \"1 minute\" -maxrenewlife \"1 day\" shortlived@$realm"
  kadmin_local "ktadd -k $kdc_dir/shortlived.keytab shortlived@$realm"
  log "realm $realm made in $kdc_dir"
}

start_kdc() {
  if is_running kdc; then log "kdc already running (pid $(cat "$data/kdc.pid"))"; return 0; fi
  port_busy "$kdc_port" && die "port $kdc_port is taken by another process: set KDC_PORT"
  need_krb5
  make_realm
  log "starting the KDC for $realm on 127.0.0.1:$kdc_port"
  KRB5_CONFIG=$kdc_dir/krb5.conf KRB5_KDC_PROFILE=$kdc_dir/kdc.conf \
    nohup krb5kdc -n >"$kdc_dir/stdout.log" 2>&1 </dev/null &
  echo $! >"$data/kdc.pid"
  wait_ready kdc "$kdc_dir/kdc.log"
}

start_secure-hbase() {
  local dir=$secure/hbase logf=$secure/hbase/hbase.log
  if is_running secure-hbase; then log "secure-hbase already running (pid $(cat "$data/secure-hbase.pid"))"; return 0; fi
  [ -s "$kdc_dir/hbase.keytab" ] || die "no keytabs in $kdc_dir: start the kdc first (SERVICES=\"kdc secure-hbase\")"
  local p
  for p in "$shb_zk_port" "$shb_master_port" "$shb_rs_port"; do
    port_busy "$p" && die "port $p is taken by another process: set SECURE_HBASE_ZK_PORT/SECURE_HBASE_MASTER_PORT/SECURE_HBASE_RS_PORT"
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
    prop hbase.zookeeper.property.clientPort "$shb_zk_port"
    prop hbase.master.port "$shb_master_port"
    prop hbase.regionserver.port "$shb_rs_port"
    prop hbase.master.info.port -1
    prop hbase.regionserver.info.port -1
    prop hbase.master.hostname 127.0.0.1
    prop hbase.unsafe.regionserver.hostname 127.0.0.1
    prop hbase.regionserver.hostname 127.0.0.1
    prop hbase.regionserver.handler.count 16
    prop hbase.client.retries.number 5
    prop hbase.master.wait.on.regionservers.mintostart 1
    prop hbase.balancer.period 3600000
    prop hbase.normalizer.period 3600000
    prop hbase.procedure.store.wal.use.hsync false
    # Kerberos for every RPC: clients must authenticate (no fallback to simple). The principal is
    # spelled out rather than hbase/_HOST: the region server's own client to the master fills in
    # _HOST by reverse DNS ("localhost" for 127.0.0.1) while the servers log in under the name they
    # register (127.0.0.1), and Debian's /etc/hosts is not ours to change. Clients use the pattern
    # hbase/_HOST@ABACUS.TEST, _HOST being the registered name: the same principal.
    prop hbase.security.authentication kerberos
    prop hadoop.security.authentication kerberos
    prop hbase.ipc.server.fallback-to-simple-auth-allowed false
    prop hbase.master.kerberos.principal "hbase/127.0.0.1@$realm"
    prop hbase.master.keytab.file "$kdc_dir/hbase.keytab"
    prop hbase.regionserver.kerberos.principal "hbase/127.0.0.1@$realm"
    prop hbase.regionserver.keytab.file "$kdc_dir/hbase.keytab"
    prop hbase.rpc.protection "$shb_protection"
    echo '</configuration>'
  } >"$dir/conf/hbase-site.xml"
  # Hadoop's UserGroupInformation reads core-site.xml, not hbase-site.xml: without this the servers
  # run as the Unix user with SIMPLE authentication and cannot reach each other.
  {
    echo '<?xml version="1.0"?>'
    echo '<configuration>'
    prop hadoop.security.authentication kerberos
    echo '</configuration>'
  } >"$dir/conf/core-site.xml"
  # Secure ZooKeeper: the embedded server authenticates by SASL (section Server) and HBase logs in
  # to it (section Client); HBase then protects its znodes with ACLs.
  {
    echo 'Server {'
    echo '  com.sun.security.auth.module.Krb5LoginModule required'
    echo "  useKeyTab=true keyTab=\"$kdc_dir/hbase.keytab\" storeKey=true useTicketCache=false"
    echo "  principal=\"zookeeper/localhost@$realm\";"
    echo '};'
    echo 'Client {'
    echo '  com.sun.security.auth.module.Krb5LoginModule required'
    echo "  useKeyTab=true keyTab=\"$kdc_dir/hbase.keytab\" storeKey=true useTicketCache=false"
    echo "  principal=\"hbase/127.0.0.1@$realm\";"
    echo '};'
  } >"$dir/conf/jaas.conf"
  {
    echo "rootLogger.level=INFO"
    echo "rootLogger.appenderRef.f.ref=F"
    echo "appender.f.type=File"
    echo "appender.f.name=F"
    echo "appender.f.fileName=$logf"
    echo "appender.f.layout.type=PatternLayout"
    echo "appender.f.layout.pattern=%d{ISO8601} %-5p [%t] %c{1}: %m%n"
    echo "logger.zk.name=org.apache.zookeeper"
    echo "logger.zk.level=WARN"
    echo "logger.hadoop.name=org.apache.hadoop.hbase.shaded"
    echo "logger.hadoop.level=WARN"
  } >"$dir/conf/log4j2.properties"
  log "starting secure-hbase (Kerberos realm $realm; zookeeper 127.0.0.1:$shb_zk_port, master :$shb_master_port, region server :$shb_rs_port; protection $shb_protection)"
  nohup java -Xms512m -Xmx1g -XX:+UseG1GC -Djava.awt.headless=true -Djava.net.preferIPv4Stack=true \
    "${hbase_java_opts[@]}" \
    -Djava.security.krb5.conf="$kdc_dir/krb5.conf" \
    -Djava.security.auth.login.config="$dir/conf/jaas.conf" \
    -Dzookeeper.authProvider.1=org.apache.zookeeper.server.auth.SASLAuthenticationProvider \
    -Dzookeeper.kerberos.removeHostFromPrincipal=true -Dzookeeper.kerberos.removeRealmFromPrincipal=true \
    -Dlog4j2.configurationFile="$dir/conf/log4j2.properties" \
    -Dhbase.log.dir="$dir" -Dhbase.home.dir="$dir" \
    -cp "$dir/conf:$(cat "$cp_dir/hbase.classpath")" \
    org.apache.hadoop.hbase.master.HMaster start >"$dir/stdout.log" 2>&1 </dev/null &
  echo $! >"$data/secure-hbase.pid"
  wait_ready secure-hbase "$logf"
}

# check_secure_java: HBase's own Java client against the secure HBase, with the client keytab (create a
# table, put, get, scan) and without credentials (must be refused).
check_secure_java() {
  local out=$secure/javacheck cp
  cp=$(cat "$cp_dir/hbase.classpath")
  mkdir -p "$out"
  javac -d "$out" -cp "$cp" "$here/secure/JavaClientCheck.java" || die "javac of testenv/secure/JavaClientCheck.java failed"
  local jo=(-Djava.security.krb5.conf="$kdc_dir/krb5.conf" -Dlog4j2.level=ERROR "${hbase_java_opts[@]}")
  java "${jo[@]}" -cp "$out:$cp" JavaClientCheck "$shb_zk_port" "hbase/127.0.0.1@$realm" "client@$realm" "$kdc_dir/client.keytab" 2>"$out/with-keytab.err" \
    || { tail -n 30 "$out/with-keytab.err" >&2; die "the Java client with the client keytab failed"; }
  java "${jo[@]}" -cp "$out:$cp" JavaClientCheck "$shb_zk_port" "hbase/127.0.0.1@$realm" 2>"$out/no-credentials.err" \
    || { tail -n 30 "$out/no-credentials.err" >&2; die "the Java client without credentials was not refused"; }
}

stop_one() { # stop_one NAME...: TERM them all, then KILL whatever still runs after 30 s
  local name pid i pids=() names=() left
  for name in "$@"; do
    if ! is_running "$name"; then rm -f "$data/$name.pid"; continue; fi
    pid=$(cat "$data/$name.pid")
    log "stopping $name (pid $pid)"
    kill "$pid" 2>/dev/null || true
    pids+=("$pid") names+=("$name")
  done
  for ((i = 0; i < 60; i++)); do
    left=0
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && left=1; done
    ((left)) || break
    sleep 0.5
  done
  for i in "${!pids[@]}"; do
    if kill -0 "${pids[$i]}" 2>/dev/null; then
      log "${names[$i]} did not stop in 30 s: killing"
      kill -9 "${pids[$i]}" 2>/dev/null || true
    fi
    rm -f "$data/${names[$i]}.pid"
  done
}

rss_of() { awk '/VmRSS/ {printf "%d MiB", $2/1024}' "/proc/$1/status" 2>/dev/null || echo "?"; }

status() {
  local name i pid
  for name in $services; do
    if [ "$name" = kafka ] && [ "$kafka_brokers" != 1 ]; then
      for ((i = 1; i <= kafka_brokers; i++)); do
        if is_running "$(node_name "$i")"; then
          pid=$(cat "$data/$(node_name "$i").pid")
          echo "kafka broker $i: running (pid $pid, rss $(rss_of "$pid")) on 127.0.0.1:$(node_port "$i"), controller 127.0.0.1:$(node_ctl_port "$i"); log $(node_dir "$i")/kafka.log"
        else
          echo "kafka broker $i: stopped"
        fi
      done
    elif [ "$name" = hbase ] && ((hbase_rs > 1)); then
      status_hbase_cluster
    elif is_running "$name"; then
      pid=$(cat "$data/$name.pid")
      case $name in
        kafka) echo "kafka: running (pid $pid, rss $(rss_of "$pid")) on 127.0.0.1:$kafka_port${kafka_sasl_port:+, SASL_SSL 127.0.0.1:$kafka_sasl_port}; log $data/kafka/kafka.log" ;;
        hbase) echo "hbase: running (pid $pid, rss $(rss_of "$pid")) zookeeper 127.0.0.1:$zk_port, master 127.0.0.1:$master_port, region server 127.0.0.1:$rs_port; log $data/hbase/hbase.log" ;;
        kdc) echo "kdc: running (pid $pid, rss $(rss_of "$pid")) realm $realm on 127.0.0.1:$kdc_port; krb5.conf and keytabs in $kdc_dir; log $kdc_dir/kdc.log" ;;
        secure-hbase) echo "secure-hbase: running (pid $pid, rss $(rss_of "$pid")) Kerberos, zookeeper 127.0.0.1:$shb_zk_port, master 127.0.0.1:$shb_master_port, region server 127.0.0.1:$shb_rs_port; log $secure/hbase/hbase.log" ;;
      esac
    else
      echo "$name: stopped"
    fi
  done
}

# sasl_env CMD...: runs CMD with the SASL test environment (what `env` prints).
sasl_env() {
  ABACUS_KAFKA_SASL_PLAIN_USER=$sasl_plain_user ABACUS_KAFKA_SASL_PLAIN_PASSWORD=$sasl_plain_password \
  ABACUS_KAFKA_SASL_SCRAM256_USER=$sasl_scram256_user ABACUS_KAFKA_SASL_SCRAM256_PASSWORD=$sasl_scram256_password \
  ABACUS_KAFKA_SASL_SCRAM512_USER=$sasl_scram512_user ABACUS_KAFKA_SASL_SCRAM512_PASSWORD=$sasl_scram512_password \
    "$@"
}

print_env() {
  case " $services " in
    *" kafka "*)
      if [ "$kafka_brokers" != 1 ]; then
        echo "export ABACUS_KAFKA_BROKERS=$(broker_list)"
        # Tests that need the cluster (TestCluster*) find it here, and kill and restart its
        # brokers through this script with the same data folder and ports.
        echo "export ABACUS_KAFKA_CLUSTER_BROKERS=$(broker_list)"
        echo "export ABACUS_KAFKA_CLUSTER_DIR=$data"
      else
        echo "export ABACUS_KAFKA_BROKERS=127.0.0.1:$kafka_port"
        if [ -n "$kafka_sasl_port" ]; then
          echo "export ABACUS_KAFKA_SASL_BROKERS=127.0.0.1:$kafka_sasl_port"
          echo "export ABACUS_KAFKA_CA_FILE=$tls_dir/ca.pem"
          echo "export ABACUS_KAFKA_UNTRUSTED_CA_FILE=$tls_dir/untrusted-ca.pem"
          sasl_env env | grep '^ABACUS_KAFKA_SASL_.*_\(USER\|PASSWORD\)=' | sort | sed 's/^/export /'
        fi
      fi
      ;;
  esac
  case " $services " in *" hbase "*)
    if ((hbase_rs > 1)); then
      echo "export ABACUS_HBASE_ZK=127.0.0.1:$(hbc_zk_port)"
      # Tests that need the HBase cluster find it here, and kill, pause and restart its region
      # servers through this script with the same data folder and ports.
      echo "export ABACUS_HBASE_CLUSTER_ZK=127.0.0.1:$(hbc_zk_port)"
      echo "export ABACUS_HBASE_CLUSTER_REGIONSERVERS=$hbase_rs"
      echo "export ABACUS_HBASE_CLUSTER_DIR=$data"
    else
      echo "export ABACUS_HBASE_ZK=127.0.0.1:$zk_port"
    fi ;;
  esac
  case " $services " in *" secure-hbase "*)
    echo "export ABACUS_SECURE_HBASE_ZK=127.0.0.1:$shb_zk_port"
    echo "export ABACUS_KRB5_CONF=$kdc_dir/krb5.conf"
    echo "export ABACUS_KRB_PRINCIPAL=client@$realm"
    echo "export ABACUS_KRB_KEYTAB=$kdc_dir/client.keytab"
    echo "export ABACUS_KRB_STALE_KEYTAB=$kdc_dir/client-stale.keytab"
    echo "export ABACUS_KRB_SHORTLIVED_KEYTAB=$kdc_dir/shortlived.keytab"
    echo "export ABACUS_KRB_SERVER_PRINCIPAL=hbase/_HOST@$realm" ;;
  esac
}

stop_all() {
  local s i names
  for s in $services; do
    if [ "$s" = kafka ] && [ "$kafka_brokers" != 1 ]; then
      # All nodes at once: stopped one after another, the last ones wait for a controller quorum
      # that is already gone before they give up their controlled shutdown.
      names=()
      for ((i = 1; i <= kafka_brokers; i++)); do names+=("$(node_name "$i")"); done
      stop_one "${names[@]}"
    elif [ "$s" = hbase ] && ((hbase_rs > 1)); then
      stop_hbase_cluster
    else
      stop_one "$s"
    fi
  done
}

broker_arg() { # broker_arg N: N must name a broker
  [[ ${1:-} =~ ^[1-9]$ ]] && (($1 <= kafka_brokers)) || die "say a broker number from 1 to $kafka_brokers (KAFKA_BROKERS=$kafka_brokers)"
}

cmd=${1:-}
case $cmd in
  fetch)
    need_java
    for s in $services; do
      case $s in
        kdc) ;;                        # Debian's packages, installed by start
        secure-hbase) fetch_one hbase ;; # the same jars as the plain HBase
        *) fetch_one "$s" ;;
      esac
    done
    ;;
  start)
    need_java
    warn_ephemeral
    build_probe
    for s in $services; do "start_$s"; done
    status
    ;;
  stop) stop_all ;;
  status) status ;;
  env) print_env ;;
  check-secure-java) need_java; check_secure_java ;;
  clean)
    stop_all
    for s in $services; do
      case $s in
        kafka) if [ "$kafka_brokers" = 1 ]; then rm -rf "${data:?}/kafka"; else rm -rf "${data:?}/kafka-cluster"; fi ;;
        secure-hbase) rm -rf "${secure:?}/hbase" ;;
        hbase) if [ "$hbase_rs" = 1 ]; then rm -rf "${data:?}/hbase"; else rm -rf "${hbc_dir:?}"; fi ;;
        kdc) rm -rf "${kdc_dir:?}" ;;
        *) rm -rf "${data:?}/$s" ;;
      esac
    done
    ;;
  kill-broker) broker_arg "${2:-}"; kill_broker "$2" ;;
  start-broker) need_java; broker_arg "${2:-}"; build_probe; start_broker "$2" ;;
  kill-hbase) kill_hbase ;;
  kill-rs) rs_arg "${2:-}"; rs_signal kill "$2" ;;
  pause-rs) rs_arg "${2:-}"; rs_signal pause "$2" ;;
  resume-rs) rs_arg "${2:-}"; rs_signal resume "$2" ;;
  stop-rs) rs_arg "${2:-}"; is_running "hbase-cluster/rs-$2" && kill -CONT "$(cat "$data/hbase-cluster/rs-$2.pid")"; stop_one "hbase-cluster/rs-$2" ;;
  start-rs) need_java; rs_arg "${2:-}"; start_rs "$2" ;;
  regions) cluster_cmd regions "${@:2}" ;;
  move-region) [ $# = 4 ] || die "move-region TABLE ENCODED_REGION N"; rs_arg "$4"; cluster_cmd move "$2" "$3" "127.0.0.1:$(hbc_rs_port "$4")" ;;
  balance) cluster_cmd balance ;;
  *) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
