package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/IBM/sarama"
	"github.com/abacus-stream/abacus/hbase"
	"github.com/abacus-stream/abacus/internal/membership"
	"github.com/abacus-stream/abacus/kafkasec"
	"github.com/abacus-stream/abacus/processors"
	"github.com/abacus-stream/abacus/query"
	"github.com/abacus-stream/abacus/query/live"
	"github.com/abacus-stream/abacus/schema"
	"github.com/abacus-stream/abacus/sinks"
	"github.com/abacus-stream/abacus/store"
	"github.com/abacus-stream/abacus/store/cellstore"
	"github.com/abacus-stream/abacus/store/hbasestore"
	"github.com/abacus-stream/abacus/topology"
	"github.com/abacus-stream/abacus/windows"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"
)

// deployment holds the connections one topology's parts share.
type deployment struct {
	cfg  *Config
	topo *topology.Topology
	log  *slog.Logger
	reg  *prometheus.Registry

	hb    *hbase.Client // real HBase, or nil (embedded store, or not connected)
	st    store.Store   // HBase or the embedded cell store; nil when the command needs neither
	close func()        // closes st
	kafka *kgo.Client   // admin use only; nil when the command needs no Kafka
	// sec is the Kafka TLS and SASL of every client of the process, loaded once: the processor's
	// sarama clients, the sinks', the live view's, the admin client and the demo's producer.
	sec *kafkasec.Settings
	// ops follows the roles the process runs, for its /healthz and /readyz; opsOnQuery says that
	// the query server's listener serves them.
	ops        *ops
	opsOnQuery bool
}

func parseDurability(s string) (hbase.Durability, error) {
	switch s {
	case "", "table_default":
		return hbase.DurabilityTableDefault, nil
	case "sync_wal":
		return hbase.SyncWAL, nil
	case "fsync_wal":
		return hbase.FsyncWAL, nil
	case "async_wal":
		return hbase.AsyncWAL, nil
	case "skip_wal":
		return hbase.SkipWAL, nil
	}
	return 0, fmt.Errorf("%q is not table_default, sync_wal, fsync_wal, async_wal or skip_wal", s)
}

// needs says which connections a command opens: only what it uses.
type needs struct {
	kafka bool // an admin client of the brokers
	store bool // HBase or the embedded cell store
	// brokers says that the command's roles reach Kafka with clients of their own (the processor,
	// the live view): the security settings are checked at start as for kafka.
	brokers bool
	// wait, set for long-running roles, makes servers that cannot be reached at start something
	// to wait for rather than an error (see waiter). A refused login or certificate is an error
	// either way.
	wait *waiter
}

// open connects to what the command needs: Kafka, and HBase or the embedded store. When the
// command reaches Kafka it first checks the TLS and SASL settings against the brokers, so that a
// wrong password or an untrusted certificate fails here, within seconds, with an error naming the
// setting, rather than as clients retrying in the background.
func open(ctx context.Context, cfg *Config, topo *topology.Topology, log *slog.Logger, n needs) (*deployment, error) {
	return openWith(ctx, cfg, topo, log, n, newRegistry())
}

// newRegistry is the registry of a process's metrics, with the Go runtime's and the process's.
func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// openWith is open with the process's registry, made before (the ops endpoints serve it while
// open connects).
func openWith(ctx context.Context, cfg *Config, topo *topology.Topology, log *slog.Logger, n needs, reg *prometheus.Registry) (*deployment, error) {
	d := &deployment{cfg: cfg, topo: topo, log: log, reg: reg}
	sec, err := cfg.Kafka.Security().Load()
	if err != nil {
		return nil, err
	}
	d.sec = sec
	if n.kafka || n.brokers {
		cctx, cancel := context.WithTimeout(ctx, kafkasec.DefaultCheckTimeout)
		err := sec.Check(cctx, cfg.Kafka.Brokers)
		cancel()
		switch {
		case err == nil:
			log.Debug("kafka reached", "brokers", cfg.Kafka.Brokers, "security", sec)
		case n.wait != nil && kafkasec.IsUnreachable(err) && ctx.Err() == nil:
			log.Warn("kafka brokers not reachable at start; the clients keep trying", "brokers", cfg.Kafka.Brokers, "err", err)
		default:
			return nil, fmt.Errorf("kafka (%s): %w", sec, err)
		}
	}
	if n.kafka {
		// kadm answers from franz-go's metadata cache, which keeps "no such topic" for
		// MetadataMinAge (5 s by default): waiting for a topic just created would take that long.
		kc, err := kgo.NewClient(d.kgoOpts(kgo.MetadataMinAge(200 * time.Millisecond))...)
		if err != nil {
			return nil, fmt.Errorf("kafka %v: %w", cfg.Kafka.Brokers, err)
		}
		d.kafka = kc
	}
	if !n.store {
		return d, nil
	}
	if cfg.HBase.Embedded != "" {
		cs, err := cellstore.Open(cfg.HBase.Embedded)
		if err != nil {
			d.shutdown()
			return nil, err
		}
		d.st, d.close = cs, func() { cs.Close() }
		return d, nil
	}
	var hc *hbase.Client
	err = n.wait.do(ctx, "HBase (zookeeper "+cfg.HBase.ZooKeeper+")", func(ctx context.Context) error {
		var err error
		hc, err = hbase.NewClient(ctx, cfg.HBase.ClientConfig())
		return err
	})
	if err != nil {
		d.shutdown()
		return nil, fmt.Errorf("hbase %s: %w", cfg.HBase.ZooKeeper, err)
	}
	d.hb = hc
	dur, _ := parseDurability(cfg.Sinks.Durability)
	hs, err := hbasestore.New(hc, hbasestore.Config{Durability: dur, ForceSkipWAL: cfg.Sinks.ForceSkipWAL})
	if err != nil {
		d.shutdown()
		return nil, err
	}
	d.st, d.close = hs, func() { hc.Close() }
	return d, nil
}

// kgoOpts are the options of every franz-go client of the deployment: its brokers and security,
// then extra.
func (d *deployment) kgoOpts(extra ...kgo.Opt) []kgo.Opt {
	return append(append(d.sec.KgoOpts(), kgo.SeedBrokers(d.cfg.Kafka.Brokers...)), extra...)
}

// saramaHook applies the deployment's security to every sarama config goka builds (the
// processor's consumers, producer and topic manager; the live view's).
func (d *deployment) saramaHook() func(*sarama.Config) {
	return func(sc *sarama.Config) {
		if err := d.sec.Sarama(sc); err != nil {
			// Only a protocol version below 1.0 fails, and abacus speaks 2.8: sarama then refuses
			// the half-set config with its own error.
			d.log.Error("kafka security settings not applied to a sarama client", "err", err)
		}
	}
}

func (d *deployment) shutdown() {
	if d.kafka != nil {
		d.kafka.Close()
	}
	if d.close != nil {
		d.close()
	}
}

func (d *deployment) layout(t SinkTable) schema.TableLayout {
	return schema.TableLayout{Name: t.Table, Family: t.Family, SaltBuckets: t.SaltBuckets, Versions: t.Versions,
		TTL: time.Duration(t.TTL), BloomFilter: t.BloomFilter, Compression: t.Compression}
}

// ensureTables creates the sink tables (and offsets table) or checks that they match the config.
func (d *deployment) ensureTables(ctx context.Context) error {
	for _, t := range []SinkTable{d.cfg.Sinks.Aggregates, d.cfg.Sinks.Facts} {
		if t.Disabled {
			continue
		}
		d.log.Info("ensuring table", "table", t.Table, "salt_buckets", t.SaltBuckets)
		if err := d.st.EnsureTable(ctx, d.layout(t)); err != nil {
			return err
		}
	}
	if d.cfg.Sinks.Offsets == "hbase" {
		return sinks.EnsureOffsetsTable(ctx, d.hb.Admin(), d.cfg.Sinks.OffsetsTable)
	}
	return nil
}

// sinkTopics checks that the source topics exist and creates the totals and dead-letter topics
// the sinks read and write, with the sources' partition count, if the processor has not yet.
func (d *deployment) sinkTopics(ctx context.Context) error {
	specs, err := d.topicSpecs(ctx, 0)
	if err != nil {
		return err
	}
	var need []processors.TopicSpec
	for _, t := range specs {
		switch t.Role {
		case processors.RoleSource, processors.RoleTotals, processors.RoleDeadLetter:
			need = append(need, t)
		}
	}
	return d.ensureTopics(ctx, need, processors.RoleSource)
}

// processorConfig is the processor group's configuration; clientOpts may adjust it.
func (d *deployment) processorConfig(clientOpts func(*processors.Config)) processors.Config {
	pc := processors.Config{
		Brokers:     d.cfg.Kafka.Brokers,
		Group:       d.cfg.Processor.Group,
		StoragePath: d.cfg.Processor.StoragePath,
		IdleTimeout: time.Duration(d.cfg.Processor.IdleTimeout),
		Replication: d.cfg.Processor.Replication,
		Registerer:  d.reg,
		Logger:      d.log.With("part", "processor"),
		Sarama:      d.saramaHook(),

		InstanceID:        d.memberID(RoleProcessor),
		SessionTimeout:    time.Duration(d.cfg.Membership.SessionTimeout),
		HeartbeatInterval: heartbeatInterval,
	}
	if clientOpts != nil {
		clientOpts(&pc)
	}
	return pc
}

func (d *deployment) processor(clientOpts func(*processors.Config)) (*processors.Processor, error) {
	return processors.New(d.topo, d.processorConfig(clientOpts))
}

func (d *deployment) sinkConfig(t SinkTable, topics []string, name string) (sinks.Config, error) {
	cfg := sinks.Config{
		Brokers:         d.cfg.Kafka.Brokers,
		Group:           t.Group,
		Topics:          topics,
		DeadLetterTopic: d.topo.DeadLetterTopic(),
		MaxBatchRecords: d.cfg.Sinks.BatchRecords,
		MaxBatchBytes:   d.cfg.Sinks.BatchBytes,
		FlushInterval:   time.Duration(d.cfg.Sinks.FlushInterval),
		Logger:          d.log.With("part", name),
		Metrics:         sinks.NewMetrics(d.reg, name),
		TTL:             time.Duration(t.TTL),
		ClientOptions:   d.sec.KgoOpts(),

		InstanceID:        d.memberID(roleOfSink[name]),
		SessionTimeout:    time.Duration(d.cfg.Membership.SessionTimeout),
		HeartbeatInterval: heartbeatInterval,
	}
	if d.cfg.Sinks.Offsets == "hbase" {
		cfg.Offsets = sinks.NewHBaseOffsets(d.hb, d.cfg.Sinks.OffsetsTable)
	}
	return cfg, nil
}

func (d *deployment) aggregatesSink() (*sinks.FlushThenCommit, error) {
	t := d.cfg.Sinks.Aggregates
	cfg, err := d.sinkConfig(t, []string{d.topo.TotalsTopic()}, "aggregates")
	if err != nil {
		return nil, err
	}
	return sinks.NewFlushThenCommit(cfg, &sinks.AggregatesEncoder{Table: t.Table, Family: t.Family, SaltBuckets: t.SaltBuckets}, d.st)
}

func (d *deployment) factsSink() (*sinks.FlushThenCommit, error) {
	t := d.cfg.Sinks.Facts
	cfg, err := d.sinkConfig(t, d.topo.SourceTopics(), "facts")
	if err != nil {
		return nil, err
	}
	// The processor dead-letters the source records both refuse: one dead letter per bad record.
	enc := &sinks.FactsEncoder{Table: t.Table, Family: t.Family, SaltBuckets: t.SaltBuckets, MaxFutureSkew: d.topo.MaxFutureSkew(),
		Extract: sinks.FactsOf(d.topo), LeaveRejectsToProcessor: true}
	return sinks.NewFlushThenCommit(cfg, enc, d.st)
}

// sets describes the topology's aggregate sets for the query API.
func (d *deployment) sets() []query.SetInfo {
	var out []query.SetInfo
	for _, s := range d.topo.Sets() {
		out = append(out, query.SetInfo{Name: s.Name, Window: describeWindow(s.Window), Aggregates: s.Aggregations})
	}
	return out
}

// reader reads the aggregate table, with the salt buckets the table was created with.
func (d *deployment) reader(ctx context.Context) (*query.Reader, error) {
	t := d.cfg.Sinks.Aggregates
	return query.NewReader(ctx, d.st, t.Table, t.Family)
}

func (d *deployment) queryServer(r *query.Reader) *query.Server {
	srv := &query.Server{
		Topologies: []query.Topology{{Name: d.topo.Name(), Sets: d.sets(), Reader: r}},
		Registry:   d.reg,
		Logger:     d.log.With("part", "query"),
		Limits:     d.cfg.Query.Limits.Limits(),
		Ready:      func(ctx context.Context) error { return d.tableReachable(ctx, r.Table()) },
	}
	if d.ops != nil && d.opsOnQuery {
		// The process's ops endpoints ride on this listener: /readyz and /healthz speak for every
		// role of the process.
		srv.Ready, srv.Healthy = d.ops.readyErr, d.ops.healthErr
	}
	return srv
}

// tableReachable reads one row of a table: the store answers.
func (d *deployment) tableReachable(ctx context.Context, table string) error {
	err := d.st.Scan(ctx, store.ScanSpec{Table: table, Limit: 1}, func([]byte, []store.Cell) bool { return false })
	if err != nil {
		return fmt.Errorf("table %s not reachable: %w", table, err)
	}
	return nil
}

// roleOfSink names the role of each sink.
var roleOfSink = map[string]string{"aggregates": RoleAggregates, "facts": RoleFacts}

// memberID is the group.instance.id of a role of this process, or "" for a dynamic member.
func (d *deployment) memberID(role string) string { return d.cfg.memberID(role) }

// memberID is the group.instance.id of a role of a process with this config, or "" for a dynamic
// member (and for the query server, which joins no group).
func (c *Config) memberID(role string) string {
	m := c.Membership
	if !m.Static() || m.InstanceID == "" || role == RoleQuery {
		return ""
	}
	return membership.MemberID(m.InstanceID, role)
}

// groupOf is the consumer group of a role ("" for the query server).
func (c *Config) groupOf(role string) string {
	switch role {
	case RoleProcessor:
		return c.Processor.Group
	case RoleAggregates:
		return c.Sinks.Aggregates.Group
	case RoleFacts:
		return c.Sinks.Facts.Group
	}
	return ""
}

// serve runs the HTTP API (and dashboard) on the configured address until ctx ends; ready is
// called with the URL once it listens. TLS and authentication come from query.tls and
// query.auth; their files are read again when they change and on SIGHUP.
func (d *deployment) serve(ctx context.Context, ready func(url string)) error {
	r, err := d.reader(ctx)
	if err != nil {
		return err
	}
	if !d.cfg.Query.NoLive {
		live := &lazyLive{}
		r = r.WithLive(live)
		go d.followLive(ctx, live)
	}
	qc := d.cfg.Query
	srv := d.queryServer(r)
	var reloadable []query.Reloadable
	if qc.TLS.CertFile != "" || qc.TLS.KeyFile != "" {
		if srv.TLS, err = query.NewCertReloader(qc.TLS.CertFile, qc.TLS.KeyFile, "query.tls"); err != nil {
			return err
		}
		reloadable = append(reloadable, srv.TLS)
	}
	if ac := qc.Auth.AuthConfig(); ac.Enabled() {
		if srv.Auth, err = query.NewAuthenticator(ac); err != nil {
			return err
		}
		reloadable = append(reloadable, srv.Auth)
	}
	mux := srv.Handler()
	mountDashboard(mux)
	h := srv.Secure(mux)
	ln, err := net.Listen("tcp", qc.Listen)
	if err != nil {
		return fmt.Errorf("query.listen %s: %w", qc.Listen, err)
	}
	warnExposed(d.log, qc.Listen, srv.Auth != nil, srv.TLS != nil)

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	hup := make(chan os.Signal, 1)
	if len(reloadable) > 0 {
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
		for _, rl := range reloadable {
			go query.Watch(ctx, rl, time.Duration(qc.ReloadInterval), d.log.With("part", "query"))
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
	scheme := "http"
	if srv.TLS != nil {
		scheme = "https"
	}
	if ready != nil {
		ready(scheme + "://" + ln.Addr().String() + "/")
	}
	return srv.Serve(ctx, ln, h)
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

// Roles a process can run.
const (
	RoleProcessor  = "processor"
	RoleAggregates = "aggregates-sink"
	RoleFacts      = "facts-sink"
	RoleQuery      = "query"
)

// AllRoles is every role, for a single-process deployment.
var AllRoles = []string{RoleProcessor, RoleAggregates, RoleFacts, RoleQuery}

// run runs the given roles until ctx ends or one fails. Each role reports to the process's ops
// endpoints (d.ops; made here when the caller made none); a static member first takes this host's
// lock on its instance id (membership.Lock), so that a second process of the host under the same
// id fails at once instead of fencing the first.
func (d *deployment) run(ctx context.Context, roles []string, procOpts func(*processors.Config), ready func(url string)) error {
	if d.ops == nil {
		d.ops = newOps(d.reg)
	}
	for _, role := range roles {
		if !contains(AllRoles, role) {
			return fmt.Errorf("unknown role %q: want %s", role, strings.Join(AllRoles, ", "))
		}
	}
	var releases []func()
	defer func() {
		for _, r := range releases {
			r()
		}
	}()
	lock := func(group, member string) error {
		if member == "" {
			return nil
		}
		release, err := membership.Lock(group, member)
		if err != nil {
			return err
		}
		releases = append(releases, release)
		return nil
	}
	g, ctx := errgroup.WithContext(ctx)
	// goRole runs a role, and reports its end to the ops endpoints.
	goRole := func(rs *roleState, run func() error) {
		g.Go(func() error {
			err := run()
			if ctx.Err() != nil && err != nil && errors.Is(err, context.Canceled) {
				err = nil
			}
			rs.ended(err)
			return err
		})
	}
	for _, role := range roles {
		switch role {
		case RoleProcessor:
			p, err := d.processor(procOpts)
			if err != nil {
				return err
			}
			member := d.memberID(role)
			rs := d.roleState(role, d.cfg.Processor.Group, member)
			if err := lock(d.cfg.Processor.Group, member); err != nil {
				rs.ended(err)
				return fmt.Errorf("processor: %w", err)
			}
			rs.running(func(context.Context) (string, error) {
				if err := p.Ready(); err != nil {
					return "", err
				}
				return fmt.Sprintf("%d partitions, restored and running", p.Status().Partitions), nil
			})
			goRole(rs, func() error { return p.Run(ctx) })
		case RoleAggregates, RoleFacts:
			t, mk := d.cfg.Sinks.Aggregates, d.aggregatesSink
			if role == RoleFacts {
				t, mk = d.cfg.Sinks.Facts, d.factsSink
			}
			if t.Disabled {
				continue
			}
			s, err := mk()
			if err != nil {
				return err
			}
			member := d.memberID(role)
			rs := d.roleState(role, t.Group, member)
			if err := lock(t.Group, member); err != nil {
				rs.ended(err)
				return fmt.Errorf("%s: %w", role, err)
			}
			rs.running(func(ctx context.Context) (string, error) {
				if err := s.Ready(); err != nil {
					return "", err
				}
				if err := d.tableReachable(ctx, t.Table); err != nil {
					return "", err
				}
				return fmt.Sprintf("%d partitions; table %s reachable", s.Status().Partitions, t.Table), nil
			})
			goRole(rs, func() error { return s.Run(ctx) })
		case RoleQuery:
			rs := d.roleState(role, "", "")
			rs.running(func(ctx context.Context) (string, error) {
				if err := d.tableReachable(ctx, d.cfg.Sinks.Aggregates.Table); err != nil {
					return "", err
				}
				return "table " + d.cfg.Sinks.Aggregates.Table + " reachable", nil
			})
			goRole(rs, func() error { return d.serve(ctx, ready) })
		}
	}
	return g.Wait()
}

// roleState is the ops endpoints' state of a role: the one the caller added while connecting, or
// a new one.
func (d *deployment) roleState(role, group, member string) *roleState {
	if rs := d.ops.lookup(role); rs != nil {
		return rs
	}
	return d.ops.role(role, group, member)
}

func describeWindow(s windows.Spec) string {
	ms := func(v int64) string { return (time.Duration(v) * time.Millisecond).String() }
	switch s.Kind() {
	case windows.KindTumbling:
		return "tumbling " + ms(s.Size())
	case windows.KindHopping:
		return "hopping " + ms(s.Size()) + " every " + ms(s.Advance())
	case windows.KindSession:
		return "session, gap " + ms(s.Gap())
	}
	return "unknown"
}

// mountDashboard serves the dashboard page at /.
func mountDashboard(mux *http.ServeMux) { mux.Handle("GET /", query.Dashboard()) }

// lazyLive serves open windows once the live view exists: the group table it reads appears only
// when the processor group first runs.
type lazyLive struct{ v atomic.Pointer[live.View] }

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
