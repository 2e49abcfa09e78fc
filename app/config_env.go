package app

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/abacus-stream/abacus/kafkasec"
)

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
	if v := getenv("ABACUS_LOG_LEVEL"); v != "" {
		c.Log.Level = v
	}
	if v := getenv("ABACUS_LOG_FORMAT"); v != "" {
		c.Log.Format = v
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

// splitList reads a comma-separated list, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// unknownEnv words a warning for each ABACUS_* variable of environ that abacus does not read
// (EnvVars, and ABACUS_ROLES of run), with the known name it is closest to: a misspelt variable
// is otherwise silently ignored, and the process runs with the setting it was meant to change.
func unknownEnv(environ []string) []string {
	known := append(EnvVars(), "ABACUS_ROLES")
	var out []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, "ABACUS_") || slices.Contains(known, name) {
			continue
		}
		w := name + " is set but is not a variable abacus reads"
		best, dist := "", 4 // suggest only a name at most 3 edits away
		for _, k := range known {
			if d := editDistance(name, k); d < dist {
				best, dist = k, d
			}
		}
		if best != "" {
			w += " (did you mean " + best + "?)"
		}
		out = append(out, w)
	}
	sort.Strings(out)
	return out
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
