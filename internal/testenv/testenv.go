// Package testenv gives integration tests clients of the real Kafka broker and HBase that
// testenv/services.sh runs on loopback, and the Kafka cluster and SASL listener of its other
// modes. Whether a test runs at all (skipped, or failed when the README's test command requires
// the services) is package gate's decision, which every helper here goes through.
package testenv

import (
	"os"
	"strings"
	"testing"

	"github.com/abacus-stream/abacus/hbase"
	"github.com/abacus-stream/abacus/internal/testenv/gate"
)

// Kafka returns the seed brokers of the real test broker, or skips (fails when gate.Required) the test.
func Kafka(t testing.TB) []string {
	t.Helper()
	return strings.Split(gate.Find(t, "Kafka broker", gate.EnvKafka, "127.0.0.1:9092"), ",")
}

// HBaseConfig returns the client configuration of the test HBase: the plain cluster of
// gate.HBaseZooKeeper, or with ABACUS_HBASE_AUTH=kerberos the same quorum with Kerberos authentication as
// the secure mode's client principal and keytab. It skips (fails when gate.Required) like gate.HBaseZooKeeper.
func HBaseConfig(t testing.TB) hbase.Config {
	t.Helper()
	cfg := hbase.Config{ZooKeeper: gate.HBaseZooKeeper(t)}
	switch a := os.Getenv(gate.EnvHBaseAuth); a {
	case "", hbase.AuthSimple:
	case hbase.AuthKerberos:
		cfg.Auth = hbase.AuthKerberos
		cfg.Kerberos = kerberosSettings(t)
	default:
		t.Fatalf("%s=%q: want %q or %q", gate.EnvHBaseAuth, a, hbase.AuthSimple, hbase.AuthKerberos)
	}
	return cfg
}

func kerberosSettings(t testing.TB) hbase.KerberosConfig {
	t.Helper()
	k := hbase.KerberosConfig{
		Principal:       os.Getenv(gate.EnvKrbPrincipal),
		Keytab:          os.Getenv(gate.EnvKrbKeytab),
		Krb5Conf:        os.Getenv(gate.EnvKrb5Conf),
		ServerPrincipal: os.Getenv(gate.EnvKrbServerPrincipal),
	}
	if k.Keytab == "" || k.Principal == "" || k.Krb5Conf == "" {
		t.Fatalf("%s=kerberos needs %s, %s and %s (testenv/services.sh env prints them in secure mode)",
			gate.EnvHBaseAuth, gate.EnvKrbPrincipal, gate.EnvKrbKeytab, gate.EnvKrb5Conf)
	}
	return k
}
