package httpsec

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
)

// Middleware admits to the handler it wraps only the requests that carry credentials its
// Authenticator knows; the Open paths need none.
type Middleware struct {
	// Auth decides whom to admit.
	Auth *Authenticator
	// Open are the paths answered without credentials: health checks, for load balancers and
	// orchestrators that carry none. They must say nothing about the data.
	Open []string
	// Failures counts the refused requests by reason ("missing" or "invalid"); nil counts none.
	Failures *prometheus.CounterVec
	// Logger gets each refusal at debug level; slog.Default when nil.
	Logger *slog.Logger
}

// Wrap returns next behind the middleware. A refused request is answered 401, with the schemes
// the Authenticator takes in WWW-Authenticate and a JSON {"error": ...} that tells missing
// credentials from unknown ones, whatever the path: strangers cannot tell which paths exist.
func (m Middleware) Wrap(next http.Handler) http.Handler {
	log := m.Logger
	if log == nil {
		log = slog.Default()
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if slices.Contains(m.Open, r.URL.Path) {
			next.ServeHTTP(w, r)
			return
		}
		ok, why := m.Auth.admit(r)
		if ok {
			next.ServeHTTP(w, r)
			return
		}
		if m.Failures != nil {
			m.Failures.WithLabelValues(why).Inc()
		}
		log.Debug("query request refused", "reason", why, "path", r.URL.Path, "remote", r.RemoteAddr)
		for _, c := range m.Auth.challenge() {
			w.Header().Add("WWW-Authenticate", c)
		}
		msg := "authentication required: send Authorization: Bearer <token> or basic credentials"
		if why == "invalid" {
			msg = "unknown credentials"
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusUnauthorized)
		_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
	})
}
