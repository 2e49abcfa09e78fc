package app

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/abacus-stream/abacus/examples/devices"
	"github.com/abacus-stream/abacus/topology"
)

// TestLogFormats: log.format json writes one JSON object per line, text key=value lines; the
// level filters; a wrong value is a config error naming its field, from the file, the
// environment or the flag alike.
func TestLogFormats(t *testing.T) {
	var buf bytes.Buffer
	log, err := logger(LogConfig{Level: "warn", Format: "json"}, &buf)
	if err != nil {
		t.Fatal(err)
	}
	log.Info("dropped")
	log.Warn("kept", "table", "t1")
	var rec map[string]any
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil || rec["msg"] != "kept" || rec["table"] != "t1" || rec["level"] != "WARN" {
		t.Fatalf("json log %q: %v %v", buf.String(), rec, err)
	}
	buf.Reset()
	if log, err = logger(LogConfig{}, &buf); err != nil {
		t.Fatal(err)
	}
	log.Info("hello", "k", "v")
	if !strings.Contains(buf.String(), "level=INFO msg=hello k=v") {
		t.Fatalf("default log line %q, want text at info", buf.String())
	}

	for _, c := range []struct {
		env   map[string]string
		flags common
		want  string
	}{
		{env: map[string]string{"ABACUS_LOG_FORMAT": "xml"}, want: `log.format: "xml" is not text or json`},
		{env: map[string]string{"ABACUS_LOG_LEVEL": "loud"}, want: `log.level: "loud" is not debug, info, warn or error`},
		{flags: common{logFormat: "yaml"}, want: `log.format: "yaml"`},
	} {
		cfg := &Config{Topology: "devices", Kafka: KafkaConfig{Brokers: []string{"b:9092"}}}
		cfg.HBase.Embedded = "x"
		_, _, err := Program{Topologies: []func() (*topology.Topology, error){devices.Topology}}.resolve(&c.flags, cfg, func(k string) string { return c.env[k] })
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("env %v flags %+v: %v, want %q", c.env, c.flags, err, c.want)
		}
	}
}

// TestRolesFromEnvironment: ABACUS_ROLES picks the roles of run when -roles does not.
func TestRolesFromEnvironment(t *testing.T) {
	t.Setenv("ABACUS_ROLES", "facts-sink,processor")
	p := Program{Topologies: []func() (*topology.Topology, error){devices.Topology}}
	inv, err := p.ParseCommandLine([]string{"run", "-config", "x.yaml"})
	if err != nil || !slices.Equal(inv.Roles, []string{RoleFacts, RoleProcessor}) {
		t.Fatalf("ABACUS_ROLES=facts-sink,processor: %v %v", inv, err)
	}
	if inv, err = p.ParseCommandLine([]string{"run", "-config", "x.yaml", "-roles", "query"}); err != nil || !slices.Equal(inv.Roles, []string{RoleQuery}) {
		t.Fatalf("-roles query over ABACUS_ROLES: %v %v", inv, err)
	}
	t.Setenv("ABACUS_ROLES", "juggler")
	if _, err := p.ParseCommandLine([]string{"run", "-config", "x.yaml"}); err == nil || !strings.Contains(err.Error(), `ABACUS_ROLES: unknown role "juggler"`) {
		t.Fatalf("ABACUS_ROLES=juggler: %v", err)
	}
}

// TestUnknownEnvironmentVariables: an ABACUS_* variable abacus does not read is named at start,
// with the one it was probably meant to be.
func TestUnknownEnvironmentVariables(t *testing.T) {
	got := unknownEnv([]string{"PATH=/bin", "ABACUS_KAFKA_BROKER=b:9092", "ABACUS_HBASE_ZK=zk", "ABACUS_ROLES=query",
		"ABACUS_LOG_LEVLE=debug", "ABACUS_FROBNICATE=1", "ABACUS_TOPIC_PREFIX=dev-"})
	want := []string{
		"ABACUS_FROBNICATE is set but is not a variable abacus reads",
		"ABACUS_KAFKA_BROKER is set but is not a variable abacus reads (did you mean ABACUS_KAFKA_BROKERS?)",
		"ABACUS_LOG_LEVLE is set but is not a variable abacus reads (did you mean ABACUS_LOG_LEVEL?)",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("unknownEnv:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
