package query

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/abacus-stream/abacus/internal/smallfile"
	"github.com/prometheus/client_golang/prometheus"
)

// Paths answered without authentication: health checks, for load balancers and orchestrators
// that carry no credentials. They say nothing about the data.
var openPaths = map[string]bool{"/healthz": true, "/readyz": true}

// MinTokenLength is the shortest bearer token an Authenticator accepts from its file: a short
// token can be guessed.
const MinTokenLength = 16

// maxAuthFileBytes bounds a tokens or users file (and a certificate or key file).
const maxAuthFileBytes = 1 << 20

// AuthConfig says who may use the query server: holders of a bearer token of TokensFile, or of a
// user name and password of BasicFile (HTTP basic authentication), or both. Files are read at
// start and again when they change (Watch) or on Reload (SIGHUP).
type AuthConfig struct {
	// TokensFile holds one bearer token per line (at least MinTokenLength characters); blank
	// lines and lines starting with # are skipped. Clients send "Authorization: Bearer <token>".
	TokensFile string
	// BasicFile holds one user:password per line (# comments and blank lines skipped), for
	// clients that only speak basic authentication (browsers opening the dashboard, some Grafana
	// setups). Passwords are compared through their SHA-256, in constant time.
	BasicFile string
	// Prefix is how errors name the fields (default "query.auth").
	Prefix string
}

// Enabled reports whether the config asks for authentication.
func (c AuthConfig) Enabled() bool { return c.TokensFile != "" || c.BasicFile != "" }

// Authenticator admits the requests that carry a known token or user and password. It is safe for
// concurrent use; Reload swaps the credentials atomically.
type Authenticator struct {
	cfg     AuthConfig
	mu      sync.RWMutex
	tokens  [][sha256.Size]byte
	users   map[string][sha256.Size]byte
	watched fileStamp
}

// NewAuthenticator reads the credentials files. Every mistake names its field, file and line,
// never the credential.
func NewAuthenticator(cfg AuthConfig) (*Authenticator, error) {
	if cfg.Prefix == "" {
		cfg.Prefix = "query.auth"
	}
	if !cfg.Enabled() {
		return nil, fmt.Errorf("%s: neither tokens_file nor basic_file is set", cfg.Prefix)
	}
	a := &Authenticator{cfg: cfg}
	if err := a.Reload(); err != nil {
		return nil, err
	}
	return a, nil
}

// Files are the files the Authenticator reads.
func (a *Authenticator) Files() []string {
	var out []string
	for _, f := range []string{a.cfg.TokensFile, a.cfg.BasicFile} {
		if f != "" {
			out = append(out, f)
		}
	}
	return out
}

// Reload reads the files again and, if they are valid, uses them from the next request on; if
// not, the credentials in use stay and the error says why.
func (a *Authenticator) Reload() error {
	stamp := stampFiles(a.Files())
	var tokens [][sha256.Size]byte
	users := map[string][sha256.Size]byte{}
	var errs []error
	if f := a.cfg.TokensFile; f != "" {
		err := readLines(f, func(n int, line string) error {
			if len(line) < MinTokenLength {
				return fmt.Errorf("line %d: a token of %d characters, want at least %d", n, len(line), MinTokenLength)
			}
			tokens = append(tokens, sha256.Sum256([]byte(line)))
			return nil
		})
		if err == nil && len(tokens) == 0 {
			err = fmt.Errorf("%s holds no token: it would admit no one", f)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s.tokens_file: %w", a.cfg.Prefix, err))
		}
	}
	if f := a.cfg.BasicFile; f != "" {
		err := readLines(f, func(n int, line string) error {
			user, pw, ok := strings.Cut(line, ":")
			switch {
			case !ok || user == "":
				return fmt.Errorf("line %d: not user:password", n)
			case pw == "":
				return fmt.Errorf("line %d: user %q has an empty password", n, user)
			}
			if _, dup := users[user]; dup {
				return fmt.Errorf("line %d: user %q is listed twice", n, user)
			}
			users[user] = sha256.Sum256([]byte(pw))
			return nil
		})
		if err == nil && len(users) == 0 {
			err = fmt.Errorf("%s holds no user: it would admit no one", f)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s.basic_file: %w", a.cfg.Prefix, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	a.mu.Lock()
	a.tokens, a.users, a.watched = tokens, users, stamp
	a.mu.Unlock()
	return nil
}

// readLines calls fn with every line of the file that is neither blank nor a # comment, spaces
// around it removed, and its line number. Errors name the file (and fn's the line), never the
// line's text.
func readLines(path string, fn func(n int, line string) error) error {
	b, err := readSmallFile(path)
	if err != nil {
		return err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 4096), maxAuthFileBytes)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		if err := fn(n, line); err != nil {
			return fmt.Errorf("%s %w", path, err)
		}
	}
	return sc.Err()
}

// readSmallFile reads a credentials or certificate file of at most maxAuthFileBytes.
func readSmallFile(path string) ([]byte, error) { return smallfile.Read(path, maxAuthFileBytes) }

// admit reports whether the request's Authorization header carries known credentials, and if not
// why (for the metric: "missing" or "invalid").
func (a *Authenticator) admit(r *http.Request) (bool, string) {
	h := r.Header.Get("Authorization")
	scheme, cred, _ := strings.Cut(h, " ")
	cred = strings.TrimSpace(cred)
	a.mu.RLock()
	defer a.mu.RUnlock()
	switch {
	case h == "":
		return false, "missing"
	case strings.EqualFold(scheme, "Bearer") && len(a.tokens) > 0:
		sum := sha256.Sum256([]byte(cred))
		ok := 0
		for i := range a.tokens { // every one, so that the time taken says nothing of which matched
			ok |= subtle.ConstantTimeCompare(sum[:], a.tokens[i][:])
		}
		return ok == 1, "invalid"
	case strings.EqualFold(scheme, "Basic") && len(a.users) > 0:
		raw, err := base64.StdEncoding.DecodeString(cred)
		if err != nil {
			return false, "invalid"
		}
		user, pw, _ := strings.Cut(string(raw), ":")
		want, known := a.users[user]
		sum := sha256.Sum256([]byte(pw))
		return subtle.ConstantTimeCompare(sum[:], want[:]) == 1 && known, "invalid"
	}
	return false, "invalid"
}

// challenge is the WWW-Authenticate header of a 401: the schemes the server takes.
func (a *Authenticator) challenge() []string {
	var out []string
	if a.cfg.TokensFile != "" {
		out = append(out, `Bearer realm="abacus"`)
	}
	if a.cfg.BasicFile != "" {
		out = append(out, `Basic realm="abacus", charset="UTF-8"`)
	}
	return out
}

// authHandler admits requests with known credentials to next; health checks need none.
func (s *Server) authHandler(next http.Handler) http.Handler {
	failures := registered(s.Registry, prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "abacus", Subsystem: "query",
		Name: "auth_failures_total", Help: "Requests refused for missing or unknown credentials."}, []string{"reason"}))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if openPaths[r.URL.Path] {
			next.ServeHTTP(w, r)
			return
		}
		ok, why := s.Auth.admit(r)
		if ok {
			next.ServeHTTP(w, r)
			return
		}
		failures.WithLabelValues(why).Inc()
		s.logger().Debug("query request refused", "reason", why, "path", r.URL.Path, "remote", r.RemoteAddr)
		for _, c := range s.Auth.challenge() {
			w.Header().Add("WWW-Authenticate", c)
		}
		msg := "authentication required: send Authorization: Bearer <token> or basic credentials"
		if why == "invalid" {
			msg = "unknown credentials"
		}
		writeJSON(w, http.StatusUnauthorized, apiError{Error: msg})
	})
}

// Secure wraps h, the server's routes with whatever was mounted beside them (the dashboard), in
// the request limits and, when s.Auth is set, authentication: health checks stay open, every
// other path needs credentials. Call it after Handler.
func (s *Server) Secure(h http.Handler) http.Handler {
	s.Limits.EnsureDefaults()
	if s.Registry == nil {
		s.Registry = prometheus.NewRegistry()
	}
	if s.Auth != nil {
		h = s.authHandler(h)
	}
	return s.limitsHandler(h)
}

// CertReloader serves the TLS certificate and key of two PEM files, read again when they change
// (Watch) or on Reload (SIGHUP), so that a renewed certificate is served without a restart. A
// renewed pair that does not load (a half-written file, a key that does not match) leaves the
// pair in use in place.
type CertReloader struct {
	certFile, keyFile string
	prefix            string
	mu                sync.RWMutex
	cert              *tls.Certificate
	watched           fileStamp
}

// NewCertReloader loads the pair; errors name the field (prefix.cert_file; prefix defaults to
// query.tls).
func NewCertReloader(certFile, keyFile, prefix string) (*CertReloader, error) {
	if prefix == "" {
		prefix = "query.tls"
	}
	c := &CertReloader{certFile: certFile, keyFile: keyFile, prefix: prefix}
	switch {
	case certFile == "":
		return nil, fmt.Errorf("%s.cert_file: required with %s.key_file", prefix, prefix)
	case keyFile == "":
		return nil, fmt.Errorf("%s.key_file: required with %s.cert_file", prefix, prefix)
	}
	if err := c.Reload(); err != nil {
		return nil, err
	}
	return c, nil
}

// Files are the certificate and key files.
func (c *CertReloader) Files() []string { return []string{c.certFile, c.keyFile} }

// Reload reads the pair again; on error the pair in use stays.
func (c *CertReloader) Reload() error {
	stamp := stampFiles(c.Files())
	certPEM, err := readSmallFile(c.certFile)
	if err != nil {
		return fmt.Errorf("%s.cert_file: %w", c.prefix, err)
	}
	keyPEM, err := readSmallFile(c.keyFile)
	if err != nil {
		return fmt.Errorf("%s.key_file: %w", c.prefix, err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return fmt.Errorf("%s.cert_file, %s.key_file: %s and %s: %w", c.prefix, c.prefix, c.certFile, c.keyFile, err)
	}
	c.mu.Lock()
	c.cert, c.watched = &pair, stamp
	c.mu.Unlock()
	return nil
}

// GetCertificate serves the pair in use (tls.Config.GetCertificate).
func (c *CertReloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.cert, nil
}

// TLSConfig is the server's TLS configuration: TLS 1.2 or later, the pair in use, HTTP/1.1.
func (c *CertReloader) TLSConfig() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: c.GetCertificate, NextProtos: []string{"http/1.1"}}
}

func tlsListener(ln net.Listener, c *CertReloader) net.Listener {
	return tls.NewListener(ln, c.TLSConfig())
}

// fileStamp identifies the versions of a set of files (size and modification time of each), so
// that a change is seen without reading them.
type fileStamp string

func stampFiles(paths []string) fileStamp {
	var b strings.Builder
	for _, p := range paths {
		if st, err := os.Stat(p); err == nil {
			fmt.Fprintf(&b, "%s %d %d;", p, st.Size(), st.ModTime().UnixNano())
		} else {
			fmt.Fprintf(&b, "%s missing;", p)
		}
	}
	return fileStamp(b.String())
}

// Reloadable is a set of files read once and read again when they change: an Authenticator or
// a CertReloader.
type Reloadable interface {
	Files() []string
	Reload() error
	stamp() fileStamp
}

func (a *Authenticator) stamp() fileStamp {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.watched
}

func (c *CertReloader) stamp() fileStamp {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.watched
}

// Watch reloads r whenever its files change, checking every interval, until ctx ends. A reload
// that fails is logged once per version of the files, and the credentials or certificate in use
// stay.
func Watch(ctx context.Context, r Reloadable, interval time.Duration, log *slog.Logger) {
	if log == nil {
		log = slog.Default()
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	var failed fileStamp
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := stampFiles(r.Files())
		if now == r.stamp() || now == failed {
			continue
		}
		if err := r.Reload(); err != nil {
			failed = now
			log.Error("changed files not loaded; the ones loaded before stay in use", "files", r.Files(), "err", err)
			continue
		}
		failed = ""
		log.Info("reloaded", "files", r.Files())
	}
}

func (s *Server) logger() *slog.Logger {
	if s.Logger == nil {
		return slog.Default()
	}
	return s.Logger
}

// slogErrorLog sends net/http's own messages (TLS handshake errors of scanners, mostly) to slog
// at debug level rather than to stderr.
func slogErrorLog(l *slog.Logger) *log.Logger {
	return slog.NewLogLogger(l.Handler(), slog.LevelDebug)
}
