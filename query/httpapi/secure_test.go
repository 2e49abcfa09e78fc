package httpapi

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/abacus-stream/abacus/internal/testenv"
	"github.com/abacus-stream/abacus/query"
	"github.com/abacus-stream/abacus/query/httpsec"
	"github.com/abacus-stream/abacus/query/internal/querytest"
	"github.com/abacus-stream/abacus/store"
)

const (
	goodToken = "token-for-grafana-0123456789"
	oldToken  = "token-rotated-out-0123456789"
)

// secureServer starts srv (seeded windows of ab1 and ab12) on a loopback port with Serve, the
// dashboard mounted and Secure around everything, as app does; it returns the base URL.
func secureServer(t *testing.T, srv *Server) string {
	t.Helper()
	if srv.Topologies == nil {
		st, table := querytest.CellStore(t)
		querytest.Seed(t, st, table, 4)
		srv.Topologies = []query.Served{{Name: "t", Sets: []query.ServedSet{{Name: "minute", Aggregates: []string{"count", "max", "p"}}}, Reader: newReader(t, st, table)}}
	}
	if srv.Now == nil {
		srv.Now = func() time.Time { return time.UnixMilli(20 * minute) } // the seeded windows are in 1970
	}
	h := srv.Secure(srv.HandlerWithDashboard())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln, h) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	scheme := "http"
	if srv.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + ln.Addr().String()
}

func writeFile(t *testing.T, path, body string) {
	t.Helper()
	if err := os.WriteFile(path+".tmp", []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil { // as secret mounts swap files
		t.Fatal(err)
	}
}

type answer struct {
	code   int
	header http.Header
	body   string
}

func do(t *testing.T, cl *http.Client, method, url string, body io.Reader, hdr map[string]string) answer {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	if cl == nil {
		cl = http.DefaultClient
	}
	resp, err := cl.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, resp.Header, string(b)}
}

// TestAuthentication: with tokens and basic users on, health checks answer anyone; the API, the
// OpenTSDB API, metrics and the dashboard answer 401 (with the schemes to use) without
// credentials or with unknown ones, and 200 with a known token or user; changed files are
// picked up by Watch and Reload, and a broken change leaves the credentials in use.
func TestAuthentication(t *testing.T) {
	dir := t.TempDir()
	tokens, users := filepath.Join(dir, "tokens"), filepath.Join(dir, "users")
	writeFile(t, tokens, "# Grafana\n"+goodToken+"\n\n  "+oldToken+"  \n")
	writeFile(t, users, "alice:correct horse battery\n")
	auth, err := httpsec.NewAuthenticator(httpsec.AuthConfig{TokensFile: tokens, BasicFile: users})
	if err != nil {
		t.Fatal(err)
	}
	srv := &Server{Auth: auth}
	base := secureServer(t, srv)
	bearer := func(tok string) map[string]string { return map[string]string{"Authorization": "Bearer " + tok} }

	for _, path := range []string{"/healthz", "/readyz"} {
		if a := do(t, nil, "GET", base+path, nil, nil); a.code != 200 {
			t.Fatalf("%s without credentials: %d %s", path, a.code, a.body)
		}
	}
	closed := []string{"/api/v1/topologies", "/api/v1/windows?set=minute&entity=ab1", "/api/v1/entities?set=minute",
		"/api/query?start=0&m=sum:t.minute.count", "/api/suggest?type=metrics", "/api/version", "/metrics", "/", "/no/such/page"}
	for _, path := range closed {
		a := do(t, nil, "GET", base+path, nil, nil)
		if a.code != 401 || !strings.Contains(a.body, "authentication required") {
			t.Fatalf("%s without credentials: %d %s", path, a.code, a.body)
		}
		if got := strings.Join(a.header.Values("WWW-Authenticate"), "; "); got != `Bearer realm="abacus"; Basic realm="abacus", charset="UTF-8"` {
			t.Fatalf("%s: WWW-Authenticate %q", path, got)
		}
		for _, bad := range []map[string]string{bearer("token-nobody-has-0123456789"), bearer(goodToken + "x"),
			{"Authorization": "Basic " + basic("alice", "wrong")}, {"Authorization": "Basic " + basic("bob", "correct horse battery")},
			{"Authorization": "Basic !!!"}, {"Authorization": "Digest " + goodToken}, {"Authorization": goodToken}} {
			if a := do(t, nil, "GET", base+path, nil, bad); a.code != 401 || !strings.Contains(a.body, "unknown credentials") {
				t.Fatalf("%s with %v: %d %s", path, bad, a.code, a.body)
			}
		}
		want := 200
		if path == "/no/such/page" {
			want = 404 // admitted, then not found: strangers cannot tell which paths exist
		}
		for _, good := range []map[string]string{bearer(goodToken), bearer(oldToken), {"Authorization": "bearer " + goodToken},
			{"Authorization": "Basic " + basic("alice", "correct horse battery")}} {
			if a := do(t, nil, "GET", base+path, nil, good); a.code != want {
				t.Fatalf("%s with %v: %d %s", path, good, a.code, a.body)
			}
		}
	}
	if a := do(t, nil, "POST", base+"/api/query", strings.NewReader(`{"start":0,"queries":[{"metric":"t.minute.count","aggregator":"sum"}]}`),
		bearer(goodToken)); a.code != 200 {
		t.Fatalf("POST /api/query with a token: %d %s", a.code, a.body)
	}
	if failures := authFailures(t, srv, "invalid"); failures < 7 {
		t.Fatalf("abacus_query_auth_failures_total{reason=invalid} = %v", failures)
	}

	// Rotation: the old token leaves the file; Watch notices.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var watchLog testenv.SyncBuffer
	go httpsec.Watch(ctx, auth, 20*time.Millisecond, slog.New(slog.NewTextHandler(&watchLog, nil)))
	writeFile(t, tokens, goodToken+"\n")
	waitFor(t, "the rotated-out token to be refused", func() bool {
		return do(t, nil, "GET", base+"/api/v1/topologies", nil, bearer(oldToken)).code == 401
	})
	// A broken file (a short token) is refused with its line, and the tokens in use stay.
	writeFile(t, tokens, goodToken+"\nshort\n")
	err = auth.Reload()
	if err == nil || !strings.Contains(err.Error(), "query.auth.tokens_file: "+tokens+" line 2: a token of 5 characters, want at least 16") ||
		strings.Contains(err.Error(), "short") {
		t.Fatalf("short token: %v", err)
	}
	waitFor(t, "Watch to try the broken file too", func() bool { return strings.Contains(watchLog.String(), "changed files not loaded") })
	if a := do(t, nil, "GET", base+"/api/v1/topologies", nil, bearer(goodToken)); a.code != 200 {
		t.Fatalf("after a broken change the token in use is refused: %d", a.code)
	}
}

func basic(user, pw string) string {
	req, _ := http.NewRequest("GET", "http://x", nil)
	req.SetBasicAuth(user, pw)
	return strings.TrimPrefix(req.Header.Get("Authorization"), "Basic ")
}

func authFailures(t *testing.T, srv *Server, reason string) float64 {
	t.Helper()
	mfs, err := srv.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "abacus_query_auth_failures_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" && l.GetValue() == reason {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 10 s for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestTLSAndReload: the server speaks TLS with the pair of its files; a renewed pair is served to
// new connections after Reload (SIGHUP) or when Watch sees the files change, and a broken renewal
// leaves the pair in use.
func TestTLSAndReload(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	ca1 := writeCert(t, certFile, keyFile, 1)
	certs, err := httpsec.NewCertReloader(certFile, keyFile, "")
	if err != nil {
		t.Fatal(err)
	}
	base := secureServer(t, &Server{TLS: certs})
	if !strings.HasPrefix(base, "https://") {
		t.Fatal(base)
	}
	serial := func(pool *x509.CertPool) (int64, error) {
		cl := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, DisableKeepAlives: true}}
		resp, err := cl.Get(base + "/api/v1/topologies")
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 {
			return 0, fmt.Errorf("status %d", resp.StatusCode)
		}
		return resp.TLS.PeerCertificates[0].SerialNumber.Int64(), nil
	}
	if s, err := serial(ca1); err != nil || s != 1 {
		t.Fatalf("first certificate: serial %d, %v", s, err)
	}
	if _, err := http.Get(base + "/healthz"); err == nil {
		t.Fatal("plain HTTP was answered on the TLS port")
	}
	// SIGHUP's path: Reload.
	ca2 := writeCert(t, certFile, keyFile, 2)
	if err := certs.Reload(); err != nil {
		t.Fatal(err)
	}
	if s, err := serial(ca2); err != nil || s != 2 {
		t.Fatalf("after Reload: serial %d, %v", s, err)
	}
	// A broken renewal: the key does not match. The pair in use stays.
	writeCert(t, certFile, filepath.Join(dir, "other-key.pem"), 3)
	if err := certs.Reload(); err == nil || !strings.Contains(err.Error(), "query.tls.cert_file, query.tls.key_file") {
		t.Fatalf("mismatched pair: %v", err)
	}
	if s, err := serial(ca2); err != nil || s != 2 {
		t.Fatalf("after a broken renewal: serial %d, %v", s, err)
	}
	// Watch sees a good renewal.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go httpsec.Watch(ctx, certs, 20*time.Millisecond, nil)
	ca4 := writeCert(t, certFile, keyFile, 4)
	waitFor(t, "the renewed certificate", func() bool { s, err := serial(ca4); return err == nil && s == 4 })
}

// writeCert writes a self-signed certificate for 127.0.0.1 with the serial, and its key, and
// returns a pool that trusts it.
func writeCert(t *testing.T, certFile, keyFile string, serial int64) *x509.CertPool {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "abacus test"},
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
	writeFile(t, keyFile, string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})))
	writeFile(t, certFile, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})))
	c, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(c)
	return pool
}

// slowSource answers no scan of its table until the request's context ends (other tables, the
// key index that NewReader looks for, answer at once).
type slowSource struct {
	query.Source
	table string
}

func (s slowSource) Scan(ctx context.Context, spec store.ScanSpec, fn func([]byte, []store.Cell) bool) error {
	if spec.Table != s.table {
		return s.Source.Scan(ctx, spec, fn)
	}
	<-ctx.Done()
	return ctx.Err()
}

// TestRequestLimits: each limit of one request is answered with a 4xx (503 for the time limit)
// whose message names the limit as the config spells it.
func TestRequestLimits(t *testing.T) {
	srv := &Server{Limits: Limits{ReadHeaderTimeout: 300 * time.Millisecond, IdleTimeout: 400 * time.Millisecond, MaxHeaderBytes: 4 << 10, MaxBodyBytes: 1 << 10,
		MaxEntities: 2, MaxRange: 48 * time.Hour, MaxWindows: 15, MaxEntityList: 50}}
	base := secureServer(t, srv)
	for _, tc := range []struct {
		path string
		code int
		want string
	}{
		{"/api/v1/windows?set=minute&entity=ab1,ab12,ab2", 400, "parameter entity: 3 entities asked for, over the limit of 2 (query.limits.max_entities)"},
		{"/api/v1/windows?set=minute&entity=ab1&from=-72h", 400, "parameter from: from..to spans 72h0m0s, over the limit of 48h0m0s (query.limits.max_range)"},
		{"/api/v1/windows?set=minute&entity=ab1&from=0&to=259200000", 400, "(query.limits.max_range)"},
		{"/api/v1/windows?set=minute&entity=ab1,ab12&limit=8", 400, "8 windows for each of 2 entities is 16, over the limit of 15 windows per answer (query.limits.max_windows)"},
		{"/api/v1/windows?set=minute&entity=ab1&limit=16", 400, "want a whole number from 1 to 15 (query.limits.max_windows)"},
		{"/api/v1/entities?set=minute&limit=51", 400, "want a whole number from 1 to 50 (query.limits.max_entity_list)"},
		{"/api/v1/windows?set=minute&entity=ab1&from=-47h", 200, ""},
		{"/api/v1/windows?set=minute&entity=ab1,ab12&limit=7", 200, ""},
	} {
		a := do(t, nil, "GET", base+tc.path, nil, nil)
		if a.code != tc.code || !strings.Contains(a.body, tc.want) {
			t.Errorf("%s: %d %s\nwant %d %q", tc.path, a.code, a.body, tc.code, tc.want)
		}
	}
	// Without a limit, the answer still holds at most max_windows: each entity its share, and
	// truncated says so.
	var page struct {
		Entities  map[string][]windowJSON `json:"entities"`
		Truncated bool                    `json:"truncated"`
	}
	a := do(t, nil, "GET", base+"/api/v1/windows?set=minute&entity=ab1,ab12", nil, nil)
	if err := json.Unmarshal([]byte(a.body), &page); err != nil || a.code != 200 {
		t.Fatalf("no limit: %d %s", a.code, a.body)
	}
	if len(page.Entities["ab1"]) != 7 || len(page.Entities["ab12"]) != 7 || !page.Truncated {
		t.Fatalf("no limit: %d and %d windows, truncated %v", len(page.Entities["ab1"]), len(page.Entities["ab12"]), page.Truncated)
	}

	// Body size: refused by its declared length, and cut while read when the length is unknown.
	big := `{"start":0,"queries":[{"metric":"t.minute.count","aggregator":"sum","x":"` + strings.Repeat("y", 2000) + `"}]}`
	a = do(t, nil, "POST", base+"/api/query", strings.NewReader(big), nil)
	if a.code != 413 || !strings.Contains(a.body, "over the limit of 1024 bytes (query.limits.max_body_bytes)") {
		t.Fatalf("body with a length: %d %s", a.code, a.body)
	}
	a = do(t, nil, "POST", base+"/api/query", io.MultiReader(strings.NewReader(big)), nil) // no length: chunked
	if a.code != 413 || !strings.Contains(a.body, "over the limit of 1024 bytes (query.limits.max_body_bytes)") {
		t.Fatalf("chunked body: %d %s", a.code, a.body)
	}

	// Headers (and the URL) over max_header_bytes: 431.
	a = do(t, nil, "GET", base+"/api/v1/topologies", nil, map[string]string{"X-Big": strings.Repeat("z", 8<<10)})
	if a.code != 431 {
		t.Fatalf("8 KiB header: %d %s", a.code, a.body)
	}
	a = do(t, nil, "GET", base+"/api/v1/windows?set=minute&entity="+strings.Repeat("e", 8<<10), nil, nil)
	if a.code != 431 {
		t.Fatalf("8 KiB URL: %d %s", a.code, a.body)
	}

	// A client that never finishes its headers gets 408 naming the limit, then the connection
	// is closed.
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	start := time.Now()
	fmt.Fprint(conn, "GET /api/v1/topologies HTTP/1.1\r\nHost: x\r\nX-Slow: ")
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("slow headers: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 408 || !strings.Contains(string(body), "no complete request in time (query.limits.read_header_timeout 300ms; between requests, query.limits.idle_timeout 400ms)") {
		t.Fatalf("slow headers: %d %s", resp.StatusCode, body)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("408 after %v", took)
	}

	// A kept-alive connection left idle past idle_timeout: its answer is followed by a 408, then
	// the connection is closed.
	idle, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	fmt.Fprint(idle, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	idle.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(idle)
	resp, err = http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("keep-alive request: %v %v", resp, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	start = time.Now()
	if resp, err = http.ReadResponse(br, nil); err != nil || resp.StatusCode != 408 {
		t.Fatalf("idle connection: %v %v", resp, err)
	}
	if took := time.Since(start); took < 300*time.Millisecond || took > 3*time.Second {
		t.Fatalf("idle connection answered 408 after %v, idle_timeout is 400ms", took)
	}
	if b, _ := io.ReadAll(resp.Body); !strings.Contains(string(b), "query.limits.idle_timeout 400ms") {
		t.Fatalf("idle 408 does not name the limit: %s", b)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("idle connection not closed after its 408: %v", err)
	}

	// A kept-alive connection serves request after request without a stray 408 among them.
	tr := &http.Transport{MaxIdleConnsPerHost: 1}
	cl := &http.Client{Transport: tr}
	for i := range 20 {
		if a := do(t, cl, "GET", base+"/api/v1/topologies", nil, nil); a.code != 200 {
			t.Fatalf("keep-alive request %d: %d %s", i, a.code, a.body)
		}
		if i%5 == 0 {
			time.Sleep(100 * time.Millisecond)
		}
	}
	tr.CloseIdleConnections()
}

// TestRequestTimeout: a query that takes longer than request_timeout is answered 503 naming the
// limit, and the scan is cancelled.
func TestRequestTimeout(t *testing.T) {
	st, table := querytest.CellStore(t)
	querytest.Seed(t, st, table, 4)
	r := newReader(t, slowSource{st, table}, table)
	srv := &Server{Topologies: []query.Served{{Name: "t", Sets: []query.ServedSet{{Name: "minute"}}, Reader: r}},
		Limits: Limits{RequestTimeout: 200 * time.Millisecond}}
	base := secureServer(t, srv)
	start := time.Now()
	a := do(t, nil, "GET", base+"/api/v1/windows?set=minute&entity=ab1", nil, nil)
	if a.code != 503 || !strings.Contains(a.body, "the request took longer than its limit of 200ms (query.limits.request_timeout)") {
		t.Fatalf("%d %s", a.code, a.body)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("answered after %v", took)
	}
}
