package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/abacus-stream/abacus/partitioner/franz"
	"github.com/abacus-stream/abacus/topology"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"
)

// demo runs a whole deployment in one process: by default with kfake as the broker and the
// embedded cell store as HBase, so nothing needs installing; with -kafka and -hbase against real
// servers.
func (p Program) demo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f, fs, err := parseDemoFlags(args, stderr)
	if err != nil {
		return err
	}
	if parsedOnly(ctx, fs, nil, RoleNames()) {
		return nil
	}
	for _, w := range unknownEnv(os.Environ()) {
		fmt.Fprintf(stderr, "abacus: warning: %s\n", w)
	}
	log, err := logger(LogConfig{Level: f.logLevel, Format: os.Getenv("ABACUS_LOG_FORMAT")}, stderr)
	if err != nil {
		return usagef("-log-level %q or ABACUS_LOG_FORMAT: %v", f.logLevel, err)
	}
	topo, names, err := p.demoTopology(f.topology)
	if err != nil {
		return err
	}
	if f.run > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, f.run)
		defer cancel()
	}
	dir := f.data
	if dir == "" {
		if dir, err = os.MkdirTemp("", "abacus-demo-"); err != nil {
			return err
		}
		defer os.RemoveAll(dir)
	}
	brokers := splitList(f.kafka)
	if len(brokers) == 0 {
		cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation(), kfake.DefaultNumPartitions(4))
		if err != nil {
			return fmt.Errorf("in-process broker: %w", err)
		}
		defer cluster.Close()
		brokers = cluster.ListenAddrs()
	}
	cfg := f.config(topo.Name(), brokers, dir)
	if err := cfg.Validate(names); err != nil {
		return err
	}
	d, err := open(ctx, cfg, topo, log, needs{kafka: true, store: true})
	if err != nil {
		return err
	}
	defer d.shutdown()
	// The query server's /readyz and /healthz speak for every role of the demo.
	d.ops, d.opsOnQuery = newOps(d.reg), true
	if err := p.prepareDemo(ctx, d, f.realKafka()); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "abacus demo: topology %q, broker %v, %s\n", cfg.Topology, brokers, storeName(cfg))
	err = p.runDemo(ctx, d, stdout)
	if ctx.Err() != nil {
		fmt.Fprintln(stdout, "abacus demo: stopped")
		return nil
	}
	return err
}

// demoFlags is the demo's command line.
type demoFlags struct {
	kafka, hbaseZK, listen, data, topology, logLevel string
	run                                              time.Duration
}

// parseDemoFlags reads the demo's command line.
func parseDemoFlags(args []string, stderr io.Writer) (demoFlags, *flag.FlagSet, error) {
	var f demoFlags
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.StringVar(&f.kafka, "kafka", "", "real Kafka brokers (default: an in-process broker)")
	fs.StringVar(&f.hbaseZK, "hbase", "", "real HBase ZooKeeper quorum (default: the embedded cell store)")
	fs.StringVar(&f.listen, "listen", "127.0.0.1:8080", "address of the query API and dashboard")
	fs.StringVar(&f.data, "data", "", "folder for the demo's state and cells (default: a temporary folder, removed at exit)")
	fs.StringVar(&f.topology, "topology", "", "topology to run (default: the only one, or the first)")
	fs.DurationVar(&f.run, "for", 0, "stop after this long (default: until Ctrl-C)")
	fs.StringVar(&f.logLevel, "log-level", "warn", "debug, info, warn or error")
	return f, fs, parse(fs, args, stderr)
}

// realKafka reports whether the demo runs against real brokers rather than its own.
func (f demoFlags) realKafka() bool { return len(splitList(f.kafka)) > 0 }

// demoTopology is the topology -topology names (by default the first), and the names of all.
func (p Program) demoTopology(name string) (*topology.Topology, []string, error) {
	topos, names, err := p.topologies()
	if err != nil {
		return nil, nil, err
	}
	if len(names) == 0 {
		return nil, nil, errors.New("this binary has no topology")
	}
	if name == "" {
		name = p.firstTopology(topos)
	}
	topo, ok := topos[name]
	if !ok {
		return nil, nil, usagef("-topology %q: this binary has %v", name, names)
	}
	return topo, names, nil
}

// config is the demo's deployment of topology name on brokers, its state and cells under dir,
// defaults filled.
func (f demoFlags) config(name string, brokers []string, dir string) *Config {
	cfg := &Config{Topology: name, Kafka: KafkaConfig{Brokers: brokers}, Query: QueryConfig{Listen: f.listen}}
	if f.realKafka() {
		cfg.applyKafkaSecurityEnv(os.Getenv) // real brokers: TLS and SASL from ABACUS_KAFKA_TLS_*, ABACUS_KAFKA_SASL_*
	}
	if f.hbaseZK != "" {
		cfg.HBase.ZooKeeper = f.hbaseZK
	} else {
		cfg.HBase.Embedded = filepath.Join(dir, "cells")
	}
	cfg.Processor.StoragePath = filepath.Join(dir, "state")
	// Short idle timeout and flushes: the demo's streams are small and people watch them.
	cfg.Processor.IdleTimeout = Duration(15 * time.Second)
	cfg.Sinks.FlushInterval = Duration(500 * time.Millisecond)
	// One process, fresh groups: no instance to come back to, so no static membership.
	cfg.Membership.Mode = "dynamic"
	if f.realKafka() {
		// Against real servers, keep the demo's groups apart from earlier runs'.
		cfg.EnsureDefaults()
		suffix := fmt.Sprintf("-demo-%d", time.Now().Unix())
		for _, r := range roles {
			if r.group != nil {
				*r.group(cfg) += suffix
			}
		}
	}
	cfg.EnsureDefaults()
	return cfg
}

// prepareDemo creates the tables and topics (with at least as many partitions as the program's
// DemoTopics ask for); against real brokers it starts the demo's groups at the topics' ends.
func (p Program) prepareDemo(ctx context.Context, d *deployment, realKafka bool) error {
	if err := d.ensureTables(ctx); err != nil {
		return err
	}
	parts := int32(4)
	for _, n := range p.DemoTopics {
		parts = max(parts, n)
	}
	specs, err := d.topicSpecs(ctx, parts)
	if err != nil {
		return err
	}
	if err := d.ensureTopics(ctx, specs); err != nil {
		return err
	}
	if realKafka {
		return startAtEnd(ctx, d.kafka, d.cfg, d.topo)
	}
	return nil
}

// runDemo runs every role, and the program's generator if it has one, until ctx ends or one fails.
func (p Program) runDemo(ctx context.Context, d *deployment, stdout io.Writer) error {
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		return d.run(gctx, RoleNames(), startOptions{ready: func(url string) {
			fmt.Fprintf(stdout, "dashboard: %s\nAPI:       %sapi/v1/topologies\nPress Ctrl-C to stop.\n", url, url)
		}})
	})
	if p.DemoGenerator != nil {
		g.Go(func() error {
			cl, err := kgo.NewClient(d.kgoOpts(kgo.RecordPartitioner(franz.Partitioner()))...)
			if err != nil {
				return err
			}
			defer cl.Close()
			return p.DemoGenerator(gctx, cl)
		})
	}
	return g.Wait()
}

// firstTopology is the topology the demo runs by default: the first one the program lists.
func (p Program) firstTopology(topos map[string]*topology.Topology) string {
	if len(p.Topologies) > 0 {
		if t, err := p.Topologies[0](); err == nil {
			return t.Name()
		}
	}
	for n := range topos {
		return n
	}
	return ""
}

// storeName says where the demo keeps its cells, for its first line of output.
func storeName(cfg *Config) string {
	if cfg.HBase.ZooKeeper != "" {
		return "HBase at " + cfg.HBase.ZooKeeper
	}
	return "embedded cell store in " + cfg.HBase.Embedded
}

// startAtEnd commits, for the demo's fresh groups, the end offsets their topics have before the
// demo produces: against real servers the source topic keeps earlier runs' readings, and
// replaying them first would move stream time past this run's history, which the processor would
// then drop as late.
func startAtEnd(ctx context.Context, kc *kgo.Client, cfg *Config, topo *topology.Topology) error {
	adm := kadm.NewClient(kc)
	for _, r := range roles {
		if r.group == nil || !r.enabled(cfg) {
			continue // the query server joins no group
		}
		group, topics := r.groupIn(cfg), r.inputs(cfg, topo)
		if len(topics) == 0 || group == "" {
			continue
		}
		ends, err := adm.ListEndOffsets(ctx, topics...)
		if err == nil {
			err = ends.Error()
		}
		if err != nil {
			return fmt.Errorf("end offsets of %v: %w", topics, err)
		}
		resp, err := adm.CommitOffsets(ctx, group, ends.Offsets())
		if err == nil {
			err = resp.Error()
		}
		if err != nil {
			return fmt.Errorf("start group %s at the end of %v: %w", group, topics, err)
		}
	}
	return nil
}
