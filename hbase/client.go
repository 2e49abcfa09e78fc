package hbase

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Config holds a Client's settings: where the cluster is, and limits that all have defaults
// (EnsureDefaults fills what is left zero).
type Config struct {
	// ZooKeeper is the cluster's ZooKeeper quorum ("host:port,..."), as users'
	// hbase.zookeeper.quorum settings hold it. It may be empty when Bootstrap is set.
	ZooKeeper string
	// ZooKeeperRoot is the znode parent (zookeeper.znode.parent); ZooKeeperRoot when empty.
	ZooKeeperRoot string
	// Bootstrap lists host:port of masters or region servers that serve ClientMetaService (HBase
	// 2.5+). When set, the client finds hbase:meta and the master through them, without ZooKeeper.
	Bootstrap []string
	// User is the effective user the ConnectionHeader names with simple authentication; $USER,
	// else "abacus". With Kerberos the authenticated principal is the user.
	User string
	// Auth is how the client authenticates, as the cluster's hbase.security.authentication says:
	// AuthSimple ("" means simple) or AuthKerberos.
	Auth string
	// Kerberos holds the Kerberos settings, used when Auth is AuthKerberos.
	Kerberos KerberosConfig
	// RPCTimeout bounds one RPC when the context allows longer (or has no deadline), so that a
	// server that stopped answering without closing the connection cannot hang a caller; 60 s,
	// like the Java client's hbase.rpc.timeout. The server is told the same deadline.
	RPCTimeout time.Duration
	// DialTimeout bounds one TCP connect; 5 s.
	DialTimeout time.Duration
	// ObserveRPC, when set, is told of every finished RPC: the region server (or master), the
	// method and how long it took, failed or not. It runs on the caller's goroutine: it must be
	// quick (a histogram's Observe). The client keeps no histogram itself, to link no metrics
	// library.
	ObserveRPC func(server, method string, took time.Duration)
	// ZooKeeperTimeout bounds one lookup in ZooKeeper (connect, session, read) when the context
	// allows longer; 10 s. Without it, a write issued while ZooKeeper is down would wait for it to
	// return, however long it stays away, and its caller would never see the failure.
	ZooKeeperTimeout time.Duration
	// MaxBatchActions caps the actions in one Multi request; 2,048.
	MaxBatchActions int
	// MaxBatchBytes caps the encoded size of one Multi request; 4 MiB.
	MaxBatchBytes int
	// MaxInFlightPerServer bounds Multi requests in flight to one region server; 8.
	MaxInFlightPerServer int
	// MaxInFlightPerRegion bounds Multi requests in flight that carry actions for one region; 8.
	MaxInFlightPerRegion int
	// MaxRounds bounds how many times Apply sends an action (first try included), and how many tries
	// a Get, a scan RPC or a region lookup gets; 10.
	MaxRounds int
	// BackoffMin and BackoffMax bound the wait between rounds, which doubles each round;
	// 50 ms and 5 s.
	BackoffMin, BackoffMax time.Duration
	// RelocateBackoffMax caps the wait before a round whose failures all say the region is not
	// where the client looked (moved, or its server gone): only hbase:meta can tell where it went,
	// and a lookup is one small Get, so waiting the full BackoffMax would only delay the write by up
	// to that long after the region reopens elsewhere. 1 s; never above BackoffMax.
	RelocateBackoffMax time.Duration
	// ProcedureTimeout bounds waiting for a master procedure when the context has no deadline; 5 min.
	ProcedureTimeout time.Duration
}

// EnsureDefaults sets every zero field to its default.
func (c *Config) EnsureDefaults() {
	if c.ZooKeeperRoot == "" {
		c.ZooKeeperRoot = ZooKeeperRoot
	}
	if c.User == "" {
		c.User = os.Getenv("USER")
		if c.User == "" {
			c.User = "abacus"
		}
	}
	if c.RPCTimeout <= 0 {
		c.RPCTimeout = 60 * time.Second
	}
	if c.DialTimeout <= 0 {
		c.DialTimeout = 5 * time.Second
	}
	if c.ZooKeeperTimeout <= 0 {
		c.ZooKeeperTimeout = 10 * time.Second
	}
	if c.MaxBatchActions <= 0 {
		c.MaxBatchActions = 2048
	}
	if c.MaxBatchBytes <= 0 {
		c.MaxBatchBytes = 4 << 20
	}
	if c.MaxInFlightPerServer <= 0 {
		c.MaxInFlightPerServer = 8
	}
	if c.MaxInFlightPerRegion <= 0 {
		c.MaxInFlightPerRegion = 8
	}
	if c.MaxRounds <= 0 {
		c.MaxRounds = 10
	}
	if c.BackoffMin <= 0 {
		c.BackoffMin = 50 * time.Millisecond
	}
	if c.BackoffMax <= 0 {
		c.BackoffMax = 5 * time.Second
	}
	if c.RelocateBackoffMax <= 0 {
		c.RelocateBackoffMax = time.Second
	}
	c.RelocateBackoffMax = min(c.RelocateBackoffMax, c.BackoffMax)
	if c.ProcedureTimeout <= 0 {
		c.ProcedureTimeout = 5 * time.Minute
	}
}

// Validate rejects a configuration that cannot work, each error naming its field. Call it after
// EnsureDefaults (NewClient does both).
func (c *Config) Validate() error {
	var errs []error
	if c.ZooKeeper == "" && len(c.Bootstrap) == 0 {
		errs = append(errs, errInvalid("config", "Config.ZooKeeper and Config.Bootstrap are both empty: say where the cluster is"))
	}
	if c.BackoffMin > c.BackoffMax {
		errs = append(errs, errInvalid("config", "Config.BackoffMin %v is longer than Config.BackoffMax %v", c.BackoffMin, c.BackoffMax))
	}
	if err := c.validateAuth(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Client talks to one HBase cluster. It is safe for concurrent use; create one per process.
type Client struct {
	cfg    Config
	quorum string

	mu     sync.Mutex
	conns  map[string]*conn // key: service + "@" + addr
	dials  map[string]*dialWait
	sems   map[string]chan struct{} // in-flight bounds, key "s:"+addr or "r:"+region name
	closed bool

	regions regionCache

	metaMu   sync.Mutex
	metaAddr string // region server hosting hbase:meta, "" when unknown

	actionsSent   atomic.Int64 // Multi actions put on the wire, first tries and retries
	actionsResent atomic.Int64 // of actionsSent, those sent again by a later round of their Apply
	relocations   atomic.Int64 // regions the servers refused with a relocate-class error
	lookups       atomic.Int64 // hbase:meta lookups of a region
	servers       sync.Map     // addr -> *serverCounters

	auth *kerberosAuth // nil with simple authentication
}

// Stats are counters of a Client's work since it was created, for metrics and tests.
type Stats struct {
	// ActionsSent counts Multi actions put on the wire: first tries and resends.
	ActionsSent int64
	// ActionsResent counts, of ActionsSent, the actions an Apply sent again after they failed in
	// an earlier round: only failed actions are ever resent.
	ActionsResent int64
	// Relocations counts regions a server refused (NotServingRegion, RegionMoved, WrongRegion):
	// splits, moves, unassignments and restarts.
	Relocations int64
	// RegionLookups counts hbase:meta lookups of a region's location.
	RegionLookups int64
}

// Stats returns the client's counters.
func (c *Client) Stats() Stats {
	return Stats{ActionsSent: c.actionsSent.Load(), ActionsResent: c.actionsResent.Load(),
		Relocations: c.relocations.Load(), RegionLookups: c.lookups.Load()}
}

type dialWait struct {
	done chan struct{}
	c    *conn
	err  error
}

// NewClient returns a client for the cluster cfg names (Config.ZooKeeper or Config.Bootstrap). It
// checks that hbase:meta can be found before returning. With Kerberos it also logs in and
// authenticates to the server holding hbase:meta, so that wrong credentials fail here, with the
// setting named, rather than on every later call.
func NewClient(ctx context.Context, cfg Config) (*Client, error) {
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := &Client{cfg: cfg, quorum: cfg.ZooKeeper, conns: map[string]*conn{}, dials: map[string]*dialWait{}, sems: map[string]chan struct{}{}}
	if c.cfg.Auth == AuthKerberos {
		a, err := newKerberosAuth(ctx, c.cfg.Kerberos)
		if err != nil {
			return nil, &Error{Op: "new client", Kind: KindPermanent, Err: &authError{err}}
		}
		c.auth = a
	}
	// A cluster that is starting (or a ZooKeeper that does not answer yet) is waited for, up to
	// MaxRounds lookups of ZooKeeperTimeout each with backoff between them, or the context: each
	// lookup alone gives up after ZooKeeperTimeout.
	var addr string
	var err error
	rt := retries{c: c}
	for round := 0; round < c.cfg.MaxRounds; round++ {
		if round > 0 {
			if rt.wait(ctx) != nil {
				break
			}
		}
		if addr, err = c.metaServer(ctx, false); err == nil || !IsRetriable(err) {
			break
		}
	}
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("hbase: new client: %w", err)
	}
	if c.auth != nil {
		if _, err := c.conn(ctx, serviceClient, addr); err != nil {
			c.Close()
			return nil, fmt.Errorf("hbase: new client: %w", err)
		}
	}
	return c, nil
}

// Close closes every connection and waits for their goroutines. Calls in flight fail with ErrClosed.
func (c *Client) Close() error {
	c.mu.Lock()
	c.closed = true
	conns := c.conns
	c.conns = map[string]*conn{}
	c.mu.Unlock()
	for _, cn := range conns {
		cn.close()
	}
	if c.auth != nil {
		c.auth.close()
	}
	return nil
}

// conn returns a live connection to addr for service, dialing one if needed. Concurrent callers
// share one dial.
func (c *Client) conn(ctx context.Context, service, addr string) (*conn, error) {
	key := service + "@" + addr
	for {
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return nil, ErrClosed
		}
		if cn := c.conns[key]; cn != nil {
			if cn.alive() {
				c.mu.Unlock()
				return cn, nil
			}
			delete(c.conns, key)
			go cn.close() // reap its goroutines; the socket is already closed
		}
		if w := c.dials[key]; w != nil {
			c.mu.Unlock()
			select {
			case <-w.done:
				if w.err != nil {
					return nil, w.err
				}
				continue
			case <-ctx.Done():
				return nil, &Error{Op: "dial " + service, Server: addr, Kind: KindBackoff, Err: ctx.Err()}
			}
		}
		w := &dialWait{done: make(chan struct{})}
		c.dials[key] = w
		c.mu.Unlock()
		cn, err := dial(ctx, addr, service, c.cfg.User, c.cfg.DialTimeout, c.auth)
		c.mu.Lock()
		delete(c.dials, key)
		if err == nil {
			if c.closed {
				err = ErrClosed
			} else {
				c.conns[key] = cn
			}
		}
		c.mu.Unlock()
		if err != nil && cn != nil {
			cn.close()
		}
		w.c, w.err = cn, err
		close(w.done)
		return cn, err
	}
}

// dropConn closes the connection to addr (all services) after a reconnect-class error, and forgets
// the regions it hosted, since a restarted server does not reopen them under the same start code.
func (c *Client) dropConn(addr string) {
	c.mu.Lock()
	var drop []*conn
	for k, cn := range c.conns {
		if cn.addr == addr {
			drop = append(drop, cn)
			delete(c.conns, k)
		}
	}
	c.mu.Unlock()
	for _, cn := range drop {
		cn.closeWith(errDropped)
	}
	c.regions.dropServer(addr)
	c.metaMu.Lock()
	if c.metaAddr == addr {
		c.metaAddr = ""
	}
	c.metaMu.Unlock()
}

// sem returns the in-flight semaphore for key, with n slots.
func (c *Client) sem(key string, n int) chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.sems[key]
	if s == nil {
		s = make(chan struct{}, n)
		c.sems[key] = s
	}
	return s
}

// rpc sends one request to addr's ClientService (or another service) and handles reconnect-class
// failures by dropping the connection.
func (c *Client) rpc(ctx context.Context, service, addr, method string, param, cells *[]byte) ([]byte, []byte, error) {
	parent := ctx
	if dl, ok := ctx.Deadline(); !ok || time.Until(dl) > c.cfg.RPCTimeout {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.cfg.RPCTimeout)
		defer cancel()
	}
	ss := c.serverStats(addr)
	ss.inFlight.Add(1)
	start, dialed := time.Now(), false
	var err error
	defer func() {
		ss.inFlight.Add(-1)
		ss.countRPC(start, dialed, parent.Err() != nil, err)
		if c.cfg.ObserveRPC != nil {
			c.cfg.ObserveRPC(addr, method, time.Since(start))
		}
	}()
	cn, err := c.conn(ctx, service, addr)
	if err != nil {
		putBuf(param)
		putBuf(cells)
		if e, ok := err.(*Error); ok && e.Kind == KindReconnect {
			// A server that refuses connections (killed, or stopped for good) is as gone as one
			// that dropped a live connection: forget the regions cached on it, so that the next
			// round asks hbase:meta where they went instead of dialling the dead address again.
			c.dropConn(addr)
		}
		return nil, nil, err
	}
	dialed = true
	resp, cb, err := cn.call(ctx, method, param, cells)
	if err != nil && parent.Err() == nil && ctx.Err() != nil {
		err = &Error{Op: method, Server: addr, Kind: KindBackoff,
			Message: fmt.Sprintf("no answer within %v", c.cfg.RPCTimeout), Err: err}
	}
	if err != nil {
		if e, ok := err.(*Error); ok && e.Kind == KindReconnect {
			c.dropConn(addr)
		}
	}
	return resp, cb, err
}

// zkContext bounds a ZooKeeper lookup by Config.ZooKeeperTimeout when ctx allows longer.
func (c *Client) zkContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= c.cfg.ZooKeeperTimeout {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, c.cfg.ZooKeeperTimeout)
}

// retries paces the rounds of one operation: wait is called before every round but the first.
type retries struct {
	c           *Client
	round, busy int // rounds waited for so far, and how many of them for a cause that is not a relocation
}

// wait waits before the next round, or until ctx ends. causes are the errors that made the round
// necessary (none when unknown). The wait doubles with each round from BackoffMin up to
// BackoffMax, but rounds whose causes are all relocations (onlyRelocations) wait at most
// RelocateBackoffMax and do not count towards the doubling of the others: a region that
// reopened elsewhere and still answers "opening" for a moment is then asked again after
// BackoffMin, not after the long wait its server's death had grown to.
func (r *retries) wait(ctx context.Context, causes ...error) error {
	t := time.NewTimer(r.next(causes))
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// next is how long to wait before the next round, given its causes, and counts the round.
func (r *retries) next(causes []error) time.Duration {
	reloc := onlyRelocations(causes)
	d := r.c.pause(r.round, r.busy, reloc)
	r.round++
	if !reloc {
		r.busy++
	}
	return d
}

// pause is how long retries.wait waits after round rounds, busy of them not relocations.
func (c *Client) pause(round, busy int, relocation bool) time.Duration {
	n := busy
	if relocation {
		n = round
	}
	d := c.cfg.BackoffMin << min(n, 16)
	if d > c.cfg.BackoffMax || d <= 0 {
		d = c.cfg.BackoffMax
	}
	if relocation {
		d = min(d, c.cfg.RelocateBackoffMax)
	}
	return d
}

// onlyRelocations reports whether every non-nil error is of KindRelocate or KindReconnect (and
// at least one is): nothing but a fresh region lookup can help, so there is no load to back off
// from. Authentication failures are excluded: a missing ticket is not fixed by asking again soon.
func onlyRelocations(errs []error) bool {
	seen := false
	for _, err := range errs {
		if err == nil {
			continue
		}
		var e *Error
		if !errors.As(err, &e) || (e.Kind != KindRelocate && e.Kind != KindReconnect) || errors.Is(err, ErrAuthentication) {
			return false
		}
		seen = true
	}
	return seen
}
