// Package httpapi is the query server: the HTTP/JSON API (/api/v1) over the readers of package
// query, with the OpenTSDB API of query/opentsdb mounted beside it, health, readiness and
// Prometheus metrics, the dashboard page (embedded from web/), and Serve and Secure, which apply
// the connection and request limits, TLS and authentication (query/httpsec).
package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/abacus-stream/abacus/query"
	"github.com/abacus-stream/abacus/query/httpsec"
	"github.com/abacus-stream/abacus/query/opentsdb"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// APIPrefix is the versioned path of the HTTP API.
const APIPrefix = "/api/v1"

// Server serves the HTTP API, health, readiness and metrics. Mount it with Handler.
type Server struct {
	// Topologies are what the API serves; a request may leave the topology out only when there
	// is one.
	Topologies []query.Served
	// Registry is served on /metrics; the query metrics are registered on it by Handler.
	Registry *prometheus.Registry
	// Ready reports whether the server can answer queries; nil checks nothing. A process that
	// serves its other roles' readiness here too (abacus run) checks them all.
	Ready func(ctx context.Context) error
	// Healthy reports whether the process is alive and not failed, for /healthz; nil: always.
	Healthy func() error
	// Logger gets the failures that clients are answered without details; slog.Default when nil.
	Logger *slog.Logger
	// Now is the clock for relative times ("-1h"); time.Now when nil.
	Now func() time.Time
	// OpenTSDB bounds the work of the OpenTSDB-compatible API's requests (zero: the defaults).
	OpenTSDB opentsdb.Limits
	// NoCoarser reads every OpenTSDB sub-query from the set its metric names (opentsdb.API's
	// NoCoarser): the same answers, read from the finer windows.
	NoCoarser bool
	// Limits bound every request: timeouts, sizes, entities, time range, result size (zero: the
	// defaults). Serve applies the connection limits, Secure the body size, the handlers the rest.
	Limits Limits
	// Auth, when set, makes Secure admit only requests with known credentials (health checks
	// excepted).
	Auth *httpsec.Authenticator
	// TLS, when set, makes Serve speak HTTPS with its (reloadable) certificate.
	TLS *httpsec.CertReloader
}

// registered registers c on reg, or returns the collector already registered under its name, so
// that two handlers on one registry (an API mounted twice, tests) count into the same series
// instead of the second one's counts going nowhere.
func registered[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
	}
	return c
}

// Handler returns the API's routes. Extra routes (the dashboard) can be added to the returned mux.
func (s *Server) Handler() *http.ServeMux {
	if s.Logger == nil {
		s.Logger = slog.Default()
	}
	if s.Now == nil {
		s.Now = time.Now
	}
	if s.Registry == nil {
		s.Registry = prometheus.NewRegistry()
	}
	s.Limits.EnsureDefaults()
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "abacus", Subsystem: "query",
		Name: "requests_total", Help: "API requests by endpoint and status code."}, []string{"endpoint", "code"})
	latency := prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "abacus", Subsystem: "query",
		Name: "request_seconds", Help: "API request latency by endpoint.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)}, []string{"endpoint"})
	requests = registered(s.Registry, requests)
	latency = registered(s.Registry, latency)
	mux := http.NewServeMux()
	handle := func(path, endpoint string, h func(w http.ResponseWriter, r *http.Request) (int, any)) {
		mux.HandleFunc("GET "+path, func(w http.ResponseWriter, r *http.Request) {
			t0 := time.Now()
			ctx, cancel := context.WithTimeout(r.Context(), s.Limits.RequestTimeout)
			defer cancel()
			code, body := h(w, r.WithContext(ctx))
			writeJSON(w, code, body)
			requests.WithLabelValues(endpoint, strconv.Itoa(code)).Inc()
			latency.WithLabelValues(endpoint).Observe(time.Since(t0).Seconds())
		})
	}
	handle(APIPrefix+"/topologies", "topologies", s.topologies)
	handle(APIPrefix+"/windows", "windows", s.windows)
	handle(APIPrefix+"/entities", "entities", s.entities)
	tsdb := &opentsdb.API{Topologies: s.Topologies, Limits: s.OpenTSDB, MaxBodyBytes: s.Limits.MaxBodyBytes, Now: s.Now, Logger: s.Logger,
		NoCoarser: s.NoCoarser}
	tsdb.Mount(mux, requests, latency)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		if s.Healthy != nil {
			if err := s.Healthy(); err != nil {
				body := map[string]string{"status": "failed", "error": err.Error()}
				if s.Auth != nil { // open to anyone: no internals to strangers
					s.logger().Warn("not healthy", "err", err)
					body["error"] = "see the server's log"
				}
				writeJSON(w, http.StatusServiceUnavailable, body)
				return
			}
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if s.Ready != nil {
			ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
			defer cancel()
			if err := s.Ready(ctx); err != nil {
				body := map[string]string{"status": "not ready", "error": err.Error()}
				if s.Auth != nil { // open to anyone: no addresses or internals to strangers
					s.logger().Warn("not ready", "err", err)
					body["error"] = "see the server's log"
				}
				writeJSON(w, http.StatusServiceUnavailable, body)
				return
			}
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.Registry, promhttp.HandlerOpts{}))
	return mux
}

type apiError struct {
	Error     string `json:"error"`
	Parameter string `json:"parameter,omitempty"`
}

func badParam(name, format string, args ...any) (int, any) {
	return http.StatusBadRequest, apiError{Error: "parameter " + name + ": " + fmt.Sprintf(format, args...), Parameter: name}
}

func writeJSON(w http.ResponseWriter, code int, body any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	if raw, ok := body.(rawJSON); ok {
		_, _ = w.Write(append(raw, '\n')) // as an Encoder ends it
		return
	}
	_ = json.NewEncoder(w).Encode(body)
}

// rawJSON is an answer encoded already, written as it is.
type rawJSON []byte
