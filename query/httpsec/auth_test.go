package httpsec

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func writeFile(t *testing.T, path, body string) {
	t.Helper()
	if err := os.WriteFile(path+".tmp", []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil { // as secret mounts swap files
		t.Fatal(err)
	}
}

// TestAuthFileMistakes: every mistake in a credentials file names the field, the file and the
// line, never the credential.
func TestAuthFileMistakes(t *testing.T) {
	dir := t.TempDir()
	f := func(name, body string) string {
		p := filepath.Join(dir, name)
		writeFile(t, p, body)
		return p
	}
	for _, tc := range []struct {
		cfg  AuthConfig
		want string
	}{
		{AuthConfig{}, "query.auth: neither tokens_file nor basic_file is set"},
		{AuthConfig{TokensFile: f("empty", "# nobody\n\n")}, "query.auth.tokens_file: " + dir + "/empty holds no token: it would admit no one"},
		{AuthConfig{TokensFile: filepath.Join(dir, "missing")}, "query.auth.tokens_file: open " + dir + "/missing: no such file or directory"},
		{AuthConfig{TokensFile: dir}, "query.auth.tokens_file: " + dir + " is a folder, not a file"},
		{AuthConfig{BasicFile: f("nocolon", "alice-secret-password\n")}, "query.auth.basic_file: " + dir + "/nocolon line 1: not user:password"},
		{AuthConfig{BasicFile: f("nopw", "# x\nalice:\n")}, `query.auth.basic_file: ` + dir + `/nopw line 2: user "alice" has an empty password`},
		{AuthConfig{BasicFile: f("twice", "alice:a-secret-1\nalice:a-secret-2\n")}, `line 2: user "alice" is listed twice`},
		{AuthConfig{TokensFile: f("huge", strings.Repeat("x", maxAuthFileBytes+1))}, "is over 1048576 bytes"},
	} {
		_, err := NewAuthenticator(tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v\nwant %q", tc.cfg, err, tc.want)
		}
		if err != nil && (strings.Contains(err.Error(), "secret")) {
			t.Errorf("the error shows a credential: %v", err)
		}
	}
}

// TestMiddleware: the open paths pass without credentials; others need a known token or user,
// and a refusal says whether credentials were missing or unknown, names the schemes taken and is
// counted by reason.
func TestMiddleware(t *testing.T) {
	dir := t.TempDir()
	tokens, users := filepath.Join(dir, "tokens"), filepath.Join(dir, "users")
	writeFile(t, tokens, "token-for-grafana-0123456789\n")
	writeFile(t, users, "alice:correct horse battery\n")
	auth, err := NewAuthenticator(AuthConfig{TokensFile: tokens, BasicFile: users})
	if err != nil {
		t.Fatal(err)
	}
	failures := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "failures"}, []string{"reason"})
	h := Middleware{Auth: auth, Open: []string{"/healthz"}, Failures: failures}.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusTeapot)
	}))
	do := func(path, authorization string) *httptest.ResponseRecorder {
		req := httptest.NewRequest("GET", "http://abacus"+path, nil)
		if authorization != "" {
			req.Header.Set("Authorization", authorization)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	if rec := do("/healthz", ""); rec.Code != http.StatusTeapot {
		t.Fatalf("open path without credentials: %d", rec.Code)
	}
	rec := do("/api/v1/topologies", "")
	if rec.Code != 401 || strings.TrimSpace(rec.Body.String()) != `{"error":"authentication required: send Authorization: Bearer \u003ctoken\u003e or basic credentials"}` ||
		rec.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("no credentials: %d %v %s", rec.Code, rec.Header(), rec.Body)
	}
	if got := strings.Join(rec.Header().Values("WWW-Authenticate"), "; "); got != `Bearer realm="abacus"; Basic realm="abacus", charset="UTF-8"` {
		t.Fatalf("WWW-Authenticate %q", got)
	}
	for _, bad := range []string{"Bearer token-nobody-has-0123456789", "Basic !!!", "Digest x"} {
		if rec := do("/healthz/", bad); rec.Code != 401 || !strings.Contains(rec.Body.String(), "unknown credentials") {
			t.Fatalf("%q: %d %s", bad, rec.Code, rec.Body)
		}
	}
	req := httptest.NewRequest("GET", "http://abacus/", nil)
	req.SetBasicAuth("alice", "correct horse battery")
	for _, good := range []string{"Bearer token-for-grafana-0123456789", req.Header.Get("Authorization")} {
		if rec := do("/metrics", good); rec.Code != http.StatusTeapot {
			t.Fatalf("%q: %d %s", good, rec.Code, rec.Body)
		}
	}
	if missing, invalid := testutil.ToFloat64(failures.WithLabelValues("missing")), testutil.ToFloat64(failures.WithLabelValues("invalid")); missing != 1 || invalid != 3 {
		t.Fatalf("failures counted: %v missing, %v invalid; want 1 and 3", missing, invalid)
	}
}
