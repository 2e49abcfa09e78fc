// Package httpsec secures the query server's HTTP: who may call it (bearer tokens and basic
// users read from files, and the middleware that admits only them), its TLS certificate, and the
// reloading of both when their files change or on SIGHUP, without a restart.
package httpsec

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"

	"github.com/abacus-stream/abacus/internal/smallfile"
)

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
