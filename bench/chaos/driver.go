package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/abacus-stream/abacus/hbase"
	"github.com/abacus-stream/abacus/internal/chaos/stream"
	"github.com/abacus-stream/abacus/internal/plan"
	"github.com/abacus-stream/abacus/topology"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// runCfg is one pipeline's deployment: the chaos run's or the reference run's.
type runCfg struct {
	name       string // "chaos" or "reference"
	config     string // path of its abacus YAML
	topo       *topology.Topology
	procGroup  string
	aggGroup   string
	factsGroup string
	aggTable   string
	factsTable string
	roles      []*role
}

// loopTopic is the processor group's loop topic (goka's naming): ticks, close messages and the
// rollups' partial totals and progress.
func (rc *runCfg) loopTopic() string { return plan.LoopTopic(rc.procGroup) }

// driver holds what a run shares.
type driver struct {
	o       *options
	root    string // module root
	dir     string
	brokers []string
	zk      string
	svc     *services
	hb      *hbase.Client
	adm     *kadm.Client
	kc      *kgo.Client
	t0      time.Time
	logMu   sync.Mutex
	logw    io.Writer
	source  string
	regions string // the regions table's topic
	// start is the stream's first nominal event time, set with the regions table (registry);
	// placedUntil is the last RegionPeriod boundary whose places are written (produce extends it).
	start, placedUntil int64
	id                 string
}

// logf writes a line of the run's timeline, on stdout and in timeline.log.
func (d *driver) logf(format string, args ...any) {
	d.logMu.Lock()
	defer d.logMu.Unlock()
	fmt.Fprintf(d.logw, "[%s +%s] %s\n", time.Now().UTC().Format("15:04:05"), time.Since(d.t0).Round(time.Second), fmt.Sprintf(format, args...))
}

// suiteEnv returns the services' settings: the caller's, or the suite's own ports and folder.
func suiteEnv(root string, long, hbaseCluster bool) []string {
	defaults := [][2]string{
		{"KAFKA_PORT", "29092"}, {"KAFKA_CONTROLLER_PORT", "29093"}, {"KAFKA_SASL_PORT", "0"},
		{"HBASE_ZK_PORT", "24181"}, {"HBASE_MASTER_PORT", "24000"}, {"HBASE_RS_PORT", "24020"},
		{"ABACUS_TESTENV_DIR", filepath.Join(root, "testenv", ".data", "chaos")},
		// The long form's comparison scans tens of millions of cells while memstores are full:
		// the standalone HBase ran out of its 1 GiB heap there (2026-11-30).
		{"HBASE_HEAP", map[bool]string{false: "1g", true: "4g"}[long]},
	}
	if hbaseCluster {
		// Below 32768, out of Linux's ephemeral ports, and apart from the test cluster's 31100 and
		// the standalone form's ports and folder: testenv/run-tests.sh runs both forms at once.
		defaults = append(defaults[:0], [2]string{"KAFKA_PORT", "29192"}, [2]string{"KAFKA_CONTROLLER_PORT", "29193"},
			[2]string{"KAFKA_SASL_PORT", "0"},
			[2]string{"ABACUS_TESTENV_DIR", filepath.Join(root, "testenv", ".data", "chaos-cluster")},
			[2]string{"HBASE_REGIONSERVERS", "3"}, [2]string{"HBASE_CLUSTER_PORT", "25100"})
	}
	var env []string
	for _, kv := range defaults {
		v := os.Getenv(kv[0])
		if v == "" {
			v = kv[1]
		}
		env = append(env, kv[0]+"="+v)
	}
	env = append(env, "KAFKA_BROKERS=1")
	if !hbaseCluster {
		env = append(env, "HBASE_REGIONSERVERS=1") // whatever the caller's environment says
	}
	return env
}

// envValue is key's value in env, or "".
func envValue(env []string, key string) string {
	for _, kv := range env {
		if k, v, _ := strings.Cut(kv, "="); k == key {
			return v
		}
	}
	return ""
}

// moduleRoot is the abacus module's folder: the suite builds the binary and runs
// testenv/services.sh from there.
func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", fmt.Errorf("not inside the abacus module: run from the repository")
	}
	return filepath.Dir(mod), nil
}

// run is the whole suite: services, the abacus binary, both deployments, then the phases. It
// says whether the run passed; an error is a run that could not be carried out.
func run(ctx context.Context, o *options) (bool, error) {
	d, timeline, err := newDriver(o)
	if err != nil {
		return false, err
	}
	defer timeline.Close()
	d.logf("abacus chaos run %s (%s form): seed %d, %d events over %d partitions, faults for %v; folder %s",
		d.id, o.form(), o.seed, o.events, o.partitions, o.duration, o.dir)
	stopServices, err := d.startServices(ctx)
	if err != nil {
		return false, err
	}
	defer stopServices()
	bin, err := d.buildBinary(ctx)
	if err != nil {
		return false, err
	}
	closeClients, err := d.connect(ctx)
	if err != nil {
		return false, err
	}
	defer closeClients()
	chaosRun, refRun, err := d.deployments(ctx, bin)
	if err != nil {
		return false, err
	}
	return d.phases(ctx, chaosRun, refRun)
}

// newDriver makes the run's folder and timeline log (the caller closes it) and the driver that
// writes to it.
func newDriver(o *options) (*driver, *os.File, error) {
	root, err := moduleRoot()
	if err != nil {
		return nil, nil, err
	}
	id := fmt.Sprintf("chaos%d", time.Now().Unix())
	if o.dir == "" {
		if o.dir, err = os.MkdirTemp("", "abacus-"+id+"-"); err != nil {
			return nil, nil, err
		}
	} else if err := os.MkdirAll(o.dir, 0o755); err != nil {
		return nil, nil, err
	}
	timeline, err := os.Create(filepath.Join(o.dir, "timeline.log"))
	if err != nil {
		return nil, nil, err
	}
	env := suiteEnv(root, o.long, o.hbaseCluster)
	d := &driver{o: o, root: root, dir: o.dir, id: id, t0: time.Now(), logw: io.MultiWriter(os.Stdout, timeline),
		svc:     &services{script: filepath.Join(root, "testenv", "services.sh"), env: env},
		brokers: []string{"127.0.0.1:" + envValue(env, "KAFKA_PORT")}, zk: "127.0.0.1:" + envValue(env, "HBASE_ZK_PORT")}
	if o.hbaseCluster {
		d.zk = "127.0.0.1:" + envValue(env, "HBASE_CLUSTER_PORT")
	}
	return d, timeline, nil
}

// startServices starts Kafka and HBase unless they run already; the function it returns stops
// them at the end only if this run started them, so that a developer's services stay up.
func (d *driver) startServices(ctx context.Context) (stop func(), err error) {
	status, err := d.svc.run(ctx, "kafka hbase", "status")
	if err != nil {
		return nil, err
	}
	if !strings.Contains(status, "stopped") {
		d.logf("using the services already running:\n%s", strings.TrimSpace(status))
		return func() {}, nil
	}
	d.logf("starting Kafka and HBase (testenv/services.sh, data in %s)", envValue(d.svc.env, "ABACUS_TESTENV_DIR"))
	if _, err := d.svc.run(ctx, "kafka hbase", "start"); err != nil {
		return nil, err
	}
	return func() {
		d.logf("stopping the services this run started")
		if _, err := d.svc.run(context.Background(), "kafka hbase", "stop"); err != nil {
			d.logf("%v", err)
		}
	}, nil
}

// buildBinary builds the abacus binary with the chaos topology into the run's folder: the roles
// run as the real binary, so that a SIGKILL kills a process as in production.
func (d *driver) buildBinary(ctx context.Context) (string, error) {
	bin := filepath.Join(d.dir, "abacus-chaos")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./bench/chaos/abacus-chaos")
	build.Dir = d.root
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build the abacus binary: %v\n%s", err, out)
	}
	return bin, nil
}

// connect opens the driver's own HBase and Kafka clients; the function it returns closes them.
func (d *driver) connect(ctx context.Context) (closeAll func(), err error) {
	hctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	d.hb, err = hbase.NewClient(hctx, hbase.Config{ZooKeeper: d.zk})
	cancel()
	if err != nil {
		return nil, err
	}
	if d.kc, err = kgo.NewClient(kgo.SeedBrokers(d.brokers...)); err != nil {
		d.hb.Close()
		return nil, err
	}
	d.adm = kadm.NewClient(d.kc)
	return func() {
		d.kc.Close()
		d.hb.Close()
	}, nil
}

// deployments creates the source topic and the chaos run's deployment, and the reference run's
// unless -reference=false (then refRun is nil).
func (d *driver) deployments(ctx context.Context, bin string) (chaosRun, refRun *runCfg, err error) {
	d.source = d.id + "-events"
	if _, err := d.adm.CreateTopic(ctx, int32(d.o.partitions), 1, nil, d.source); err != nil {
		return nil, nil, fmt.Errorf("create %s: %w", d.source, err)
	}
	if err := d.registry(ctx); err != nil {
		return nil, nil, err
	}
	if chaosRun, err = d.deployment(ctx, bin, "chaos", d.id+"-"); err != nil {
		return nil, nil, err
	}
	if d.o.reference {
		if refRun, err = d.deployment(ctx, bin, "reference", d.id+"-ref-"); err != nil {
			return nil, nil, err
		}
	}
	return chaosRun, refRun, nil
}

// registry creates the regions table's topic, shared by both deployments, and fills it for the
// stream's first minutes (and the half hour before, for late events): every entity's place at
// every RegionPeriod. produce writes the next places as the stream goes, each before the events
// that need it, so the processor reads table updates through its SIGKILLs and the broker's
// restarts. Both pipelines look each event's region up in it; the oracle computes it
// (stream.RegionAt).
func (d *driver) registry(ctx context.Context) error {
	d.regions = d.id + "-regions"
	compact := "compact"
	if _, err := d.adm.CreateTopic(ctx, int32(d.o.partitions), 1, map[string]*string{"cleanup.policy": &compact}, d.regions); err != nil {
		return fmt.Errorf("create %s: %w", d.regions, err)
	}
	// The stream lies days in the past, so nothing but the future-dated events is ever ahead of
	// the wall clock, and the flush events a day before now close every window.
	g := &stream.Generator{Seed: d.o.seed, Entities: d.o.entities}
	d.start = time.Now().Add(-g.Span(d.o.events) - 3*24*time.Hour).UnixMilli()
	period := stream.RegionPeriod.Milliseconds()
	d.placedUntil = (d.start-30*time.Minute.Milliseconds())/period*period - period // the boundary before the first
	return d.place(ctx, d.start+2*period)
}

// place writes the regions table's places of the RegionPeriod boundaries after the last one
// written, up to event time until.
func (d *driver) place(ctx context.Context, until int64) error {
	if until < d.placedUntil+stream.RegionPeriod.Milliseconds() {
		return nil // no boundary left to write
	}
	g := &stream.Generator{Seed: d.o.seed, Entities: d.o.entities}
	var recs []*kgo.Record
	for _, r := range stream.RegistryRecords(g.EntityCount(), d.placedUntil+stream.RegionPeriod.Milliseconds(), until) {
		recs = append(recs, &kgo.Record{Topic: d.regions, Key: r.Key, Value: r.Value})
	}
	if err := d.kc.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return fmt.Errorf("produce the regions table: %w", err)
	}
	period := stream.RegionPeriod.Milliseconds()
	d.placedUntil = until / period * period
	d.logf("regions table %s: %d places, up to %s", d.regions, len(recs), time.UnixMilli(d.placedUntil).UTC().Format("15:04:05"))
	return nil
}

// phases runs the chaos phase while a supervisor revives an HBase that died unplanned, then the
// reference phase, compares both with the oracle, and prints the summary. A passing run drops
// its tables, topics and folder unless -keep.
func (d *driver) phases(ctx context.Context, chaosRun, refRun *runCfg) (bool, error) {
	o := d.o
	sum := &summary{o: o, id: d.id, form: o.form()}
	rng := rand.New(rand.NewPCG(o.seed, o.seed^0x51ed270b))
	f := &faults{svc: d.svc, hb: d.hb, rng: rand.New(rand.NewPCG(rng.Uint64(), 1)), logf: d.logf,
		tables: []string{chaosRun.aggTable, chaosRun.factsTable}, count: map[string]int{}}
	if o.hbaseCluster {
		port, err := strconv.Atoi(envValue(d.svc.env, "HBASE_CLUSTER_PORT"))
		if err != nil {
			return false, fmt.Errorf("HBASE_CLUSTER_PORT: %w", err)
		}
		f.cluster = &cluster{zk: d.zk, port: port, servers: 3}
	}
	sum.faults = f
	supervise, stopSupervising := context.WithCancel(ctx)
	defer stopSupervising()
	supervised := make(chan struct{})
	go func() { defer close(supervised); f.superviseHBase(supervise) }()
	ok, err := d.chaosPhase(ctx, chaosRun, f, rng, sum)
	if err != nil || !ok {
		stopSupervising()
		<-supervised
		sum.failures = append(sum.failures, "the chaos run did not finish")
		d.printSummary(sum)
		return false, err
	}
	if refRun != nil {
		if err := d.referencePhase(ctx, refRun, sum); err != nil {
			return false, err
		}
	}
	stopSupervising()
	<-supervised
	if err := d.compare(ctx, chaosRun, refRun, sum); err != nil {
		return false, err
	}
	pass := d.printSummary(sum)
	if pass && !o.keep {
		d.cleanup(chaosRun, refRun)
	} else {
		d.logf("kept: folder %s, tables %s %s, topics with prefix %s", o.dir, chaosRun.aggTable, chaosRun.factsTable, d.id)
	}
	return pass, nil
}

// deployment writes a deployment's config and creates its topics and tables with the real binary.
func (d *driver) deployment(ctx context.Context, bin, name, prefix string) (*runCfg, error) {
	topo, err := stream.TopologyJoined()
	if err != nil {
		return nil, err
	}
	names := map[string]string{stream.SourceTopic: d.source, stream.RegistryTopic: d.regions}
	if topo, err = topo.WithTopicNames(prefix, names); err != nil {
		return nil, err
	}
	// Every group and table starts with the prefix, which abacus would otherwise put before them.
	rc := &runCfg{name: name, topo: topo, procGroup: prefix + "processor", aggGroup: prefix + "aggregates-sink",
		factsGroup: prefix + "facts-sink", aggTable: prefix + "aggregates", factsTable: prefix + "facts",
		config: filepath.Join(d.dir, name+".yaml")}
	cfg := fmt.Sprintf(`# %s pipeline of chaos run %s, written by bench/chaos
topology: %s
topics:
  prefix: %q
  names:
    %s: %q
    %s: %q
kafka:
  brokers: [%q]
hbase:
  zookeeper: %q
processor:
  group: %q
  storage_path: %q
  # Stream time must never follow the wall clock in a run: the flush events close every window.
  idle_timeout: 6h
sinks:
  aggregates: {table: %q, group: %q, salt_buckets: 8, versions: 5}
  facts: {table: %q, group: %q, salt_buckets: 8, versions: 5}
  batch_records: 2000
  flush_interval: 500ms
query:
  listen: 127.0.0.1:0
`, name, d.id, stream.Name, prefix, stream.SourceTopic, d.source, stream.RegistryTopic, d.regions, d.brokers[0], d.zk, rc.procGroup,
		filepath.Join(d.dir, name+"-processor-state"), rc.aggTable, rc.aggGroup, rc.factsTable, rc.factsGroup)
	if err := os.WriteFile(rc.config, []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, bin, "admin", "create", "-config", rc.config)
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("abacus admin create (%s): %v\n%s", name, err, out)
	}
	for _, r := range []string{"processor", "aggregates-sink", "facts-sink"} {
		rc.roles = append(rc.roles, newRole(r, bin, rc.config, filepath.Join(d.dir, name+"-"+r+".log"), d.logf))
	}
	return rc, nil
}

// startRoles starts every role of a deployment.
func (d *driver) startRoles(rc *runCfg) error {
	for _, r := range rc.roles {
		if err := r.Start(); err != nil {
			return err
		}
	}
	return nil
}

// stopRoles stops every role of a deployment at once: SIGTERM, and SIGKILL after 90 s.
func (d *driver) stopRoles(rc *runCfg) {
	var wg sync.WaitGroup
	for _, r := range rc.roles {
		wg.Go(func() { r.Stop(90 * time.Second) })
	}
	wg.Wait()
}

// cleanup drops the run's tables and topics after a pass, so that runs do not fill the services.
func (d *driver) cleanup(runs ...*runCfg) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	topics := []string{d.source, d.regions}
	for _, rc := range runs {
		if rc == nil {
			continue
		}
		for _, t := range []string{rc.aggTable, rc.factsTable} {
			_ = d.hb.Admin().DisableTable(ctx, t)
			if err := d.hb.Admin().DeleteTable(ctx, t); err != nil {
				d.logf("drop table %s: %v", t, err)
			}
		}
		topics = append(topics, rc.topo.TotalsTopic(), rc.topo.DeadLetterTopic(), rc.topo.LateTopic(), rc.loopTopic(), rc.procGroup+"-table",
			rc.procGroup+"-table-regions") // the versions of the regions table (plan.VersionsTopic)
	}
	if _, err := d.adm.DeleteTopics(ctx, topics...); err != nil {
		d.logf("delete topics: %v", err)
	}
	if err := os.RemoveAll(d.dir); err != nil {
		d.logf("remove %s: %v", d.dir, err)
	}
}
