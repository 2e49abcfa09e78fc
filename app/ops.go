package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// opsListen is where a process running roles serves its ops endpoints: ops.listen, else the query
// server's listener when the query role runs here (""), else the default of its first role.
// separate reports whether that is a listener of its own.
func opsListen(cfg *Config, roles []string) (addr string, separate bool) {
	switch l := cfg.Ops.Listen; {
	case l == "off":
		return "", false
	case l != "":
		return l, true
	case servesOpsIn(roles):
		return "", false
	}
	// The first role's default: one port per role, so that one process per role on a host
	// needs no configuration (two of one role do: ops.listen).
	if rs, err := rolesOf(roles); err == nil && len(rs) > 0 {
		return rs[0].opsListen, true
	}
	return "", false
}

// ops is one process's operations endpoints: /metrics (the process's registry: every role's
// metrics), /healthz (the process runs and no role failed) and /readyz (every role is ready: the
// processor has joined its group and restored its partitions; a sink has joined its group and
// reaches its table; the query server reaches its table).
type ops struct {
	reg *prometheus.Registry
	mu  sync.Mutex
	// roles are in the order they were added.
	roles []*roleState
	// waitingFor says what the starting roles wait for, when a start step had to be retried.
	waitingFor string
	info       *prometheus.GaugeVec
}

// roleState is one role of the process, as the ops endpoints report it.
type roleState struct {
	name   string
	member string // group.instance.id, empty for dynamic members and the query server
	mu     sync.Mutex
	phase  string                                    // starting, running, stopped or failed
	err    error                                     // why it failed
	check  func(ctx context.Context) (string, error) // set once running
}

func newOps(reg *prometheus.Registry) *ops {
	o := &ops{reg: reg, info: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "abacus", Name: "role_info",
		Help: "The roles this process runs, with their consumer group and instance id (group.instance.id; empty: a dynamic member)."},
		[]string{"role", "group", "instance_id"})}
	reg.MustRegister(o.info)
	return o
}

// role adds a role, starting.
func (o *ops) role(name, group, member string) *roleState {
	r := &roleState{name: name, member: member, phase: "starting"}
	o.mu.Lock()
	o.roles = append(o.roles, r)
	o.mu.Unlock()
	o.info.WithLabelValues(name, group, member).Set(1)
	return r
}

// waiting says what the process's start waits for ("" when it no longer waits): /readyz shows it.
func (o *ops) waiting(what string) {
	o.mu.Lock()
	o.waitingFor = what
	o.mu.Unlock()
}

// lookup finds a role added before, or nil.
func (o *ops) lookup(name string) *roleState {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, r := range o.roles {
		if r.name == name {
			return r
		}
	}
	return nil
}

// running marks the role running, checked for readiness by check (a detail when ready).
func (r *roleState) running(check func(ctx context.Context) (string, error)) {
	r.mu.Lock()
	r.phase, r.check = "running", check
	r.mu.Unlock()
}

// ended marks the role stopped, or failed with err.
func (r *roleState) ended(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil && !errors.Is(err, context.Canceled) {
		r.phase, r.err = "failed", err
		return
	}
	if r.phase != "failed" {
		r.phase = "stopped"
	}
}

// roleReport is one role in the answers of /healthz and /readyz.
type roleReport struct {
	Role   string `json:"role"`
	Member string `json:"instance_id,omitempty"`
	State  string `json:"state"`
	Ready  bool   `json:"ready"`
	Detail string `json:"detail,omitempty"`
}

type opsReport struct {
	Status string       `json:"status"`
	Roles  []roleReport `json:"roles"`
}

func (o *ops) snapshot() []*roleState {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]*roleState(nil), o.roles...)
}

// health reports the process failed when a role failed (it is about to exit).
func (o *ops) health() (opsReport, error) {
	rep := opsReport{Status: "ok"}
	var errs []error
	for _, r := range o.snapshot() {
		r.mu.Lock()
		rr := roleReport{Role: r.name, Member: r.member, State: r.phase}
		if r.err != nil {
			rr.Detail = r.err.Error()
			errs = append(errs, fmt.Errorf("%s: %w", r.name, r.err))
		}
		r.mu.Unlock()
		rep.Roles = append(rep.Roles, rr)
	}
	if len(errs) > 0 {
		rep.Status = "failed"
	}
	return rep, errors.Join(errs...)
}

// readiness checks every role (at once: a store check may take a while).
func (o *ops) readiness(ctx context.Context) (opsReport, error) {
	roles := o.snapshot()
	o.mu.Lock()
	starting := "starting: connecting to Kafka and HBase"
	if o.waitingFor != "" {
		starting = "starting: " + o.waitingFor
	}
	o.mu.Unlock()
	rep := opsReport{Status: "ready", Roles: make([]roleReport, len(roles))}
	errs := make([]error, len(roles))
	var wg sync.WaitGroup
	for i, r := range roles {
		r.mu.Lock()
		phase, check, ferr := r.phase, r.check, r.err
		r.mu.Unlock()
		rep.Roles[i] = roleReport{Role: r.name, Member: r.member, State: phase}
		switch {
		case phase == "failed":
			errs[i] = ferr
		case phase == "starting":
			errs[i] = errors.New(starting)
		case phase != "running" || check == nil:
			errs[i] = errors.New(phase)
		default:
			wg.Go(func() {
				detail, err := check(ctx)
				rep.Roles[i].Detail, errs[i] = detail, err
			})
		}
	}
	wg.Wait()
	var all []error
	for i, err := range errs {
		if err != nil {
			rep.Roles[i].Detail = err.Error()
			all = append(all, fmt.Errorf("%s: %w", roles[i].name, err))
		} else {
			rep.Roles[i].Ready = true
		}
	}
	if len(all) > 0 {
		rep.Status = "not ready"
	}
	return rep, errors.Join(all...)
}

// readyErr and healthErr serve the query server's /readyz and /healthz when the ops endpoints
// ride on its listener.
func (o *ops) readyErr(ctx context.Context) error { _, err := o.readiness(ctx); return err }
func (o *ops) healthErr() error                   { _, err := o.health(); return err }

// handler serves the ops endpoints.
func (o *ops) handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(o.reg, promhttp.HandlerOpts{}))
	answer := func(w http.ResponseWriter, rep opsReport, err error) {
		code := http.StatusOK
		if err != nil {
			code = http.StatusServiceUnavailable
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(rep)
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		rep, err := o.health()
		answer(w, rep, err)
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		defer cancel()
		rep, err := o.readiness(ctx)
		answer(w, rep, err)
	})
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "abacus ops endpoints: /metrics /healthz /readyz")
	})
	return mux
}

// serve listens on addr and serves the ops endpoints until ctx ends; it returns once listening,
// with the URL.
func (o *ops) serve(ctx context.Context, addr string, log *slog.Logger) (string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("ops.listen %s: %w", addr, err)
	}
	if host, _, _ := splitHostPort(addr); !isLoopback(host) {
		log.Warn("the ops endpoints (/metrics, /healthz, /readyz) listen beyond this machine, without authentication: metrics name topics, groups and instance ids",
			"listen", addr)
	}
	hs := &http.Server{Handler: o.handler(), ReadHeaderTimeout: 10 * time.Second, WriteTimeout: time.Minute,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = hs.Shutdown(sctx)
	}()
	go func() {
		if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("ops endpoints stopped", "err", err)
		}
	}()
	return "http://" + ln.Addr().String() + "/", nil
}
