// Package gate decides whether a test runs against the real services that testenv/services.sh
// starts on loopback: it finds them from the environment, and skips a test when one cannot be
// reached, or fails it when ABACUS_REQUIRE_SERVICES=1 (set by testenv/run-tests.sh, the README's
// test command), so that a run that should prove something against the real servers can never pass
// by skipping. It imports nothing from abacus, so that every package's tests can use it, the
// hbase client's included (package testenv, which builds clients on it, imports hbase).
package gate

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Environment variables read by this package and testenv; testenv/services.sh env prints them.
const (
	EnvKafka   = "ABACUS_KAFKA_BROKERS" // comma-separated host:port list
	EnvHBaseZK = "ABACUS_HBASE_ZK"      // ZooKeeper quorum of the test HBase
	EnvRequire = "ABACUS_REQUIRE_SERVICES"
)

// StartHint tells how to start the real services, for a message that skips a test.
const StartHint = "start the real services with `testenv/services.sh start` " +
	"(or run everything with `testenv/run-tests.sh`)"

// Required reports whether missing services must fail tests rather than skip them.
func Required() bool { return os.Getenv(EnvRequire) == "1" }

// HBaseZooKeeper returns the ZooKeeper quorum of the real test HBase, or skips (fails when Required)
// the test.
func HBaseZooKeeper(t testing.TB) string {
	t.Helper()
	return Find(t, "HBase", EnvHBaseZK, "127.0.0.1:2181")
}

// Environment of the Kerberized test HBase (testenv/services.sh secure mode, SERVICES="kdc
// secure-hbase"); `testenv/services.sh env` prints them.
const (
	// EnvHBaseAuth set to "kerberos" makes HBaseConfig return the Kerberized cluster's settings, so
	// that tests written against the plain HBase run unchanged against the secure one (with
	// ABACUS_HBASE_ZK pointing at its ZooKeeper), as testenv/run-tests.sh's Kerberos stage does.
	EnvHBaseAuth          = "ABACUS_HBASE_AUTH"
	EnvSecureHBaseZK      = "ABACUS_SECURE_HBASE_ZK"
	EnvKrb5Conf           = "ABACUS_KRB5_CONF"
	EnvKrbPrincipal       = "ABACUS_KRB_PRINCIPAL"
	EnvKrbKeytab          = "ABACUS_KRB_KEYTAB"
	EnvKrbServerPrincipal = "ABACUS_KRB_SERVER_PRINCIPAL"
	// EnvRequireSecure makes a missing Kerberized HBase fail tests that need it instead of skipping.
	EnvRequireSecure = "ABACUS_REQUIRE_SECURE_HBASE"
)

// EnvNoServices set to 1 says a run has no services on purpose: testenv/run-tests.sh's unit stage
// runs every test with it while the services are still starting, and then runs in its main stage,
// against them, exactly the tests that skipped with NoServicesMark. A test that needs a service
// then skips at once, without looking for one, since the services may already answer at their
// default addresses.
const EnvNoServices = "ABACUS_NO_SERVICES"

// NoServicesMark begins the skip message of a test that needs a service under EnvNoServices: the
// test command finds the tests its main stage runs by it (testenv/testlog).
const NoServicesMark = "[needs a service]"

// NoServices reports whether this run has no services on purpose (EnvNoServices).
func NoServices() bool { return os.Getenv(EnvNoServices) == "1" }

// Unavailable ends a test that lacks what it needs, msg saying what and how to get it: a skip
// marked NoServicesMark under EnvNoServices, a failure when Required, a skip otherwise. Every
// helper that looks for a service or an outside program the test command provides ends through it.
func Unavailable(t testing.TB, msg string) {
	t.Helper()
	switch {
	case NoServices():
		t.Skip(NoServicesMark + " " + msg)
	case Required():
		t.Fatal(msg)
	default:
		t.Skip(msg)
	}
}

// Find returns the address list in env (or def when env is unset) if its first address accepts a
// TCP connection; otherwise it ends the test through Unavailable. what names the service in the
// message.
func Find(t testing.TB, what, env, def string) string {
	t.Helper()
	if NoServices() {
		Unavailable(t, what+" ("+env+"): "+EnvNoServices+"=1")
		return ""
	}
	addrs := os.Getenv(env)
	if addrs == "" {
		addrs = def
	}
	first := strings.Split(addrs, ",")[0]
	c, err := net.DialTimeout("tcp", first, 2*time.Second)
	if err == nil {
		c.Close()
		return addrs
	}
	Unavailable(t, what+" not reachable at "+first+" ("+env+"): "+err.Error()+"; "+StartHint)
	return ""
}

// EnvDisruptive enables tests that stop and restart the shared services. testenv/run-tests.sh runs
// them on their own, after every other test, because they would break tests running beside them.
const EnvDisruptive = "ABACUS_DISRUPTIVE"

// Disruptive skips the test unless disruptive tests were asked for. Such tests are named
// TestDisruptive* so the test command can run them apart.
func Disruptive(t testing.TB) {
	t.Helper()
	if os.Getenv(EnvDisruptive) != "1" {
		t.Skip("stops shared services: runs only with " + EnvDisruptive + "=1, as testenv/run-tests.sh does after the other tests")
	}
}

// StopService stops "kafka" or "hbase" through testenv/services.sh.
func StopService(t testing.TB, name string) { t.Helper(); ServiceCommand(t, name, "stop") }

// StartService starts "kafka" or "hbase" through testenv/services.sh and waits until it answers.
func StartService(t testing.TB, name string) { t.Helper(); ServiceCommand(t, name, "start") }

// ServiceCommand runs testenv/services.sh with args (such as "kill-broker 1" or "kill-hbase")
// for the service name ("kafka" or "hbase"), failing the test if it fails.
func ServiceCommand(t testing.TB, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(ServicesScript(t), args...)
	cmd.Env = append(os.Environ(), "SERVICES="+name)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("testenv/services.sh %s (%s): %v\n%s", strings.Join(args, " "), name, err, out)
	}
	t.Logf("testenv/services.sh %s (%s):\n%s", strings.Join(args, " "), name, out)
}

// ServicesScript returns the path of testenv/services.sh, found above the test's directory.
func ServicesScript(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "testenv", "services.sh")); err == nil {
			return filepath.Join(dir, "testenv", "services.sh")
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("testenv/services.sh not found above the test's directory")
		}
		dir = parent
	}
}
