package app

import (
	"fmt"
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
