package app

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/abacus-stream/abacus/examples/devices"
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
	cfg, topo, err := p.load(write(base + "topics:\n  prefix: dev-\n  names: {device-readings: raw.readings}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(topo.Topics(), ","); got != "raw.readings,dev-devices-totals,dev-devices-dead-letter" {
		t.Fatalf("topics %s", got)
	}
	if cfg.Processor.Group != "dev-devices" || cfg.Sinks.Facts.Group != "dev-devices-facts-sink" {
		t.Fatalf("groups %q %q", cfg.Processor.Group, cfg.Sinks.Facts.Group)
	}
	t.Setenv("ABACUS_TOPIC_PREFIX", "prod-")
	if _, topo, err = p.load(write(base)); err != nil || topo.TotalsTopic() != "prod-devices-totals" {
		t.Fatalf("prefix from the environment: %v %v", topo, err)
	}
	_, _, err = p.load(write(base + "topics:\n  names: {readings: x}\n"))
	if err == nil || !strings.Contains(err.Error(), `topics:`) || !strings.Contains(err.Error(), `"readings" is not a topic of topology devices`) {
		t.Fatalf("unknown topic name: %v", err)
	}
}
