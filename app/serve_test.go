package app_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/abacus-stream/abacus/app"
	"github.com/abacus-stream/abacus/internal/testenv"
	"github.com/abacus-stream/abacus/schema"
	"github.com/abacus-stream/abacus/store/cellstore"
)

// serveInProcess runs `abacus serve` with the config until the test ends and returns the URL it
// prints and its log.
// createAggregateTable makes the aggregate table of the config's embedded store, as
// `abacus admin create` does: the query server only reads, and waits for it.
func createAggregateTable(t *testing.T, config string) {
	t.Helper()
	cfg, err := app.LoadConfig(config)
	if err != nil {
		t.Fatal(err)
	}
	cfg.EnsureDefaults()
	cs, err := cellstore.Open(cfg.HBase.Embedded)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	a := cfg.Sinks.Aggregates
	if err := cs.EnsureTable(context.Background(), schema.TableLayout{Name: a.Table, Family: a.Family, SaltBuckets: a.SaltBuckets}); err != nil {
		t.Fatal(err)
	}
}

func serveInProcess(t *testing.T, config string) (string, *testenv.SyncBuffer) {
	t.Helper()
	// The configs name an embedded store and no live view: the real services' addresses that
	// testenv/services.sh env exports must not apply over them.
	for _, k := range []string{"ABACUS_KAFKA_BROKERS", "ABACUS_HBASE_ZK", "ABACUS_LISTEN"} {
		t.Setenv(k, "")
	}
	createAggregateTable(t, config)
	ctx, cancel := context.WithCancel(context.Background())
	var stdout, stderr testenv.SyncBuffer
	done := make(chan int, 1)
	go func() {
		done <- program.Run(ctx, []string{"serve", "-config", config, "-log-level", "info"}, &stdout, &stderr)
		close(done) // a second receive (the cleanup after a failed start) gets 0 at once
	}()
	t.Cleanup(func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("serve exited %d: %s", code, stderr.String())
		}
	})
	re := regexp.MustCompile(`query API and dashboard: (\S+)/`)
	deadline := time.Now().Add(30 * time.Second)
	for {
		if m := re.FindStringSubmatch(stdout.String()); m != nil {
			return m[1], &stderr
		}
		select {
		case code := <-done:
			t.Fatalf("serve exited %d: %s", code, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve printed no URL in 30 s: %s", stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestServeTLSAuthAndSIGHUP: `abacus serve` with query.tls and query.auth speaks HTTPS only,
// admits only a token of its file (health checks excepted), takes the limits of the config, and
// reads a changed tokens file on SIGHUP.
func TestServeTLSAuthAndSIGHUP(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile, tokens := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem"), filepath.Join(dir, "tokens")
	pool := selfSigned(t, certFile, keyFile)
	const first, second = "first-token-0123456789abcdef", "second-token-0123456789abcdef"
	if err := os.WriteFile(tokens, []byte(first+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(dir, "cfg.yaml")
	if err := os.WriteFile(config, []byte(fmt.Sprintf(`topology: devices
kafka: {brokers: ["127.0.0.1:1"]}
hbase: {embedded: %q}
query:
  listen: 127.0.0.1:0
  no_live: true
  tls: {cert_file: %q, key_file: %q}
  auth: {tokens_file: %q}
  reload_interval: 1h   # only SIGHUP reloads within this test
  limits: {max_entities: 3}
`, filepath.Join(dir, "cells"), certFile, keyFile, tokens)), 0o600); err != nil {
		t.Fatal(err)
	}
	url, log := serveInProcess(t, config)
	if !strings.HasPrefix(url, "https://127.0.0.1:") {
		t.Fatalf("URL %s", url)
	}
	cl := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	get := func(path, token string) int {
		req, _ := http.NewRequest("GET", url+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := cl.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := get("/healthz", ""); code != 200 {
		t.Fatalf("/healthz: %d", code)
	}
	if code := get("/api/v1/topologies", ""); code != 401 {
		t.Fatalf("no token: %d", code)
	}
	if code := get("/api/v1/topologies", first); code != 200 {
		t.Fatalf("first token: %d", code)
	}
	if code := get("/api/v1/windows?set=minute&entity=a,b,c,d", first); code != 400 {
		t.Fatalf("4 entities with query.limits.max_entities 3: %d", code)
	}
	if resp, err := http.Get(strings.Replace(url, "https", "http", 1) + "/healthz"); err == nil {
		resp.Body.Close()
		if resp.StatusCode < 400 {
			t.Fatalf("plain HTTP answered %d", resp.StatusCode)
		}
	}

	if err := os.WriteFile(tokens, []byte(second+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for get("/api/v1/topologies", second) != 200 {
		if time.Now().After(deadline) {
			t.Fatalf("SIGHUP did not reload the tokens: %s", log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if code := get("/api/v1/topologies", first); code != 401 {
		t.Fatalf("the replaced token after SIGHUP: %d", code)
	}
	if !strings.Contains(log.String(), "SIGHUP: reloaded") {
		t.Fatalf("log: %s", log.String())
	}
}

// TestServeWarnsWhenExposed: listening beyond loopback without authentication logs a warning at
// start; on loopback it does not.
func TestServeWarnsWhenExposed(t *testing.T) {
	for _, tc := range []struct {
		listen string
		warn   bool
	}{{"127.0.0.1:0", false}, {"0.0.0.0:0", true}, {"[::1]:0", false}} {
		t.Run(tc.listen, func(t *testing.T) {
			dir := t.TempDir()
			config := filepath.Join(dir, "cfg.yaml")
			if err := os.WriteFile(config, []byte(fmt.Sprintf("topology: devices\nkafka: {brokers: [\"127.0.0.1:1\"]}\nhbase: {embedded: %q}\nquery: {listen: %q, no_live: true}\n",
				filepath.Join(dir, "cells"), tc.listen)), 0o600); err != nil {
				t.Fatal(err)
			}
			if tc.listen == "[::1]:0" {
				if ln, err := net.Listen("tcp", "[::1]:0"); err != nil {
					t.Skip("no IPv6 loopback on this machine: " + err.Error())
				} else {
					ln.Close()
				}
			}
			_, log := serveInProcess(t, config)
			if got := strings.Contains(log.String(), "listens beyond this machine without authentication"); got != tc.warn {
				t.Fatalf("warning %v, want %v: %s", got, tc.warn, log.String())
			}
		})
	}
}

// selfSigned writes a self-signed certificate for 127.0.0.1 and its key; the pool trusts it.
func selfSigned(t *testing.T, certFile, keyFile string) *x509.CertPool {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "abacus app test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true, IsCA: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(c)
	return pool
}
