package app

import (
	"strings"
	"testing"
)

// FuzzConfig feeds arbitrary text to the config loader as a config file: ${NAME} expansion,
// YAML decoding, the redaction of passwords from errors, defaults and validation must never
// panic or hang, whatever the file says.
func FuzzConfig(f *testing.F) {
	for _, s := range []string{
		"topology: devices\nkafka:\n  brokers: [127.0.0.1:9092]\nhbase:\n  zookeeper: 127.0.0.1:2181\n",
		"topology: devices\nkafka:\n  brokers: [b:9094]\n  tls: {enabled: true, ca_file: ca.pem}\n  sasl: {mechanism: SCRAM-SHA-512, username: u, password: ${PW}}\n",
		"kafka:\n  sasl:\n    password: |\n      x\n  nope: [\n",
		"query:\n  listen: 0.0.0.0:8443\n  tls: {cert_file: c, key_file: k}\n  auth: {tokens_file: t}\n  limits: {max_entities: -1, write_timeout: 1s}\n",
		"sinks:\n  aggregates: {salt_buckets: 300}\n  durability: skip_wal\nprocessor: {idle_timeout: soon}\n",
		"topics: {prefix: dev-, names: {a: b}}\n# ${UNSET}\nx: ${",
		"{{{{{{{{[[[[[[[[",
		"",
	} {
		f.Add(s)
	}
	lookup := func(name string) (string, bool) {
		if name == "UNSET" || strings.Contains(name, "$") {
			return "", false
		}
		return "value-of-" + name, true
	}
	f.Fuzz(func(t *testing.T, text string) {
		if _, err := expandEnv([]byte(text), lookup); err != nil && !strings.Contains(err.Error(), "line ") {
			t.Fatalf("expandEnv error without a line: %v", err)
		}
		c, err := ParseConfig([]byte(text), lookup)
		if err != nil {
			return
		}
		c.ApplyEnv(func(string) string { return "" })
		c.EnsureDefaults()
		// Validate reads the files the config names: point them where nothing is, so that a
		// generated path (a FIFO, a terminal) cannot block the fuzzer.
		for _, p := range []*string{&c.Kafka.TLS.CAFile, &c.Kafka.TLS.CertFile, &c.Kafka.TLS.KeyFile, &c.Kafka.SASL.PasswordFile,
			&c.Query.TLS.CertFile, &c.Query.TLS.KeyFile, &c.Query.Auth.TokensFile, &c.Query.Auth.BasicFile} {
			if *p != "" {
				*p = "/nonexistent/abacus-fuzz"
			}
		}
		_ = c.Validate([]string{"devices"})
	})
}
