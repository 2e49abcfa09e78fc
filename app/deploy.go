package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/abacus-stream/abacus/hbase"
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
}

// open connects to what the command needs: Kafka, and HBase or the embedded store.
func open(ctx context.Context, cfg *Config, topo *topology.Topology, log *slog.Logger, n needs) (*deployment, error) {
	d := &deployment{cfg: cfg, topo: topo, log: log, reg: prometheus.NewRegistry()}
	d.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if n.kafka {
		kc, err := kgo.NewClient(kgo.SeedBrokers(cfg.Kafka.Brokers...))
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
	hctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	hc, err := hbase.NewClient(hctx, cfg.HBase.ClientConfig())
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
	return &query.Server{
		Topologies: []query.Topology{{Name: d.topo.Name(), Sets: d.sets(), Reader: r}},
		Registry:   d.reg,
		Logger:     d.log.With("part", "query"),
		Ready: func(ctx context.Context) error {
			return d.st.Scan(ctx, store.ScanSpec{Table: r.Table(), Limit: 1}, func([]byte, []store.Cell) bool { return false })
		},
	}
}

// serve runs the HTTP API (and dashboard) on the configured address until ctx ends; ready is
// called with the URL once it listens.
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
	srv := d.queryServer(r)
	mux := srv.Handler()
	mountDashboard(mux)
	ln, err := net.Listen("tcp", d.cfg.Query.Listen)
	if err != nil {
		return fmt.Errorf("query.listen %s: %w", d.cfg.Query.Listen, err)
	}
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	if ready != nil {
		ready("http://" + ln.Addr().String() + "/")
	}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = hs.Shutdown(sctx)
	}()
	if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
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

// run runs the given roles until ctx ends or one fails.
func (d *deployment) run(ctx context.Context, roles []string, procOpts func(*processors.Config), ready func(url string)) error {
	g, ctx := errgroup.WithContext(ctx)
	for _, role := range roles {
		switch role {
		case RoleProcessor:
			p, err := d.processor(procOpts)
			if err != nil {
				return err
			}
			g.Go(func() error { return p.Run(ctx) })
		case RoleAggregates, RoleFacts:
			if (role == RoleAggregates && d.cfg.Sinks.Aggregates.Disabled) || (role == RoleFacts && d.cfg.Sinks.Facts.Disabled) {
				continue
			}
			mk := d.aggregatesSink
			if role == RoleFacts {
				mk = d.factsSink
			}
			s, err := mk()
			if err != nil {
				return err
			}
			g.Go(func() error { return s.Run(ctx) })
		case RoleQuery:
			g.Go(func() error { return d.serve(ctx, ready) })
		default:
			return fmt.Errorf("unknown role %q: want %s", role, strings.Join(AllRoles, ", "))
		}
	}
	return g.Wait()
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
		v, err := live.New(d.topo, live.Config{Brokers: d.cfg.Kafka.Brokers, Group: d.cfg.Processor.Group})
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
