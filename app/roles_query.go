package app

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/abacus-stream/abacus/query"
	"github.com/abacus-stream/abacus/query/httpapi"
	"github.com/abacus-stream/abacus/query/httpsec"
	"github.com/abacus-stream/abacus/query/live"
	"github.com/abacus-stream/abacus/topology"
	"github.com/abacus-stream/abacus/windows"
)

// sets describes the topology's aggregate sets for the query API, rollups with their dimension:
// the API, the OpenTSDB tag keys and the dashboard's pickers all follow it.
func (d *deployment) sets() []query.ServedSet { return ServedSets(d.topo.Sets()) }

// ServedSets is what the query server serves of a topology's sets (query.Served's Sets): a
// benchmark or a server of your own gives its reader the same.
func ServedSets(sets []topology.SetInfo) []query.ServedSet {
	var out []query.ServedSet
	for _, s := range sets {
		ss := query.ServedSet{Name: s.Name, Window: s.Window.String(), Aggregates: s.Aggregations,
			Rollup: s.Rollup, Dimension: s.Dimension, Coarsens: s.Coarsens, Kinds: s.Kinds}
		if s.Window.Kind() == windows.KindTumbling {
			ss.Size = time.Duration(s.Window.Size()) * time.Millisecond
		}
		out = append(out, ss)
	}
	return out
}

// reader reads the aggregate table, with the salt buckets the table was created with.
func (d *deployment) reader(ctx context.Context) (*query.Reader, error) {
	t := d.cfg.Sinks.Aggregates
	r, err := query.NewReader(ctx, d.st, t.Table, t.Family)
	if err != nil {
		return nil, err
	}
	return r.WithMaxScans(d.cfg.Query.MaxScans), nil
}

// queryServer is the query API over r, before TLS and authentication (see secureQueryServer).
func (d *deployment) queryServer(r *query.Reader) *httpapi.Server {
	srv := &httpapi.Server{
		Topologies: []query.Served{{Name: d.topo.Name(), Sets: d.sets(), Reader: r}},
		Registry:   d.reg,
		Logger:     d.log.With("part", "query"),
		Limits:     d.cfg.Query.Limits.Limits(),
		Ready:      func(ctx context.Context) error { return d.tableReachable(ctx, r.Table()) },
		NoCoarser:  d.cfg.Query.NoCoarser,
	}
	if d.ops != nil && d.opsOnQuery {
		// The process's ops endpoints ride on this listener: /readyz and /healthz speak for every
		// role of the process.
		srv.Ready, srv.Healthy = d.ops.readyErr, d.ops.healthErr
	}
	return srv
}

// serve runs the HTTP API (and dashboard) on the configured address until ctx ends; ready is
// called with the URL once it listens. TLS and authentication come from query.tls and
// query.auth; their files are read again when they change and on SIGHUP.
func (d *deployment) serve(ctx context.Context, ready func(url string)) error {
	r, err := d.reader(ctx)
	if err != nil {
		return err
	}
	if !d.cfg.Query.NoCache {
		c := query.NewCache(d.cfg.Query.CacheBytes)
		d.registerCache(c)
		r = r.WithCache(c)
	}
	if !d.cfg.Query.NoLive {
		live := &lazyLive{}
		r = r.WithLive(live)
		go d.followLive(ctx, live)
	}
	qc := d.cfg.Query
	srv, reloadable, err := d.secureQueryServer(r)
	if err != nil {
		return err
	}
	h := srv.Secure(srv.HandlerWithDashboard())
	ln, err := net.Listen("tcp", qc.Listen)
	if err != nil {
		return fmt.Errorf("query.listen %s: %w", qc.Listen, err)
	}
	warnExposed(d.log, qc.Listen, srv.Auth != nil, srv.TLS != nil)

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if len(reloadable) > 0 {
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
		d.watchReloads(ctx, hup, reloadable)
	}
	scheme := "http"
	if srv.TLS != nil {
		scheme = "https"
	}
	if ready != nil {
		ready(scheme + "://" + ln.Addr().String() + "/")
	}
	return srv.Serve(ctx, ln, h)
}

// secureQueryServer is the query server with the TLS and authentication of query.tls and
// query.auth, and what of them reads files that can change.
func (d *deployment) secureQueryServer(r *query.Reader) (*httpapi.Server, []httpsec.Reloadable, error) {
	qc := d.cfg.Query
	srv := d.queryServer(r)
	var reloadable []httpsec.Reloadable
	var err error
	if qc.TLS.CertFile != "" || qc.TLS.KeyFile != "" {
		if srv.TLS, err = httpsec.NewCertReloader(qc.TLS.CertFile, qc.TLS.KeyFile, "query.tls"); err != nil {
			return nil, nil, err
		}
		reloadable = append(reloadable, srv.TLS)
	}
	if ac := qc.Auth.AuthConfig(); ac.Enabled() {
		if srv.Auth, err = httpsec.NewAuthenticator(ac); err != nil {
			return nil, nil, err
		}
		reloadable = append(reloadable, srv.Auth)
	}
	return srv, reloadable, nil
}

// watchReloads reads the files of reloadable again when they change (checked every
// query.reload_interval) and at each signal on hup, until ctx ends. A file that fails to load
// leaves the one loaded before in use, so a half-written certificate never stops the server.
func (d *deployment) watchReloads(ctx context.Context, hup <-chan os.Signal, reloadable []httpsec.Reloadable) {
	log := d.log.With("part", "query")
	for _, rl := range reloadable {
		go httpsec.Watch(ctx, rl, time.Duration(d.cfg.Query.ReloadInterval), log)
	}
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
			}
			for _, rl := range reloadable {
				if err := rl.Reload(); err != nil {
					d.log.Error("SIGHUP: files not reloaded; the ones loaded before stay in use", "files", rl.Files(), "err", err)
				} else {
					d.log.Info("SIGHUP: reloaded", "files", rl.Files())
				}
			}
		}
	}()
}

// warnExposed logs at start when the query server listens beyond this machine without
// authentication (anyone who reaches the port reads every aggregate), or with authentication but
// without TLS (credentials cross the network in clear).
func warnExposed(log *slog.Logger, listen string, auth, tls bool) {
	host, _, _ := splitHostPort(listen)
	if isLoopback(host) {
		return
	}
	switch {
	case !auth:
		log.Warn("the query server listens beyond this machine without authentication: anyone who reaches it reads every aggregate; set query.auth (and query.tls), or listen on 127.0.0.1",
			"listen", listen)
	case !tls:
		log.Warn("the query server takes credentials without TLS: tokens and passwords cross the network in clear; set query.tls",
			"listen", listen)
	}
}

// isLoopback reports whether a listen host only accepts connections from this machine.
func isLoopback(host string) bool {
	host = strings.Trim(host, "[]")
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// lazyLive serves open windows once the live view exists: the group table it reads appears only
// when the processor group first runs.
type lazyLive struct{ v atomic.Pointer[live.View] }

// OpenWindows implements query.LiveSource: none until the live view runs.
func (l *lazyLive) OpenWindows(ctx context.Context, set, entity string) ([]query.Window, error) {
	v := l.v.Load()
	if v == nil {
		return nil, nil
	}
	return v.OpenWindows(ctx, set, entity)
}

// followLive starts the live view as soon as the group table exists, and keeps it running.
func (d *deployment) followLive(ctx context.Context, lazy *lazyLive) {
	for ctx.Err() == nil {
		v, err := live.New(d.topo, live.Config{Brokers: d.cfg.Kafka.Brokers, Group: d.cfg.Processor.Group, Sarama: d.saramaHook()})
		if err == nil {
			lazy.v.Store(v)
			err = v.Run(ctx)
			lazy.v.Store(nil)
		}
		if ctx.Err() != nil {
			return
		}
		d.log.Debug("live view not running yet; open windows are not shown", "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(2 * time.Second):
		}
	}
}

// startQuery starts the query server; it is ready while the aggregate table answers.
func (rg *roleGroup) startQuery(r *role, o startOptions) error {
	d := rg.d
	rs := d.roleState(r.name, "", "")
	rs.running(func(ctx context.Context) (string, error) {
		if err := d.tableReachable(ctx, d.cfg.Sinks.Aggregates.Table); err != nil {
			return "", err
		}
		return "table " + d.cfg.Sinks.Aggregates.Table + " reachable", nil
	})
	rg.goRole(rs, func(ctx context.Context) error { return d.serve(ctx, o.ready) })
	return nil
}

// registerCache exports what the query cache did and holds.
func (d *deployment) registerCache(c *query.Cache) {
	stat := func(f func(query.CacheStats) float64) func() float64 {
		return func() float64 { return f(c.Stats()) }
	}
	opts := func(name, help string) prometheus.Opts {
		return prometheus.Opts{Namespace: "abacus", Subsystem: "query_cache", Name: name, Help: help}
	}
	d.reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts(opts("hits_total", "Reads of settled windows answered from the cache (the rest of their range read from HBase).")),
			stat(func(s query.CacheStats) float64 { return float64(s.Hits) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts(opts("misses_total", "Reads of settled windows the cache could not answer: read from HBase, then kept.")),
			stat(func(s query.CacheStats) float64 { return float64(s.Misses) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts(opts("evictions_total", "Entity spans dropped to keep the cache within query.cache_bytes.")),
			stat(func(s query.CacheStats) float64 { return float64(s.Evictions) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts(opts("bytes", "Estimated memory the cache holds.")),
			stat(func(s query.CacheStats) float64 { return float64(s.Bytes) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts(opts("spans", "Entity spans the cache holds (a set's entity and the aggregates read).")),
			stat(func(s query.CacheStats) float64 { return float64(s.Spans) })),
	)
}
