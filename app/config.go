package app

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/abacus-stream/abacus/hbase"
	"github.com/abacus-stream/abacus/internal/membership"
	"github.com/abacus-stream/abacus/kafkasec"
	"github.com/abacus-stream/abacus/processors"
	"github.com/abacus-stream/abacus/query"
	"github.com/abacus-stream/abacus/schema"
	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"
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

	// envErrs are the environment variables ApplyEnv could not read; Validate reports them.
	envErrs []error
	// hostErr is why the host name could not give the default instance id; Validate reports it.
	hostErr error
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
	// Names does not rename, and before the default group names. Env ABACUS_TOPIC_PREFIX.
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
	k := h.Kerberos
	return hbase.Config{ZooKeeper: h.ZooKeeper, Auth: h.Auth, Kerberos: hbase.KerberosConfig{
		Principal: k.Principal, Keytab: k.Keytab, TicketCache: k.TicketCache, Krb5Conf: k.Krb5Conf,
		ServerPrincipal: k.ServerPrincipal, Protection: k.Protection,
	}}
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
	// Limits bound every request; zero fields take query.Limits' defaults.
	Limits QueryLimits `yaml:"limits"`
}

// QueryTLS names the query server's certificate and key files.
type QueryTLS struct {
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
}

// QueryAuth names the query server's credentials files (see query.AuthConfig for their format).
type QueryAuth struct {
	TokensFile string `yaml:"tokens_file"` // one bearer token per line
	BasicFile  string `yaml:"basic_file"`  // one user:password per line
}

// QueryLimits bound what one client can make the query server do (query.Limits; 0: default).
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
func (l QueryLimits) Limits() query.Limits {
	out := query.Limits{
		ReadHeaderTimeout: time.Duration(l.ReadHeaderTimeout), ReadTimeout: time.Duration(l.ReadTimeout),
		WriteTimeout: time.Duration(l.WriteTimeout), IdleTimeout: time.Duration(l.IdleTimeout),
		RequestTimeout: time.Duration(l.RequestTimeout), MaxHeaderBytes: l.MaxHeaderBytes, MaxBodyBytes: l.MaxBodyBytes,
		MaxEntities: l.MaxEntities, MaxRange: time.Duration(l.MaxRange), MaxWindows: l.MaxWindows, MaxEntityList: l.MaxEntityList,
	}
	out.EnsureDefaults()
	return out
}

// AuthConfig is the query.AuthConfig of the block.
func (a QueryAuth) AuthConfig() query.AuthConfig {
	return query.AuthConfig{TokensFile: a.TokensFile, BasicFile: a.BasicFile, Prefix: "query.auth"}
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

// MaxConfigBytes bounds a config file: a path naming a device or a log by mistake fails at once.
const MaxConfigBytes = 1 << 20

// LoadConfig reads a YAML file; unknown fields are errors, so a typo never goes unnoticed.
// ${NAME} is replaced by the environment variable NAME (an unset one is an error), so one file
// can serve several environments; a $ not followed by { is left alone. An error never shows a
// password, neither one written in the file nor one expanded from ${NAME}.
func LoadConfig(path string) (*Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxConfigBytes+1))
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if len(b) > MaxConfigBytes {
		return nil, fmt.Errorf("config %s: over %d bytes (app.MaxConfigBytes)", path, MaxConfigBytes)
	}
	c, err := ParseConfig(b, os.LookupEnv)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return c, nil
}

// ParseConfig reads a config from YAML text, replacing ${NAME} with lookup(NAME) first, as
// LoadConfig does with the environment.
func ParseConfig(b []byte, lookup func(string) (string, bool)) (*Config, error) {
	b, err := expandEnv(b, lookup)
	if err != nil {
		return nil, err
	}
	var c Config
	if err := unmarshalYAML(b, &c); err != nil {
		// The formatted error quotes the lines around the mistake, after expansion: passwords
		// there (written or expanded) are taken out.
		msg := yaml.FormatError(err, false, true)
		if multilineSecret(b) {
			msg = yaml.FormatError(err, false, false) // its lines could not be told apart
		}
		return nil, errors.New(redactSecrets(msg, b))
	}
	return &c, nil
}

// unmarshalYAML is yaml.UnmarshalWithOptions with unknown fields refused, and with a panic of
// the decoder turned into an error: goccy/go-yaml v1.19.2 dereferences nil on a tag without a
// value on a list field (`brokers: !`, goccy/go-yaml issue 735, fixed upstream after that
// release), and a config mistake must never crash the command.
func unmarshalYAML(b []byte, c *Config) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("the YAML decoder failed on this file (%v): look for a tag (!...) or a construct it does not take", p)
		}
	}()
	return yaml.UnmarshalWithOptions(b, c, yaml.DisallowUnknownField())
}

// secretKey finds the values of password keys in YAML text, in block (password: x) and flow
// ({password: x}) style, quoted or not: the fallback when the text does not parse, and the way
// the quoted lines of an error are found.
var secretKey = regexp.MustCompile(`(?m)(^|[\s{,])password\s*:[ \t]*("(?:[^"\\\n]|\\.)*"|'(?:[^'\n]|'')*'|[^,}#\n]*)`)

// minScrubbed is the shortest password value taken out of an error's text wherever it appears;
// shorter ones are only taken out of the lines that quote a password key, so that a one-letter
// password does not blank out every such letter of the message.
const minScrubbed = 4

// redactSecrets removes from msg every password value of the YAML text b (as parsed, and as the
// regular expression finds them), and the rest of every line of msg that quotes a password key.
func redactSecrets(msg string, b []byte) string {
	var values []string
	func() {
		defer func() { _ = recover() }() // the regular expression below still finds them
		if f, err := parser.ParseBytes(b, 0); err == nil {
			for _, doc := range f.Docs {
				if doc != nil {
					ast.Walk(passwordFinder{&values}, doc)
				}
			}
		}
	}()
	for _, m := range secretKey.FindAllSubmatch(b, -1) {
		v := strings.TrimSpace(string(m[2]))
		values = append(values, v)
		if len(v) >= 2 && (v[0] == '"' || v[0] == '\'') && v[len(v)-1] == v[0] {
			values = append(values, v[1:len(v)-1])
		}
	}
	// Longest first, so that a value containing another is taken out whole.
	sort.Slice(values, func(i, j int) bool { return len(values[i]) > len(values[j]) })
	for _, v := range values {
		if len(v) >= minScrubbed {
			msg = strings.ReplaceAll(msg, v, kafkasec.Secret(v).String())
		}
	}
	lines := strings.Split(msg, "\n")
	for i, l := range lines {
		if loc := secretKey.FindStringSubmatchIndex(l); loc != nil && loc[5] > loc[4] {
			lines[i] = l[:loc[4]] + kafkasec.Secret("x").String()
		}
	}
	return strings.Join(lines, "\n")
}

// multilineSecret reports whether a password value of b may continue past its key's line (a block
// scalar, an anchor or alias, a quote left open, a value on the next line): the lines of an error
// that quote such a value are not told apart by redactSecrets, so the error quotes no lines.
func multilineSecret(b []byte) bool {
	for _, m := range secretKey.FindAllSubmatch(b, -1) {
		v := strings.TrimSpace(string(m[2]))
		if v == "" || strings.ContainsAny(v[:1], "|>&*!") {
			return true
		}
		if (v[0] == '"' || v[0] == '\'') && (len(v) < 2 || v[len(v)-1] != v[0]) {
			return true
		}
	}
	return false
}

// passwordFinder collects the values of every mapping key named password.
type passwordFinder struct{ values *[]string }

// Visit implements ast.Visitor.
func (f passwordFinder) Visit(n ast.Node) ast.Visitor {
	mv, ok := n.(*ast.MappingValueNode)
	if !ok || mv.Key == nil || mv.Value == nil {
		return f
	}
	if k := mv.Key.GetToken(); k == nil || k.Value != "password" {
		return f
	}
	switch v := mv.Value.(type) {
	case *ast.StringNode:
		*f.values = append(*f.values, v.Value)
	case *ast.LiteralNode:
		if v.Value != nil {
			*f.values = append(*f.values, v.Value.Value, strings.TrimRight(v.Value.Value, "\n"))
		}
	default:
		if tk := v.GetToken(); tk != nil {
			*f.values = append(*f.values, tk.Value)
		}
	}
	return f
}

// ApplyEnv fills fields from ABACUS_* environment variables where they are set.
func (c *Config) ApplyEnv(getenv func(string) string) {
	if v := getenv("ABACUS_KAFKA_BROKERS"); v != "" {
		c.Kafka.Brokers = splitList(v)
	}
	if v := getenv("ABACUS_HBASE_ZK"); v != "" {
		c.HBase.ZooKeeper = v
	}
	if v := getenv("ABACUS_LISTEN"); v != "" {
		c.Query.Listen = v
	}
	if v := getenv("ABACUS_TOPOLOGY"); v != "" {
		c.Topology = v
	}
	if v := getenv("ABACUS_TOPIC_PREFIX"); v != "" {
		c.Topics.Prefix = v
	}
	if v := getenv("ABACUS_INSTANCE_ID"); v != "" {
		c.Membership.InstanceID = v
	}
	if v := getenv("ABACUS_OPS_LISTEN"); v != "" {
		c.Ops.Listen = v
	}
	c.applyKafkaSecurityEnv(getenv)
}

// applyKafkaSecurityEnv reads the Kafka TLS and SASL settings from the environment, for
// deployments that keep them out of the file (and for the demo, which has no file). A password
// from the environment replaces a password_file of the file, and the reverse.
func (c *Config) applyKafkaSecurityEnv(getenv func(string) string) {
	t, a := &c.Kafka.TLS, &c.Kafka.SASL
	if v := getenv("ABACUS_KAFKA_TLS"); v != "" {
		on, err := strconv.ParseBool(v)
		if err != nil {
			c.envErrs = append(c.envErrs, fmt.Errorf("ABACUS_KAFKA_TLS: %q is not true or false", v))
		}
		t.Enabled = on
	}
	for env, field := range map[string]*string{
		"ABACUS_KAFKA_TLS_CA_FILE": &t.CAFile, "ABACUS_KAFKA_TLS_CERT_FILE": &t.CertFile,
		"ABACUS_KAFKA_TLS_KEY_FILE": &t.KeyFile, "ABACUS_KAFKA_TLS_SERVER_NAME": &t.ServerName,
	} {
		if v := getenv(env); v != "" {
			*field, t.Enabled = v, true
		}
	}
	if v := getenv("ABACUS_KAFKA_SASL_MECHANISM"); v != "" {
		a.Mechanism = v
	}
	if v := getenv("ABACUS_KAFKA_SASL_USERNAME"); v != "" {
		a.Username = v
	}
	if v := getenv("ABACUS_KAFKA_SASL_PASSWORD"); v != "" {
		a.Password, a.PasswordFile = kafkasec.Secret(v), ""
	}
	if v := getenv("ABACUS_KAFKA_SASL_PASSWORD_FILE"); v != "" {
		a.PasswordFile, a.Password = v, ""
	}
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// EnsureDefaults fills unset fields from the topology's name.
func (c *Config) EnsureDefaults() {
	name := c.Topology
	group := c.Topics.Prefix + name // groups of one environment stay apart from another's
	if c.Processor.Group == "" {
		c.Processor.Group = group
	}
	if c.Processor.IdleTimeout == 0 {
		c.Processor.IdleTimeout = Duration(processors.DefaultIdleTimeout)
	}
	if c.Processor.Replication == 0 {
		c.Processor.Replication = processors.DefaultReplication
	}
	fill := func(t *SinkTable, kind string) {
		if t.Table == "" {
			t.Table = strings.ReplaceAll(name, "-", "_") + "_" + kind
		}
		if t.Family == "" {
			t.Family = "d"
		}
		if t.SaltBuckets == 0 {
			t.SaltBuckets = 16
		}
		if t.Versions == 0 {
			t.Versions = 1
		}
		if t.Group == "" {
			t.Group = group + "-" + kind + "-sink"
		}
	}
	fill(&c.Sinks.Aggregates, "aggregates")
	fill(&c.Sinks.Facts, "facts")
	if c.Sinks.Offsets == "" {
		c.Sinks.Offsets = "kafka"
	}
	if c.Sinks.OffsetsTable == "" {
		c.Sinks.OffsetsTable = "abacus_offsets"
	}
	if c.Sinks.Durability == "" {
		c.Sinks.Durability = "table_default"
	}
	if c.Query.Listen == "" {
		c.Query.Listen = "127.0.0.1:8080"
	}
	if c.Query.ReloadInterval == 0 {
		c.Query.ReloadInterval = Duration(10 * time.Second)
	}
	if c.Membership.Mode == "" {
		c.Membership.Mode = "static"
	}
	if c.Membership.InstanceID == "" && c.Membership.Static() {
		c.Membership.InstanceID, c.hostErr = membership.HostID()
	}
	if c.Membership.SessionTimeout == 0 {
		c.Membership.SessionTimeout = Duration(DefaultSessionTimeout)
	}
}

// DefaultSessionTimeout is membership.session_timeout's default: franz-go's and the Java
// client's, long enough for a crashed process to be restarted and find its partitions waiting.
const DefaultSessionTimeout = 45 * time.Second

// heartbeatInterval is how often every member heartbeats its group. A rebalance (a member left or
// joined) reaches the others with their next heartbeat, so this bounds how long a clean stop's
// partitions wait for their new owner; the clients' default is 3 s.
const heartbeatInterval = time.Second

// Validate checks the configuration; each error names the field at fault, as the YAML spells it.
func (c *Config) Validate(known []string) error {
	errs := append([]error(nil), c.envErrs...)
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
	}
	switch {
	case c.Topology == "":
		bad("topology", "required: one of %s", strings.Join(known, ", "))
	case !contains(known, c.Topology):
		bad("topology", "%q is not compiled into this binary; it has %s", c.Topology, strings.Join(known, ", "))
	}
	if len(c.Kafka.Brokers) == 0 {
		bad("kafka.brokers", "required (or set ABACUS_KAFKA_BROKERS)")
	}
	for i, b := range c.Kafka.Brokers {
		if !strings.Contains(b, ":") {
			bad(fmt.Sprintf("kafka.brokers[%d]", i), "%q is not host:port", b)
		}
	}
	// Reads the CA, certificate, key and password files: a missing or wrong one is named here,
	// before anything starts.
	if err := c.Kafka.Security().Validate(); err != nil {
		errs = append(errs, err)
	}
	switch {
	case c.HBase.ZooKeeper == "" && c.HBase.Embedded == "":
		bad("hbase", "set hbase.zookeeper (a ZooKeeper quorum) or hbase.embedded (a folder for the embedded store)")
	case c.HBase.ZooKeeper != "" && c.HBase.Embedded != "":
		bad("hbase", "hbase.zookeeper and hbase.embedded are both set: choose one")
	}
	if hc := c.HBase.ClientConfig(); c.HBase.Embedded == "" && hc.ZooKeeper != "" {
		// The hbase package names its fields (Config.Kerberos.Keytab is hbase.kerberos.keytab here).
		if err := hc.Validate(); err != nil {
			bad("hbase.auth", "%v", err)
		}
	}
	if c.Processor.IdleTimeout < 0 {
		bad("processor.idle_timeout", "must not be negative")
	}
	if c.Processor.Replication < 1 {
		bad("processor.replication", "must be at least 1, got %d", c.Processor.Replication)
	}
	for kind, t := range map[string]SinkTable{"aggregates": c.Sinks.Aggregates, "facts": c.Sinks.Facts} {
		f := "sinks." + kind + "."
		if t.SaltBuckets < 1 || t.SaltBuckets > schema.MaxSaltBuckets {
			bad(f+"salt_buckets", "%d is outside 1..%d", t.SaltBuckets, schema.MaxSaltBuckets)
		}
		if t.Versions < 1 {
			bad(f+"versions", "must be at least 1, got %d", t.Versions)
		}
		if t.TTL < 0 {
			bad(f+"ttl", "must not be negative")
		}
		switch t.BloomFilter {
		case "", "NONE", "ROW", "ROWCOL":
		default:
			bad(f+"bloom_filter", "%q is not NONE, ROW or ROWCOL", t.BloomFilter)
		}
	}
	if c.Sinks.Aggregates.Table == c.Sinks.Facts.Table && !c.Sinks.Aggregates.Disabled && !c.Sinks.Facts.Disabled {
		bad("sinks.facts.table", "is the same table as sinks.aggregates.table (%s)", c.Sinks.Facts.Table)
	}
	switch c.Sinks.Offsets {
	case "kafka", "hbase":
	default:
		bad("sinks.offsets", "%q is not kafka or hbase", c.Sinks.Offsets)
	}
	if c.Sinks.Offsets == "hbase" && c.HBase.ZooKeeper == "" {
		bad("sinks.offsets", "hbase needs hbase.zookeeper")
	}
	if _, err := parseDurability(c.Sinks.Durability); err != nil {
		bad("sinks.durability", "%v", err)
	} else if c.Sinks.Durability == "skip_wal" && !c.Sinks.ForceSkipWAL {
		bad("sinks.durability", "skip_wal loses acknowledged cells when a region server dies; set sinks.force_skip_wal to insist")
	}
	if c.Sinks.BatchRecords < 0 || c.Sinks.BatchBytes < 0 || c.Sinks.FlushInterval < 0 {
		bad("sinks", "batch_records, batch_bytes and flush_interval must not be negative")
	}
	if _, _, err := splitHostPort(c.Query.Listen); err != nil {
		bad("query.listen", "%v", err)
	}
	m := c.Membership
	switch m.Mode {
	case "static", "dynamic":
	default:
		bad("membership.mode", "%q is not static or dynamic", m.Mode)
	}
	if m.Static() {
		switch {
		case c.hostErr != nil:
			bad("membership.instance_id", "required (or set ABACUS_INSTANCE_ID): the host name cannot be the default: %v", c.hostErr)
		case m.InstanceID == "":
			bad("membership.instance_id", "required (or set ABACUS_INSTANCE_ID)")
		default:
			// The member id of the longest role must still be an id Kafka takes.
			if err := membership.ValidID(membership.MemberID(m.InstanceID, RoleAggregates)); err != nil {
				bad("membership.instance_id", "%q does not make a valid group.instance.id: %v", m.InstanceID, err)
			}
		}
	}
	if st := time.Duration(m.SessionTimeout); st < 3*heartbeatInterval || st > 30*time.Minute {
		bad("membership.session_timeout", "%v is outside %v..30m", st, 3*heartbeatInterval)
	}
	if l := c.Ops.Listen; l != "" && l != "off" {
		if _, _, err := splitHostPort(l); err != nil {
			bad("ops.listen", "%v (or off)", err)
		}
	}
	errs = append(errs, c.Query.validate()...)
	return errors.Join(errs...)
}

// validate checks the query server's TLS, auth and limits; it reads the TLS and auth files, so
// that a missing or broken one is named before anything starts.
func (q *QueryConfig) validate() []error {
	var errs []error
	if q.TLS.CertFile != "" || q.TLS.KeyFile != "" {
		if _, err := query.NewCertReloader(q.TLS.CertFile, q.TLS.KeyFile, "query.tls"); err != nil {
			errs = append(errs, err)
		}
	}
	if ac := q.Auth.AuthConfig(); ac.Enabled() {
		if _, err := query.NewAuthenticator(ac); err != nil {
			errs = append(errs, err)
		}
	}
	if q.ReloadInterval < 0 {
		errs = append(errs, errors.New("query.reload_interval: must not be negative"))
	}
	l := q.Limits
	for name, v := range map[string]int64{
		"read_header_timeout": int64(l.ReadHeaderTimeout), "read_timeout": int64(l.ReadTimeout), "write_timeout": int64(l.WriteTimeout),
		"idle_timeout": int64(l.IdleTimeout), "request_timeout": int64(l.RequestTimeout), "max_header_bytes": int64(l.MaxHeaderBytes),
		"max_body_bytes": l.MaxBodyBytes, "max_entities": int64(l.MaxEntities), "max_range": int64(l.MaxRange),
		"max_windows": int64(l.MaxWindows), "max_entity_list": int64(l.MaxEntityList),
	} {
		if v < 0 {
			errs = append(errs, fmt.Errorf("query.limits.%s: must not be negative (0 means the default)", name))
		}
	}
	if lim := l.Limits(); lim.WriteTimeout <= lim.RequestTimeout {
		errs = append(errs, fmt.Errorf("query.limits.write_timeout: %s is not longer than query.limits.request_timeout %s: answers would be cut off",
			lim.WriteTimeout, lim.RequestTimeout))
	}
	sort.Slice(errs, func(i, j int) bool { return errs[i].Error() < errs[j].Error() })
	return errs
}

func splitHostPort(s string) (string, int, error) {
	i := strings.LastIndexByte(s, ':')
	if i < 0 {
		return "", 0, fmt.Errorf("%q is not host:port", s)
	}
	p, err := strconv.Atoi(s[i+1:])
	if err != nil || p < 0 || p > 65535 {
		return "", 0, fmt.Errorf("%q has no valid port", s)
	}
	return s[:i], p, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// expandEnv replaces ${NAME} outside comment lines.
func expandEnv(b []byte, lookup func(string) (string, bool)) ([]byte, error) {
	lines := bytes.SplitAfter(b, []byte("\n"))
	var out []byte
	for n, line := range lines {
		if t := bytes.TrimSpace(line); len(t) > 0 && t[0] == '#' {
			out = append(out, line...)
			continue
		}
		for {
			i := bytes.Index(line, []byte("${"))
			if i < 0 {
				out = append(out, line...)
				break
			}
			j := bytes.IndexByte(line[i:], '}')
			if j < 0 {
				return nil, fmt.Errorf("line %d: unterminated ${", n+1)
			}
			name := string(line[i+2 : i+j])
			v, ok := lookup(name)
			if !ok {
				return nil, fmt.Errorf("line %d: ${%s}: environment variable %s is not set", n+1, name, name)
			}
			out = append(append(out, line[:i]...), v...)
			line = line[i+j+1:]
		}
	}
	return out, nil
}
