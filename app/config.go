package app

import (
	"fmt"
	"time"

	"github.com/abacus-stream/abacus/hbase"
	"github.com/abacus-stream/abacus/kafkasec"
	"github.com/abacus-stream/abacus/query/httpapi"
	"github.com/abacus-stream/abacus/query/httpsec"
	"github.com/goccy/go-yaml"
)

// Config is a deployment of one topology: where Kafka and HBase are, and how its processor group,
// sinks and query server run. It comes from a YAML file, with environment variables and flags on
// top (flags win). Every field has a default but the topology's name.
type Config struct {
	// Topology names one of the topologies compiled into the binary.
	Topology string       `yaml:"topology"`
	Topics   TopicsConfig `yaml:"topics"`
	Kafka    KafkaConfig  `yaml:"kafka"`
	HBase    HBaseConfig  `yaml:"hbase"`

	Processor ProcessorConfig `yaml:"processor"`
	Sinks     SinksConfig     `yaml:"sinks"`
	Query     QueryConfig     `yaml:"query"`

	// Membership is how this process's roles join their consumer groups: its instance id (static
	// membership) and session timeout.
	Membership MembershipConfig `yaml:"membership"`
	// Ops is where this process serves /metrics, /healthz and /readyz.
	Ops OpsConfig `yaml:"ops"`
	// Log is how the process logs, on its standard error.
	Log LogConfig `yaml:"log"`

	// envErrs are the environment variables ApplyEnv could not read; Validate reports them.
	envErrs []error
	// hostErr is why the host name could not give the default instance id; Validate reports it.
	hostErr error
	// file and lines are the file the config was read from and the line of each field it sets,
	// for errors that point at the line to mend.
	file  string
	lines configLines
}

// LogConfig says what the process logs and in which form.
type LogConfig struct {
	// Level is debug, info (the default), warn or error (env ABACUS_LOG_LEVEL, flag -log-level).
	Level string `yaml:"level"`
	// Format is text (the default: key=value lines) or json (one object per line, for log
	// collectors) (env ABACUS_LOG_FORMAT, flag -log-format).
	Format string `yaml:"format"`
}

// MembershipConfig gives the process a stable identity in its consumer groups (Kafka's static
// membership, KIP-345): each role joins its group as member <instance_id>-<role>
// (group.instance.id), so that a restarted process takes its partitions back at once, without a
// rebalance of the other members and without waiting for its crashed session to time out; a clean
// stop leaves the groups at once. Two processes that run a role of one deployment must have
// different instance ids.
type MembershipConfig struct {
	// InstanceID names this process among the instances of its roles (env ABACUS_INSTANCE_ID, flag
	// -instance-id; default: the host name). Letters, digits, '.', '_' and '-'.
	InstanceID string `yaml:"instance_id"`
	// Mode is static (default: members named by InstanceID) or dynamic (a new member id at every
	// start: a crashed member's partitions wait for its session to time out).
	Mode string `yaml:"mode"`
	// SessionTimeout is how long a group waits for a member that stopped heartbeating (default
	// 45s): a static member that crashes and comes back within it takes its partitions back at
	// once; one that does not come back has its partitions moved to the others after it. The
	// brokers bound it (group.min.session.timeout.ms, group.max.session.timeout.ms: 6s..30m by
	// default).
	SessionTimeout Duration `yaml:"session_timeout"`
}

// Static reports whether members are named by the instance id.
func (m MembershipConfig) Static() bool { return m.Mode != "dynamic" }

// OpsConfig says where the process serves its operations endpoints.
type OpsConfig struct {
	// Listen is the address of /metrics, /healthz and /readyz (env ABACUS_OPS_LISTEN, flag
	// -ops-listen). Default: with the query role in the process, the query server's listener;
	// otherwise 127.0.0.1:9361 for a process running the processor, 127.0.0.1:9362 for the
	// aggregates sink, 127.0.0.1:9363 for the facts sink (the first of its roles in that order).
	// "off" serves nothing.
	Listen string `yaml:"listen"`
}

// TopicsConfig names the topology's topics in this environment, so that one compiled topology runs
// against dev-…, staging-… or prod-… topics. Every subcommand applies it, so they all see the
// same topics.
type TopicsConfig struct {
	// Prefix goes before every topic the topology names (sources, totals, dead-letter, late) that
	// Names does not rename, and before every consumer group and table of the deployment
	// (processor.group, the sinks' groups and tables, the offsets table), those the file names
	// included, unless a name starts with it already. Env ABACUS_TOPIC_PREFIX.
	Prefix string `yaml:"prefix"`
	// Names renames topics one by one: the name the topology declares -> its name here.
	Names map[string]string `yaml:"names"`
}

// KafkaConfig says where the brokers are and how every Kafka client of every role reaches them:
// the processor's sarama clients (under goka), both sinks, the query server's live view, and the
// admin, offsets and demo clients all take their TLS and SASL from here, through one
// kafkasec.Settings per process.
type KafkaConfig struct {
	Brokers []string `yaml:"brokers"` // env ABACUS_KAFKA_BROKERS (comma separated)
	// TLS: enabled, ca_file, cert_file, key_file, server_name (env ABACUS_KAFKA_TLS,
	// ABACUS_KAFKA_TLS_CA_FILE, ...; see ApplyEnv).
	TLS kafkasec.TLS `yaml:"tls"`
	// SASL: mechanism (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512), username, and password (best as
	// ${VAR}) or password_file. The password is a kafkasec.Secret: it never prints.
	SASL kafkasec.SASL `yaml:"sasl"`
	// ConnectTimeout bounds the check at start that the brokers answer with these settings
	// (default 10s): a broker that does not answer fails a command within it, naming the address
	// and why. Long-running roles keep trying after it, and say in /readyz what they wait for.
	ConnectTimeout Duration `yaml:"connect_timeout"`
}

// Security is the kafkasec configuration of the block, with errors naming fields under kafka.
func (k KafkaConfig) Security() kafkasec.Config {
	return kafkasec.Config{TLS: k.TLS, SASL: k.SASL, Prefix: "kafka"}
}

// HBaseConfig says where HBase is: a ZooKeeper quorum, or an embedded cell store folder for
// single-machine use (never both).
type HBaseConfig struct {
	ZooKeeper string         `yaml:"zookeeper"` // env ABACUS_HBASE_ZK
	Embedded  string         `yaml:"embedded"`  // folder of the embedded cell store
	Auth      string         `yaml:"auth"`      // simple (default) or kerberos, as the cluster's hbase.security.authentication
	Kerberos  KerberosConfig `yaml:"kerberos"`  // with auth: kerberos
	// ZNodeParent is the cluster's zookeeper.znode.parent; default /hbase (some distributions
	// use /hbase-unsecure or /hbase-secure).
	ZNodeParent string `yaml:"znode_parent"`
	// ConnectTimeout bounds how long a command waits at start to reach the cluster (ZooKeeper,
	// then hbase:meta) before it fails, naming the address and why (default 30s). Long-running
	// roles keep trying after it, and say in /readyz what they wait for.
	ConnectTimeout Duration    `yaml:"connect_timeout"`
	Client         HBaseClient `yaml:"client"` // timeouts, retries and per-server limits
}

// HBaseClient holds the HBase client's timeouts, retries and in-flight limits; zero means the
// default of hbase.Config. On a cluster these decide how soon a dead or paused region server is
// noticed and how much of the sinks' writing one slow server can hold up (docs/OPERATIONS.md,
// "HBase on a cluster").
type HBaseClient struct {
	RPCTimeout           Duration `yaml:"rpc_timeout"`              // default 60s (hbase.rpc.timeout)
	DialTimeout          Duration `yaml:"dial_timeout"`             // default 5s
	ZooKeeperTimeout     Duration `yaml:"zookeeper_timeout"`        // default 10s, one lookup in ZooKeeper
	MaxInFlightPerServer int      `yaml:"max_in_flight_per_server"` // default 8 Multi requests
	MaxInFlightPerRegion int      `yaml:"max_in_flight_per_region"` // default 8 Multi requests
	MaxRounds            int      `yaml:"max_rounds"`               // default 10 sends of an action, first included
	BackoffMin           Duration `yaml:"backoff_min"`              // default 50ms, doubling each round
	BackoffMax           Duration `yaml:"backoff_max"`              // default 5s
	RelocateBackoffMax   Duration `yaml:"relocate_backoff_max"`     // default 1s, when regions moved or their server is gone
}

// KerberosConfig holds the Kerberos settings of the HBase client (hbase.KerberosConfig).
type KerberosConfig struct {
	Principal       string `yaml:"principal"`        // e.g. abacus/host@REALM; required with keytab
	Keytab          string `yaml:"keytab"`           // keytab file; without it the ticket cache is used
	TicketCache     string `yaml:"ticket_cache"`     // default $KRB5CCNAME, else /tmp/krb5cc_<uid>
	Krb5Conf        string `yaml:"krb5_conf"`        // default $KRB5_CONFIG, else /etc/krb5.conf
	ServerPrincipal string `yaml:"server_principal"` // default hbase/_HOST@<client realm>
	Protection      string `yaml:"protection"`       // least accepted: authentication, integrity or privacy
}

// ClientConfig is the hbase client configuration these settings describe.
func (h HBaseConfig) ClientConfig() hbase.Config {
	k, cl := h.Kerberos, h.Client
	return hbase.Config{ZooKeeper: h.ZooKeeper, ZooKeeperRoot: h.ZNodeParent, Auth: h.Auth, Kerberos: hbase.KerberosConfig{
		Principal: k.Principal, Keytab: k.Keytab, TicketCache: k.TicketCache, Krb5Conf: k.Krb5Conf,
		ServerPrincipal: k.ServerPrincipal, Protection: k.Protection,
	}, RPCTimeout: time.Duration(cl.RPCTimeout), DialTimeout: time.Duration(cl.DialTimeout),
		ZooKeeperTimeout: time.Duration(cl.ZooKeeperTimeout), MaxInFlightPerServer: cl.MaxInFlightPerServer,
		MaxInFlightPerRegion: cl.MaxInFlightPerRegion, MaxRounds: cl.MaxRounds,
		BackoffMin: time.Duration(cl.BackoffMin), BackoffMax: time.Duration(cl.BackoffMax),
		RelocateBackoffMax: time.Duration(cl.RelocateBackoffMax)}
}

// ProcessorConfig configures the goka processor group.
type ProcessorConfig struct {
	Group       string   `yaml:"group"`        // default: the topology name
	StoragePath string   `yaml:"storage_path"` // local LevelDB state; default $TMPDIR/abacus/<group>
	IdleTimeout Duration `yaml:"idle_timeout"` // default 1m
	Replication int      `yaml:"replication"`  // of the topics the processor creates; default 1
}

// SinksConfig configures both sinks and where they keep offsets.
type SinksConfig struct {
	Aggregates SinkTable `yaml:"aggregates"`
	Facts      SinkTable `yaml:"facts"`
	// Offsets is "kafka" (default: consumer group commits) or "hbase" (the OffsetsTable).
	Offsets      string `yaml:"offsets"`
	OffsetsTable string `yaml:"offsets_table"` // default abacus_offsets
	// BackfillTable is where `abacus backfill` keeps its checkpoints (default abacus_backfill).
	BackfillTable string `yaml:"backfill_table"`
	// Durability of the Puts: table_default (SYNC_WAL), sync_wal, fsync_wal, async_wal, or
	// skip_wal, which is refused unless ForceSkipWAL is set.
	Durability    string   `yaml:"durability"`
	ForceSkipWAL  bool     `yaml:"force_skip_wal"`
	BatchRecords  int      `yaml:"batch_records"`  // default 10000
	BatchBytes    int      `yaml:"batch_bytes"`    // default 4 MiB
	FlushInterval Duration `yaml:"flush_interval"` // default 1s
}

// SinkTable is one sink's table and consumer group.
type SinkTable struct {
	Disabled    bool     `yaml:"disabled"`
	Table       string   `yaml:"table"`        // default <topology>_aggregates / <topology>_facts
	Family      string   `yaml:"family"`       // default d
	SaltBuckets int      `yaml:"salt_buckets"` // default 16
	Versions    int      `yaml:"versions"`     // default 1
	TTL         Duration `yaml:"ttl"`          // default 0: keep forever
	BloomFilter string   `yaml:"bloom_filter"` // default ROW
	Compression string   `yaml:"compression"`  // default NONE
	Group       string   `yaml:"group"`        // default <topology>-aggregates-sink / <topology>-facts-sink
}

// QueryConfig configures the HTTP API and dashboard.
type QueryConfig struct {
	Listen string `yaml:"listen"` // default 127.0.0.1:8080; env ABACUS_LISTEN
	// NoLive leaves out still-open windows. By default the query server follows the processor
	// group's table (a goka view, kept in memory) to show their running totals.
	NoLive bool `yaml:"no_live"`
	// TLS serves HTTPS with a certificate and key (PEM files), read again when they change or on
	// SIGHUP. Off when both are empty.
	TLS QueryTLS `yaml:"tls"`
	// Auth admits only clients with a bearer token or a user and password of its files; health
	// checks (/healthz, /readyz) stay open. Off when both are empty.
	Auth QueryAuth `yaml:"auth"`
	// ReloadInterval is how often the TLS and auth files are checked for changes (default 10s).
	ReloadInterval Duration `yaml:"reload_interval"`
	// Limits bound every request; zero fields take httpapi.Limits' defaults.
	Limits QueryLimits `yaml:"limits"`
	// MaxScans is how many window scans the server runs at once over all requests (default 16),
	// shared so that a request holding fewer gets the next: a one-entity panel is not queued
	// behind fleet panels' scans.
	MaxScans int `yaml:"max_scans"`
	// CacheBytes bounds the cache of settled windows (query.Cache; default 256 MiB): windows
	// that started over 15 minutes ago are read from HBase once, and then only when a writer moved
	// their set's epoch (a replay, a backfill, a sink that fell behind).
	CacheBytes int64 `yaml:"cache_bytes"`
	// NoCache reads every window from HBase at every request.
	NoCache bool `yaml:"no_cache"`
	// NoCoarser answers every OpenTSDB panel from the set its metric names, never from a coarser
	// form of it (topology AggregateSet.Coarser): the same answers, from more rows.
	NoCoarser bool `yaml:"no_coarser"`
}

// QueryTLS names the query server's certificate and key files.
type QueryTLS struct {
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
}

// QueryAuth names the query server's credentials files (see httpsec.AuthConfig for their format).
type QueryAuth struct {
	TokensFile string `yaml:"tokens_file"` // one bearer token per line
	BasicFile  string `yaml:"basic_file"`  // one user:password per line
}

// QueryLimits bound what one client can make the query server do (httpapi.Limits; 0: default).
type QueryLimits struct {
	ReadHeaderTimeout Duration `yaml:"read_header_timeout"` // default 10s; past it: 408
	ReadTimeout       Duration `yaml:"read_timeout"`        // default 30s
	WriteTimeout      Duration `yaml:"write_timeout"`       // default 2m
	IdleTimeout       Duration `yaml:"idle_timeout"`        // default 2m
	RequestTimeout    Duration `yaml:"request_timeout"`     // default 30s; past it: 503
	MaxHeaderBytes    int      `yaml:"max_header_bytes"`    // default 65536; past it: 431
	MaxBodyBytes      int64    `yaml:"max_body_bytes"`      // default 1048576; past it: 413
	MaxEntities       int      `yaml:"max_entities"`        // default 100 per /api/v1/windows
	MaxRange          Duration `yaml:"max_range"`           // default 8784h (366 days)
	MaxWindows        int      `yaml:"max_windows"`         // default 100000 per answer
	MaxEntityList     int      `yaml:"max_entity_list"`     // default 10000 per /api/v1/entities
}

// Limits converts the block, defaults filled.
func (l QueryLimits) Limits() httpapi.Limits {
	out := httpapi.Limits{
		ReadHeaderTimeout: time.Duration(l.ReadHeaderTimeout), ReadTimeout: time.Duration(l.ReadTimeout),
		WriteTimeout: time.Duration(l.WriteTimeout), IdleTimeout: time.Duration(l.IdleTimeout),
		RequestTimeout: time.Duration(l.RequestTimeout), MaxHeaderBytes: l.MaxHeaderBytes, MaxBodyBytes: l.MaxBodyBytes,
		MaxEntities: l.MaxEntities, MaxRange: time.Duration(l.MaxRange), MaxWindows: l.MaxWindows, MaxEntityList: l.MaxEntityList,
	}
	out.EnsureDefaults()
	return out
}

// AuthConfig is the httpsec.AuthConfig of the block.
func (a QueryAuth) AuthConfig() httpsec.AuthConfig {
	return httpsec.AuthConfig{TokensFile: a.TokensFile, BasicFile: a.BasicFile, Prefix: "query.auth"}
}

// Duration is a time.Duration written as "90s" or "1h30m" in YAML.
type Duration time.Duration

// UnmarshalYAML reads a duration string.
func (d *Duration) UnmarshalYAML(b []byte) error {
	var s string
	if err := yaml.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("%q is not a duration like 90s or 1h30m", s)
	}
	*d = Duration(v)
	return nil
}
