package httpapi

import (
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/abacus-stream/abacus/query/httpsec"
	"github.com/prometheus/client_golang/prometheus"
)

// Limits bound what one client can make the query server do. A request past a limit is answered
// with a 4xx whose message names the limit as the config spells it (query.limits.<name>), never
// cut silently. The zero value means the defaults (EnsureDefaults).
type Limits struct {
	// ReadHeaderTimeout bounds reading a request's line and headers (default 10 s): a client that
	// sends them slower gets 408 and the connection is closed (slowloris).
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading a whole request, body included (default 30 s).
	ReadTimeout time.Duration
	// WriteTimeout bounds writing an answer, from the end of the request's headers (default 2 min;
	// it must exceed RequestTimeout and the OpenTSDB API's timeout).
	WriteTimeout time.Duration
	// IdleTimeout is how long a kept-alive connection waits for its next request (default 2 min).
	IdleTimeout time.Duration
	// RequestTimeout bounds the work of one /api/v1 request (default 30 s); past it the answer is
	// 503 naming the limit. (The OpenTSDB API has its own, opentsdb.Limits.Timeout.)
	RequestTimeout time.Duration
	// MaxHeaderBytes bounds the request line (URL and its parameters included) and headers
	// (default 64 KiB); past it the answer is 431.
	MaxHeaderBytes int
	// MaxBodyBytes bounds a request body (default 1 MiB; only the OpenTSDB API's POST takes one);
	// past it the answer is 413.
	MaxBodyBytes int64
	// MaxEntities is the most entities one /api/v1/windows request may name (default 100).
	MaxEntities int
	// MaxRange is the longest from..to of one /api/v1/windows request (default 366 days); to
	// defaults to now when only from is given.
	MaxRange time.Duration
	// MaxWindows is the most windows one /api/v1/windows answer holds (default 100,000): limit ×
	// entities above it is refused, and without limit each entity gets MaxWindows / entities.
	MaxWindows int
	// MaxEntityList is the largest limit of /api/v1/entities (default 10,000).
	MaxEntityList int
}

// Names of the limits in messages, as the config spells them.
const (
	limitReadHeaderTimeout = "query.limits.read_header_timeout"
	limitIdleTimeout       = "query.limits.idle_timeout"
	limitRequestTimeout    = "query.limits.request_timeout"
	limitMaxBodyBytes      = "query.limits.max_body_bytes"
	limitMaxEntities       = "query.limits.max_entities"
	limitMaxRange          = "query.limits.max_range"
	limitMaxWindows        = "query.limits.max_windows"
	limitMaxEntityList     = "query.limits.max_entity_list"
)

// EnsureDefaults fills the limits left at zero (or below).
func (l *Limits) EnsureDefaults() {
	dur := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	dur(&l.ReadHeaderTimeout, 10*time.Second)
	dur(&l.ReadTimeout, 30*time.Second)
	dur(&l.WriteTimeout, 2*time.Minute)
	dur(&l.IdleTimeout, 2*time.Minute)
	dur(&l.RequestTimeout, 30*time.Second)
	dur(&l.MaxRange, 366*24*time.Hour)
	num := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	num(&l.MaxHeaderBytes, 64<<10)
	num(&l.MaxEntities, 100)
	num(&l.MaxWindows, 100_000)
	num(&l.MaxEntityList, 10_000)
	if l.MaxBodyBytes <= 0 {
		l.MaxBodyBytes = 1 << 20
	}
}

// limitsHandler applies the per-request limits: the body size (refused at once when the
// declared length is over it, cut with a 413 by the handler otherwise), and it marks the
// connection busy so that a read timeout during the request never writes a 408 into it.
func (s *Server) limitsHandler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c, ok := r.Context().Value(connKey{}).(*limitConn); ok {
			c.busy.Add(1)
			defer c.busy.Add(-1)
		}
		if r.ContentLength > s.Limits.MaxBodyBytes {
			writeJSON(w, http.StatusRequestEntityTooLarge, apiError{Error: fmt.Sprintf(
				"request body of %d bytes is over the limit of %d bytes (%s)", r.ContentLength, s.Limits.MaxBodyBytes, limitMaxBodyBytes)})
			return
		}
		if r.Body != nil {
			r.Body = http.MaxBytesReader(w, r.Body, s.Limits.MaxBodyBytes)
		}
		next.ServeHTTP(w, r)
	})
}

// Secure wraps h, the server's routes with whatever was mounted beside them (the dashboard), in
// the request limits and, when s.Auth is set, authentication (httpsec.Middleware): health checks
// stay open, every other path needs credentials. Call it after Handler.
func (s *Server) Secure(h http.Handler) http.Handler {
	s.Limits.EnsureDefaults()
	if s.Registry == nil {
		s.Registry = prometheus.NewRegistry()
	}
	if s.Auth != nil {
		failures := registered(s.Registry, prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "abacus", Subsystem: "query",
			Name: "auth_failures_total", Help: "Requests refused for missing or unknown credentials."}, []string{"reason"}))
		h = httpsec.Middleware{Auth: s.Auth, Open: []string{"/healthz", "/readyz"}, Failures: failures, Logger: s.logger()}.Wrap(h)
	}
	return s.limitsHandler(h)
}

func (s *Server) logger() *slog.Logger {
	if s.Logger == nil {
		return slog.Default()
	}
	return s.Logger
}
