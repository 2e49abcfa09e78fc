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

kafka_port=${KAFKA_PORT:-9092}
kafka_ctl_port=${KAFKA_CONTROLLER_PORT:-9093}
zk_port=${HBASE_ZK_PORT:-2181}
master_port=${HBASE_MASTER_PORT:-16000}
rs_port=${HBASE_RS_PORT:-16020}
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
    -cp "$dir/conf:$(cat "$data/hbase.classpath")" \
    org.apache.hadoop.hbase.master.HMaster start >"$dir/stdout.log" 2>&1 </dev/null &
  echo $! >"$data/secure-hbase.pid"
  wait_ready secure-hbase "$logf"
}

# check_secure_java: HBase's own Java client against the secure HBase, with the client keytab (create a
# table, put, get, scan) and without credentials (must be refused).
check_secure_java() {
  local out=$secure/javacheck cp
  cp=$(cat "$data/hbase.classpath")
  mkdir -p "$out"
  javac -d "$out" -cp "$cp" "$here/secure/JavaClientCheck.java" || die "javac of testenv/secure/JavaClientCheck.java failed"
  local jo=(-Djava.security.krb5.conf="$kdc_dir/krb5.conf" -Dlog4j2.level=ERROR "${hbase_java_opts[@]}")
  java "${jo[@]}" -cp "$out:$cp" JavaClientCheck "$shb_zk_port" "hbase/127.0.0.1@$realm" "client@$realm" "$kdc_dir/client.keytab" 2>"$out/with-keytab.err" \
    || { tail -n 30 "$out/with-keytab.err" >&2; die "the Java client with the client keytab failed"; }
  java "${jo[@]}" -cp "$out:$cp" JavaClientCheck "$shb_zk_port" "hbase/127.0.0.1@$realm" 2>"$out/no-credentials.err" \
    || { tail -n 30 "$out/no-credentials.err" >&2; die "the Java client without credentials was not refused"; }
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
        kdc) echo "kdc: running (pid $(cat "$data/kdc.pid"), rss $rss) realm $realm on 127.0.0.1:$kdc_port; krb5.conf and keytabs in $kdc_dir; log $kdc_dir/kdc.log" ;;
        secure-hbase) echo "secure-hbase: running (pid $(cat "$data/secure-hbase.pid"), rss $rss) Kerberos, zookeeper 127.0.0.1:$shb_zk_port, master 127.0.0.1:$shb_master_port, region server 127.0.0.1:$shb_rs_port; log $secure/hbase/hbase.log" ;;
      esac
    else
      echo "$name: stopped"
    fi
  done
}

print_env() {
  case " $services " in *" kafka "*) echo "export ABACUS_KAFKA_BROKERS=127.0.0.1:$kafka_port" ;; esac
  case " $services " in *" hbase "*) echo "export ABACUS_HBASE_ZK=127.0.0.1:$zk_port" ;; esac
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
  check-secure-java) need_java; check_secure_java ;;
  clean)
    for s in $services; do stop_one "$s"; done
    case " $services " in *" kafka "*) rm -rf "${data:?}/kafka" ;; esac
    case " $services " in *" hbase "*) rm -rf "${data:?}/hbase" ;; esac
    case " $services " in *" secure-hbase "*) rm -rf "${secure:?}/hbase" ;; esac
    case " $services " in *" kdc "*) rm -rf "${kdc_dir:?}" ;; esac
    ;;
  *) sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
