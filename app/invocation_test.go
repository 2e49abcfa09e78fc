package app_test

import (
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/abacus-stream/abacus/app"
)

// TestEnvVarsAreRead checks EnvVars against ApplyEnv from the other side: each variable it lists,
// set alone, changes the config, so none is listed that the config ignores.
func TestEnvVarsAreRead(t *testing.T) {
	names := app.EnvVars()
	if len(names) < 10 || !slices.IsSorted(names) {
		t.Fatalf("EnvVars = %v: want the sorted list of ApplyEnv's variables", names)
	}
	for _, want := range []string{"ABACUS_KAFKA_BROKERS", "ABACUS_INSTANCE_ID", "ABACUS_OPS_LISTEN", "ABACUS_KAFKA_SASL_PASSWORD_FILE"} {
		if !slices.Contains(names, want) {
			t.Errorf("EnvVars lacks %s", want)
		}
	}
	for _, n := range names {
		if !strings.HasPrefix(n, "ABACUS_") {
			t.Errorf("EnvVars lists %s, not an ABACUS_ variable", n)
		}
		value := "h:1"
		if n == "ABACUS_KAFKA_TLS" {
			value = "true"
		}
		var empty, set app.Config
		empty.ApplyEnv(func(string) string { return "" })
		set.ApplyEnv(func(name string) string {
			if name == n {
				return value
			}
			return ""
		})
		if reflect.DeepEqual(empty, set) {
			t.Errorf("%s=%s changes nothing in the config", n, value)
		}
	}
}

// TestParseCommandLine checks that the parse-only entry point accepts what Run accepts, refuses
// what Run refuses as a usage mistake, and reaches nothing (the config file does not exist).
func TestParseCommandLine(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		command string
		roles   []string
	}{
		{[]string{"run", "-config", "/no/such.yaml", "-roles", "processor,facts-sink"}, "run", []string{"processor", "facts-sink"}},
		{[]string{"run", "-config", "/no/such.yaml"}, "run", app.RoleNames()},
		{[]string{"serve", "-config", "/no/such.yaml", "-ops-listen", "0.0.0.0:9360"}, "serve", []string{app.RoleQuery}},
		{[]string{"admin", "create", "-config", "/no/such.yaml", "-partitions", "12"}, "admin create", nil},
		{[]string{"offsets", "show", "-config", "/no/such.yaml", "-sink", "facts"}, "offsets show", nil},
		{[]string{"status", "-config", "/no/such.yaml"}, "status", nil},
		{[]string{"query", "-config", "/no/such.yaml", "-set", "minute", "-entity", "d"}, "query", nil},
		{[]string{"demo", "-for", "1s"}, "demo", app.RoleNames()},
	} {
		inv, err := program.ParseCommandLine(tc.args)
		if err != nil {
			t.Errorf("%v: %v", tc.args, err)
			continue
		}
		if inv.Command != tc.command || !slices.Equal(inv.Roles, tc.roles) {
			t.Errorf("%v: command %q roles %v, want %q %v", tc.args, inv.Command, inv.Roles, tc.command, tc.roles)
		}
		if inv.Flags["config"] != "" && inv.Flags["config"] != "/no/such.yaml" {
			t.Errorf("%v: flags %v", tc.args, inv.Flags)
		}
	}
	for _, bad := range [][]string{
		{"run", "-config", "x", "-roles", "processer"},
		{"run", "-roles", "processor"},
		{"run", "-config", "x", "-no-such-flag"},
		{"serve"},
		{"admin", "delete", "-config", "x"},
		{"offsets", "show", "-config", "x"},
		{"nonsense"},
		{"run", "-h"},
		{"version"},
	} {
		if inv, err := program.ParseCommandLine(bad); err == nil {
			t.Errorf("%v accepted: %+v", bad, inv)
		}
	}
}

// TestResolveConfig checks that a deployment's config is resolved as the command resolves it:
// file, then environment, then flags.
func TestResolveConfig(t *testing.T) {
	file, err := os.ReadFile("../examples/devices/abacus.yaml")
	if err != nil {
		t.Fatal(err)
	}
	inv, err := program.ParseCommandLine([]string{"run", "-config", "/etc/abacus/abacus.yaml", "-roles", "processor", "-instance-id", "p-0"})
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"ABACUS_KAFKA_BROKERS": "kafka:9092", "ABACUS_OPS_LISTEN": "0.0.0.0:9360", "ABACUS_INSTANCE_ID": "ignored"}
	lookup := func(n string) (string, bool) { v, ok := env[n]; return v, ok }
	cfg, err := program.ResolveConfig(inv, file, lookup)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(cfg.Kafka.Brokers, ","); got != "kafka:9092" {
		t.Errorf("brokers %s, want the environment's", got)
	}
	if cfg.Membership.InstanceID != "p-0" {
		t.Errorf("instance id %q, want the flag's", cfg.Membership.InstanceID)
	}
	if got := cfg.OpsListenAddr(inv.Roles); got != "0.0.0.0:9360" {
		t.Errorf("ops listen %q", got)
	}
	if got := cfg.Processor.StoragePath; got != "/var/lib/abacus/devices" {
		t.Errorf("storage path %q, want the file's", got)
	}
	env["ABACUS_LISTEN"] = "bad"
	if _, err := program.ResolveConfig(inv, file, lookup); err == nil {
		t.Error("a bad ABACUS_LISTEN validated")
	}
}

// TestOpsListenAddr checks where each kind of process serves its ops endpoints.
func TestOpsListenAddr(t *testing.T) {
	cfg := &app.Config{Query: app.QueryConfig{Listen: "0.0.0.0:8080"}}
	for _, tc := range []struct {
		ops   string
		roles []string
		want  string
	}{
		{"", []string{app.RoleQuery}, "0.0.0.0:8080"},
		{"", []string{app.RoleProcessor}, "127.0.0.1:9361"},
		{"", []string{app.RoleFacts}, "127.0.0.1:9363"},
		{"", app.RoleNames(), "0.0.0.0:8080"},
		{"0.0.0.0:9360", []string{app.RoleQuery}, "0.0.0.0:9360"},
		{"off", []string{app.RoleQuery}, ""},
	} {
		cfg.Ops.Listen = tc.ops
		if got := cfg.OpsListenAddr(tc.roles); got != tc.want {
			t.Errorf("ops.listen %q roles %v: %q, want %q", tc.ops, tc.roles, got, tc.want)
		}
	}
}
