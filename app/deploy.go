package app

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/IBM/sarama"
	"github.com/abacus-stream/abacus/hbase"
	"github.com/abacus-stream/abacus/kafkasec"
	"github.com/abacus-stream/abacus/store"
	"github.com/abacus-stream/abacus/store/cellstore"
	"github.com/abacus-stream/abacus/store/hbasestore"
	"github.com/abacus-stream/abacus/topology"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/twmb/franz-go/pkg/kgo"
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

// parseDurability reads sinks.durability.
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
	// What runs, for dashboards that must tell a rollout's old processes from its new ones.
	goVersion, commit := buildVersions()
	info := prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "abacus", Name: "build_info",
		Help: "Always 1: the abacus version, VCS commit and Go version of this binary."}, []string{"version", "commit", "go"})
	info.WithLabelValues(Version, commit, goVersion).Set(1)
	reg.MustRegister(info)
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
		limit := time.Duration(cfg.Kafka.ConnectTimeout)
		if limit <= 0 {
			limit = kafkasec.DefaultCheckTimeout
		}
		cctx, cancel := context.WithTimeout(ctx, limit)
		err := sec.Check(cctx, cfg.Kafka.Brokers)
		if err != nil && cctx.Err() != nil && ctx.Err() == nil {
			err = fmt.Errorf("no answer within %v (kafka.connect_timeout): %w", limit, err)
		}
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
	latency, observe := hbaseLatency()
	if err := d.reg.Register(latency); err != nil {
		d.shutdown()
		return nil, err
	}
	err = n.wait.do(ctx, "HBase (zookeeper "+cfg.HBase.ZooKeeper+")", func(ctx context.Context) error {
		limit := time.Duration(cfg.HBase.ConnectTimeout)
		cctx, cancel := context.WithTimeout(ctx, limit)
		defer cancel()
		var err error
		hcfg := cfg.HBase.ClientConfig()
		hcfg.ObserveRPC = observe
		hc, err = hbase.NewClient(cctx, hcfg)
		if err != nil && cctx.Err() != nil && ctx.Err() == nil {
			return fmt.Errorf("not reached within %v (hbase.connect_timeout): %w", limit, err)
		}
		return err
	})
	if err != nil {
		d.shutdown()
		return nil, fmt.Errorf("hbase %s: %w", cfg.HBase.ZooKeeper, err)
	}
	d.hb = hc
	d.reg.MustRegister(newHBaseCollector(hc))
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

// shutdown closes the admin client and the store, whichever are open.
func (d *deployment) shutdown() {
	if d.kafka != nil {
		d.kafka.Close()
	}
	if d.close != nil {
		d.close()
	}
}

// tableReachable reads one row of a table: the store answers.
func (d *deployment) tableReachable(ctx context.Context, table string) error {
	err := d.st.Scan(ctx, store.ScanSpec{Table: table, Limit: 1}, func([]byte, []store.Cell) bool { return false })
	if err != nil {
		return fmt.Errorf("table %s not reachable: %w", table, err)
	}
	return nil
}
