package app

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/abacus-stream/abacus/hbase"
	"github.com/abacus-stream/abacus/schema"
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

// KafkaConfig says where the brokers are.
type KafkaConfig struct {
	Brokers []string `yaml:"brokers"` // env ABACUS_KAFKA_BROKERS (comma separated)
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

// LoadConfig reads a YAML file; unknown fields are errors, so a typo never goes unnoticed.
// ${NAME} is replaced by the environment variable NAME (an unset one is an error), so one file
// can serve several environments; a $ not followed by { is left alone.
func LoadConfig(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if b, err = expandEnv(b, os.LookupEnv); err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	var c Config
	if err := yaml.UnmarshalWithOptions(b, &c, yaml.DisallowUnknownField()); err != nil {
		return nil, fmt.Errorf("config %s: %s", path, yaml.FormatError(err, false, true))
	}
	return &c, nil
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
		c.Processor.IdleTimeout = Duration(time.Minute)
	}
	if c.Processor.Replication == 0 {
		c.Processor.Replication = 1
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
}

// Validate checks the configuration; each error names the field at fault, as the YAML spells it.
func (c *Config) Validate(known []string) error {
	var errs []error
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
	return errors.Join(errs...)
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
