package app_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/abacus-stream/abacus/app"
	"github.com/abacus-stream/abacus/hbase"
	"github.com/abacus-stream/abacus/internal/testenv"
	"github.com/abacus-stream/abacus/internal/testenv/gate"
	"github.com/abacus-stream/abacus/partitioner/franz"
	"github.com/abacus-stream/abacus/store"
	"github.com/abacus-stream/abacus/store/hbasestore"
	"github.com/abacus-stream/abacus/totals"
	"github.com/rogpeppe/go-internal/testscript"
	"github.com/twmb/franz-go/pkg/kgo"
)

// saslEnv is the environment the SASL scripts and tests run in: the SASL_SSL listener as the
// brokers, its CA, a CA that signed nothing the broker has, and each mechanism's user and
// password (the configs take passwords from ${VAR} or a password file, never written in them).
func saslEnv(t *testing.T, k testenv.KafkaSASL, dir string) map[string]string {
	env := map[string]string{
		"ABACUS_KAFKA_BROKERS": strings.Join(k.Brokers, ","),
		"CA_FILE":              k.CAFile,
		"UNTRUSTED_CA_FILE":    k.UntrustedCAFile,
	}
	for mech, u := range k.Users {
		name := strings.TrimPrefix(mech, "SCRAM-SHA-") // PLAIN, 256, 512
		env["USER_"+name] = u.Name
		env["PASSWORD_"+name] = u.Password
		// A password file, as secrets are mounted in containers (with the newline editors add).
		f := filepath.Join(dir, "password-"+name)
		if err := os.WriteFile(f, []byte(u.Password+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		env["PASSWORD_FILE_"+name] = f
	}
	return env
}

// TestCLISASL runs the scripts in testdata/sasl against the real broker's SASL_SSL listener:
// the processor, both sinks, the live view, admin and offsets over TLS with SCRAM-SHA-512,
// SCRAM-SHA-256 and PLAIN, each mechanism in at least one script.
func TestCLISASL(t *testing.T) {
	k := testenv.KafkaSASLListener(t)
	quorum := gate.HBaseZooKeeper(t)
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	secrets := t.TempDir()
	env := saslEnv(t, k, secrets)
	testscript.Run(t, testscript.Params{
		Dir: "testdata/sasl",
		Setup: func(e *testscript.Env) error {
			for k, v := range env {
				e.Setenv(k, v)
			}
			e.Setenv("ABACUS_HBASE_ZK", quorum)
			e.Setenv("RUN", run)
			return nil
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			// produce-readings CONFIG N AGO writes N device readings through the config's Kafka
			// settings, event times spread evenly from AGO before now up to now, in time order.
			"produce-readings": func(ts *testscript.TestScript, neg bool, args []string) {
				if len(args) != 3 {
					ts.Fatalf("usage: produce-readings CONFIG N AGO")
				}
				n, err := strconv.Atoi(args[1])
				ts.Check(err)
				ago, err := time.ParseDuration(args[2])
				ts.Check(err)
				cl := scriptClient(ts, args[0], kgo.RecordPartitioner(franz.Partitioner()))
				defer cl.Close()
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				var recs []*kgo.Record
				now := time.Now().UnixMilli()
				step := ago.Milliseconds() / int64(n)
				for i := range n {
					dev := fmt.Sprintf("device-%03d", i%10)
					v := fmt.Sprintf(`{"device":%q,"sensor":"s%d","ts":%d,"temp":%d,"humidity":50,"kind":"reading"}`,
						dev, i%3, now-ago.Milliseconds()+int64(i)*step, 20+i%5)
					recs = append(recs, &kgo.Record{Topic: ts.Getenv("SOURCE"), Key: []byte(dev), Value: []byte(v)})
				}
				ts.Check(cl.ProduceSync(ctx, recs...).FirstErr())
			},
			// count-cells TABLE MIN fails unless the HBase table holds at least MIN cells: what a
			// sink wrote there, read back independently of abacus's readers.
			"count-cells": func(ts *testscript.TestScript, neg bool, args []string) {
				if len(args) != 2 {
					ts.Fatalf("usage: count-cells TABLE MIN")
				}
				want, err := strconv.Atoi(args[1])
				ts.Check(err)
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				hc, err := hbase.NewClient(ctx, hbase.Config{ZooKeeper: ts.Getenv("ABACUS_HBASE_ZK")})
				ts.Check(err)
				defer hc.Close()
				st, err := hbasestore.New(hc, hbasestore.Config{})
				ts.Check(err)
				n := 0
				ts.Check(st.Scan(ctx, store.ScanSpec{Table: args[0]}, func(_ []byte, cells []store.Cell) bool { n += len(cells); return true }))
				if n < want {
					ts.Fatalf("table %s holds %d cells, want at least %d", args[0], n, want)
				}
				ts.Logf("table %s: %d cells", args[0], n)
			},
			// read-finals CONFIG TOPIC MIN reads TOPIC (a totals topic) from the start through the
			// config's Kafka settings and fails unless it holds at least MIN final totals.
			"read-finals": func(ts *testscript.TestScript, neg bool, args []string) {
				if len(args) != 3 {
					ts.Fatalf("usage: read-finals CONFIG TOPIC MIN")
				}
				want, err := strconv.Atoi(args[2])
				ts.Check(err)
				cl := scriptClient(ts, args[0], kgo.ConsumeTopics(args[1]), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
				defer cl.Close()
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				finals, all := 0, 0
				for finals < want {
					fs := cl.PollFetches(ctx)
					if ctx.Err() != nil {
						ts.Fatalf("%s: %d totals, %d final, want %d final", args[1], all, finals, want)
					}
					if errs := fs.Errors(); len(errs) > 0 {
						ts.Fatalf("fetch %s over SASL_SSL: %v", args[1], errs[0].Err)
					}
					fs.EachRecord(func(r *kgo.Record) {
						rec, err := totals.Decode(r.Value)
						ts.Check(err)
						all++
						if rec.Final {
							finals++
						}
					})
				}
				ts.Logf("%s: %d final totals read over SASL_SSL", args[1], finals)
			},
		},
	})
}

// scriptClient is a franz-go client with the brokers and security of a script's config file, read
// as the abacus command reads it in the script's environment.
func scriptClient(ts *testscript.TestScript, config string, opts ...kgo.Opt) *kgo.Client {
	b, err := os.ReadFile(ts.MkAbs(config))
	ts.Check(err)
	lookup := func(k string) (string, bool) { v := ts.Getenv(k); return v, v != "" }
	cfg, err := app.ParseConfig(b, lookup)
	ts.Check(err)
	cfg.ApplyEnv(ts.Getenv)
	sec, err := cfg.Kafka.Security().Load()
	ts.Check(err)
	cl, err := kgo.NewClient(append(append(sec.KgoOpts(), kgo.SeedBrokers(cfg.Kafka.Brokers...)), opts...)...)
	ts.Check(err)
	return cl
}

// failFast is how long a refused Kafka login or certificate may take to stop a command.
const failFast = 15 * time.Second

// TestSASLFailsFast: every command that reaches Kafka stops within seconds with an error naming
// the setting at fault when the password is wrong or the CA does not sign the broker's
// certificate, instead of retrying in the background: admin, offsets, each role of run, serve
// (its live view) and the demo against real brokers.
func TestSASLFailsFast(t *testing.T) {
	k := testenv.KafkaSASLListener(t)
	quorum := gate.HBaseZooKeeper(t)
	dir := t.TempDir()
	u := k.Users["SCRAM-SHA-256"]
	cfg := func(name, ca, password string) string {
		path := filepath.Join(dir, name+".yaml")
		body := fmt.Sprintf(`topology: devices
topics: {prefix: failfast-}
kafka:
  brokers: [%s]
  tls: {enabled: true, ca_file: %s}
  sasl: {mechanism: SCRAM-SHA-256, username: %s, password: "%s"}
hbase: {zookeeper: %q}
`, strings.Join(k.Brokers, ", "), ca, u.Name, password, quorum)
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	const wrong = "not-the-password-4711"
	for _, tc := range []struct {
		name, config, want string
		secret             string // must not appear in the output
	}{
		{"wrong password", cfg("wrong-password", k.CAFile, wrong),
			"kafka.sasl.username, kafka.sasl.password: broker " + k.Brokers[0] + " refused SCRAM-SHA-256 login of user \"" + u.Name + "\"", wrong},
		{"untrusted CA", cfg("untrusted", k.UntrustedCAFile, u.Password),
			"kafka.tls.ca_file: the certificate of broker " + k.Brokers[0] + " is not signed by a CA of kafka.tls.ca_file", u.Password},
	} {
		for _, args := range [][]string{
			{"admin", "verify"},
			{"offsets", "show", "-sink", "facts"},
			{"run", "-roles", "processor"},
			{"run", "-roles", "aggregates-sink"},
			{"run", "-roles", "facts-sink"},
			{"serve", "-listen", "127.0.0.1:0"},
		} {
			t.Run(tc.name+"/"+strings.Join(args, " "), func(t *testing.T) {
				argv := append(args[:len(args):len(args)], "-config", tc.config)
				code, out, took := runAbacus(t, []string{"ABACUS_KAFKA_BROKERS=" + strings.Join(k.Brokers, ",")}, argv...)
				checkFailFast(t, code, out, took, tc.want, tc.secret)
			})
		}
		t.Run(tc.name+"/demo", func(t *testing.T) {
			// The demo has no config file: its security comes from the environment.
			ca := k.CAFile
			password := u.Password
			if tc.secret == wrong {
				password = wrong
			} else {
				ca = k.UntrustedCAFile
			}
			env := []string{"ABACUS_KAFKA_TLS_CA_FILE=" + ca, "ABACUS_KAFKA_SASL_MECHANISM=SCRAM-SHA-256",
				"ABACUS_KAFKA_SASL_USERNAME=" + u.Name, "ABACUS_KAFKA_SASL_PASSWORD=" + password}
			code, out, took := runAbacus(t, env, "demo", "-kafka", strings.Join(k.Brokers, ","), "-listen", "127.0.0.1:0",
				"-data", t.TempDir())
			checkFailFast(t, code, out, took, tc.want, tc.secret)
		})
	}
}

// runAbacus runs the abacus command (this test binary as abacus, as testscript does) and returns
// its exit code, its output and how long it took.
func runAbacus(t *testing.T, env []string, args ...string) (int, string, time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*failFast)
	defer cancel()
	// testscript.Main put this test binary on the PATH as abacus.
	cmd := exec.CommandContext(ctx, "abacus", args...)
	cmd.Env = append(os.Environ(), env...)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	took := time.Since(start)
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("abacus %v: %v", args, err)
	}
	return code, string(out), took
}

func checkFailFast(t *testing.T, code int, out string, took time.Duration, want, secret string) {
	t.Helper()
	if code != 1 {
		t.Fatalf("exit code %d, want 1; output:\n%s", code, out)
	}
	if took > failFast {
		t.Fatalf("took %v to fail, want under %v; output:\n%s", took, failFast, out)
	}
	if !strings.Contains(out, want) {
		t.Fatalf("output does not name the setting at fault:\n%s\nwant %q", out, want)
	}
	if strings.Contains(out, secret) {
		t.Fatalf("output shows the password:\n%s", out)
	}
	t.Logf("failed in %v: %s", took.Round(time.Millisecond), strings.TrimSpace(out))
}
