package app

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/abacus-stream/abacus/examples/devices"
	"github.com/abacus-stream/abacus/kafkasec"
	"github.com/abacus-stream/abacus/topology"
)

// TestExampleConfigIsValid keeps the documented example config loadable and valid.
func TestExampleConfigIsValid(t *testing.T) {
	c, err := LoadConfig("../examples/devices/abacus.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c.EnsureDefaults()
	if err := c.Validate([]string{"devices"}); err != nil {
		t.Fatal(err)
	}
	if c.Sinks.Aggregates.SaltBuckets != 16 || c.Sinks.Facts.Group != "devices-facts-sink" {
		t.Fatalf("example config read as %+v", c.Sinks)
	}
}

func TestExpandEnv(t *testing.T) {
	env := map[string]string{"A": "x", "EMPTY": ""}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	for in, want := range map[string]string{
		"plain $A stays":        "plain $A stays",
		"${A}-${A}":             "x-x",
		"e=${EMPTY}.":           "e=.",
		"no braces ${A":         "error: unterminated",
		"unset ${MISSING}":      "error: MISSING is not set",
		"# ${MISSING}\nk: ${A}": "# ${MISSING}\nk: x",
	} {
		got, err := expandEnv([]byte(in), lookup)
		if strings.HasPrefix(want, "error: ") {
			if err == nil || !strings.Contains(err.Error(), strings.TrimPrefix(want, "error: ")) {
				t.Errorf("%q: error %v, want %q", in, err, want)
			}
			continue
		}
		if err != nil || string(got) != want {
			t.Errorf("%q -> %q %v, want %q", in, got, err, want)
		}
	}
}

// TestTopicNamesPerEnvironment: the config names one compiled topology's topics for an
// environment; every command loads the same renamed topology, and a name the topology does not
// declare is refused.
func TestTopicNamesPerEnvironment(t *testing.T) {
	clearServiceEnv(t)
	p := Program{Topologies: []func() (*topology.Topology, error){devices.Topology}}
	for _, v := range []string{"ABACUS_KAFKA_BROKERS", "ABACUS_HBASE_ZK", "ABACUS_LISTEN", "ABACUS_TOPOLOGY", "ABACUS_TOPIC_PREFIX"} {
		t.Setenv(v, "") // the test's own config decides, whatever the environment of the run
	}
	dir := t.TempDir()
	write := func(body string) *common {
		path := filepath.Join(dir, "cfg.yaml")
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return &common{config: path}
	}
	base := "topology: devices\nkafka: {brokers: ['127.0.0.1:1']}\nhbase: {embedded: cells}\n"
	cfg, topo, err := p.load(write(base+"topics:\n  prefix: dev-\n  names: {device-readings: raw.readings}\n"), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(topo.Topics(), ","); got != "raw.readings,dev-devices-totals,dev-devices-dead-letter,dev-device-registry" {
		t.Fatalf("topics %s", got)
	}
	if cfg.Processor.Group != "dev-devices" || cfg.Sinks.Facts.Group != "dev-devices-facts-sink" {
		t.Fatalf("groups %q %q", cfg.Processor.Group, cfg.Sinks.Facts.Group)
	}
	t.Setenv("ABACUS_TOPIC_PREFIX", "prod-")
	if _, topo, err = p.load(write(base), io.Discard); err != nil || topo.TotalsTopic() != "prod-devices-totals" {
		t.Fatalf("prefix from the environment: %v %v", topo, err)
	}
	_, _, err = p.load(write(base+"topics:\n  names: {readings: x}\n"), io.Discard)
	if err == nil || !strings.Contains(err.Error(), `topics:`) || !strings.Contains(err.Error(), `"readings" is not a topic of topology devices`) {
		t.Fatalf("unknown topic name: %v", err)
	}
}

// TestConfigErrorsNeverShowPasswords: a mistake near a password, written in the file or expanded
// from ${VAR}, in block or flow style, or in a block scalar, gives an error that quotes the file
// without the password; the error still names the line and the mistake.
func TestConfigErrorsNeverShowPasswords(t *testing.T) {
	const secret = "s3cret-from-env"
	lookup := func(k string) (string, bool) { return secret, k == "PW" }
	for _, tc := range []struct{ name, yaml, want string }{
		{"typo beside an expanded password", "kafka:\n  sasl:\n    mechanism: PLAIN\n    username: u\n    password: ${PW}\n    passwrd: x\n", `line 6: kafka.sasl.passwrd: unknown field (did you mean password?)`},
		{"flow style, syntax error", "kafka:\n  sasl: {mechanism: PLAIN, password: ${PW}, username: [1}\n", "must be specified"},
		{"written in the file", "kafka:\n  sasl:\n    password: \"" + secret + "\"\n    mechanism: [PLAIN]\n", "mechanism"},
		{"wrong type", "kafka:\n  sasl:\n    password: [" + secret + "]\n", "line 3: kafka.sasl.password: a list is not text"},
		{"block scalar, syntax error", "kafka:\n  sasl:\n    password: |\n      " + secret + "\n  x: 1\nbad: [\n", "not found"},
		{"quoted key", "kafka:\n  sasl:\n    \"password\": '" + secret + "'\n    nope: 1\n", `line 4: kafka.sasl.nope: unknown field`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseConfig([]byte(tc.yaml), lookup)
			if err == nil {
				t.Fatal("accepted")
			}
			if strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), "s3cr") {
				t.Fatalf("the error shows the password:\n%v", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not say %q", err, tc.want)
			}
		})
	}
}

// TestKafkaSecurityConfig: the kafka.tls and kafka.sasl blocks are read from the file and from
// ABACUS_KAFKA_* variables (the environment wins), checked with the rest of the config, each
// mistake naming its field; the password never shows, however the config is printed.
func TestKafkaSecurityConfig(t *testing.T) {
	dir := t.TempDir()
	pwFile := filepath.Join(dir, "pw")
	if err := os.WriteFile(pwFile, []byte("from-a-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const pw = "hunter2-hunter2"
	c, err := ParseConfig([]byte(`topology: devices
kafka:
  brokers: [b:9094]
  tls: {enabled: true, server_name: kafka.internal}
  sasl: {mechanism: scram-sha-512, username: abacus, password: "${PW}"}
hbase: {embedded: cells}
`), func(k string) (string, bool) { return pw, k == "PW" })
	if err != nil {
		t.Fatal(err)
	}
	c.EnsureDefaults()
	if err := c.Validate([]string{"devices"}); err != nil {
		t.Fatal(err)
	}
	sec, err := c.Kafka.Security().Load()
	if err != nil || !sec.TLSEnabled() || sec.Mechanism() != "SCRAM-SHA-512" {
		t.Fatalf("settings %v %v", sec, err)
	}
	for _, s := range []string{fmt.Sprintf("%v %+v %#v %s", c, c, c, c.Kafka.SASL.Password), fmt.Sprint(sec)} {
		if strings.Contains(s, pw) {
			t.Fatalf("printed config shows the password: %s", s)
		}
	}

	env := map[string]string{
		"ABACUS_KAFKA_TLS_CA_FILE":        filepath.Join(dir, "missing-ca.pem"),
		"ABACUS_KAFKA_SASL_MECHANISM":     "PLAIN",
		"ABACUS_KAFKA_SASL_USERNAME":      "other",
		"ABACUS_KAFKA_SASL_PASSWORD_FILE": pwFile,
		"ABACUS_KAFKA_TLS":                "maybe",
	}
	c.ApplyEnv(func(k string) string { return env[k] })
	if c.Kafka.SASL.Password != "" || c.Kafka.SASL.PasswordFile != pwFile || c.Kafka.SASL.Username != "other" || !c.Kafka.TLS.Enabled {
		t.Fatalf("environment not applied: %+v %+v", c.Kafka.SASL, c.Kafka.TLS)
	}
	err = c.Validate([]string{"devices"})
	for _, want := range []string{`ABACUS_KAFKA_TLS: "maybe" is not true or false`,
		"kafka.tls.ca_file: open " + env["ABACUS_KAFKA_TLS_CA_FILE"] + ": no such file or directory"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("Validate: %v\nwant %q", err, want)
		}
	}
	c.Kafka.TLS = kafkasec.TLS{}
	c.Kafka.SASL.PasswordFile = ""
	if err := c.Validate([]string{"devices"}); err == nil || !strings.Contains(err.Error(), "kafka.sasl.password: required for PLAIN") {
		t.Fatalf("missing password: %v", err)
	}
}

// clearServiceEnv unsets the variables that testenv/services.sh env exports (the real services'
// addresses): ApplyEnv would apply them over configs that name an embedded store on purpose.
func clearServiceEnv(t *testing.T) {
	for _, k := range []string{"ABACUS_KAFKA_BROKERS", "ABACUS_HBASE_ZK", "ABACUS_LISTEN", "ABACUS_TOPOLOGY", "ABACUS_TOPIC_PREFIX"} {
		t.Setenv(k, "")
	}
}

// TestHBaseClientSettings: the hbase.client block and znode_parent reach the HBase client, unset
// ones keep its defaults, and impossible values are refused naming their field.
func TestHBaseClientSettings(t *testing.T) {
	c, err := ParseConfig([]byte(`topology: devices
kafka:
  brokers: [b:9092]
hbase:
  zookeeper: zk-1:2181,zk-2:2181
  znode_parent: /hbase-unsecure
  client: {rpc_timeout: 20s, max_in_flight_per_server: 4, max_rounds: 6, backoff_max: 2s, relocate_backoff_max: 500ms}
`), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	c.EnsureDefaults()
	if err := c.Validate([]string{"devices"}); err != nil {
		t.Fatal(err)
	}
	hc := c.HBase.ClientConfig()
	hc.EnsureDefaults()
	if hc.ZooKeeperRoot != "/hbase-unsecure" || hc.RPCTimeout != 20*time.Second || hc.MaxInFlightPerServer != 4 ||
		hc.MaxRounds != 6 || hc.BackoffMax != 2*time.Second || hc.RelocateBackoffMax != 500*time.Millisecond {
		t.Fatalf("client config %+v does not carry the settings", hc)
	}
	if hc.DialTimeout != 5*time.Second || hc.MaxInFlightPerRegion != 8 || hc.BackoffMin != 50*time.Millisecond {
		t.Fatalf("unset settings lost their defaults: %+v", hc)
	}

	c.HBase.Client = HBaseClient{RPCTimeout: Duration(-time.Second), MaxRounds: -1,
		BackoffMin: Duration(3 * time.Second), BackoffMax: Duration(time.Second)}
	c.HBase.ZNodeParent = "hbase"
	err = c.Validate([]string{"devices"})
	for _, want := range []string{"hbase.client.rpc_timeout: must not be negative", "hbase.client.max_rounds: must not be negative",
		"hbase.client.backoff_min: 3s is longer than hbase.client.backoff_max 1s", `hbase.znode_parent: "hbase" is not a ZooKeeper path`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate: %v\nwant %q", err, want)
		}
	}
}
