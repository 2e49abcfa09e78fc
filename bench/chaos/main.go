// Command chaos is abacus's failure suite: it runs the whole pipeline (processor, aggregates sink
// and facts sink, each a process of the real abacus binary built with the chaos topology) on the
// real Kafka and HBase of testenv/services.sh, feeds it a generated stream with on-time,
// out-of-order, late, future-dated, malformed and duplicated events, and meanwhile, at random,
// SIGKILLs each role again and again, stops HBase for a while, SIGKILLs HBase (WAL recovery),
// restarts the broker, splits the busiest region of each table and unassigns and assigns regions.
//
// At the end it compares the aggregates and facts tables cell by cell with an oracle computed from
// the stream as it lies in Kafka (package stream) and with a crash-free run of the same stream
// (same cells, one version each, nothing missing, nothing extra), checks that every bad source
// record has its dead letters and every event the oracle judges late for a set its late record
// (nothing else in either topic, repeats identical), prints a summary and exits non-zero on any
// difference.
//
//	go run ./bench/chaos            # the short form CI runs: a few minutes
//	go run ./bench/chaos -long      # ten million events, faults for an hour
//
// It starts Kafka and HBase through testenv/services.sh on ports of its own (49092, 42181,
// 46000, 46020; KAFKA_PORT and friends override them) with data under testenv/.data/chaos
// (ABACUS_TESTENV_DIR), because it stops and kills them; services already running there are used
// and left running.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/abacus-stream/abacus/bench/chaos/stream"
	"github.com/abacus-stream/abacus/hbase"
	"github.com/abacus-stream/abacus/internal/kafkaread"
	"github.com/abacus-stream/abacus/partitioner/franz"
	"github.com/abacus-stream/abacus/topology"
)

// options are the run's settings.
type options struct {
	long           bool
	events         int64
	duration       time.Duration // faults are injected for this long, while the stream is produced
	outage         time.Duration // how long HBase stays stopped in an outage
	outages        int
	hbaseKills     int
	brokerRestarts int
	splits         int // per table
	bounces        int // unassign/assign per table
	killEvery      time.Duration
	partitions     int
	entities       int
	seed           uint64
	reference      bool
	drainTimeout   time.Duration
	dir            string
	keep           bool
}

func main() {
	var o options
	flag.BoolVar(&o.long, "long", false, "the long form: 10M events, faults for an hour, a 5-minute HBase outage (other flags still override)")
	flag.Int64Var(&o.events, "events", 0, "events to generate (default 30000; -long 10000000)")
	flag.DurationVar(&o.duration, "duration", 0, "how long faults are injected while the stream is produced (default 3m; -long 1h)")
	flag.DurationVar(&o.outage, "hbase-outage", 0, "how long HBase stays stopped in an outage (default 40s; -long 5m)")
	flag.IntVar(&o.partitions, "partitions", 0, "source partitions (default 4; -long 8)")
	flag.IntVar(&o.entities, "entities", 200, "distinct entities")
	flag.Uint64Var(&o.seed, "seed", 0, "random seed of the stream and the faults (default: from the clock)")
	flag.BoolVar(&o.reference, "reference", true, "also run the stream through a crash-free pipeline and compare with it")
	flag.StringVar(&o.dir, "dir", "", "folder for logs, configs and processor state (default: a new one under $TMPDIR)")
	flag.BoolVar(&o.keep, "keep", false, "keep tables, topics and the folder even when the run passes")
	flag.Parse()
	if o.seed == 0 {
		o.seed = uint64(time.Now().UnixNano())
	}
	def := func(v *int64, short, long int64) {
		if *v == 0 {
			*v = short
			if o.long {
				*v = long
			}
		}
	}
	defd := func(v *time.Duration, short, long time.Duration) {
		if *v == 0 {
			*v = short
			if o.long {
				*v = long
			}
		}
	}
	def(&o.events, 30_000, 10_000_000)
	defd(&o.duration, 3*time.Minute, time.Hour)
	defd(&o.outage, 40*time.Second, 5*time.Minute)
	defd(&o.killEvery, 25*time.Second, 3*time.Minute)
	defd(&o.drainTimeout, 15*time.Minute, 3*time.Hour)
	if o.partitions == 0 {
		o.partitions = 4
		if o.long {
			o.partitions = 8
		}
	}
	o.outages, o.hbaseKills, o.brokerRestarts, o.splits, o.bounces = 1, 1, 1, 2, 1
	if o.long {
		o.hbaseKills, o.brokerRestarts, o.splits, o.bounces = 2, 3, 4, 3
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ok, err := run(ctx, &o)
	if err != nil {
		log.Printf("chaos: %v", err)
		os.Exit(2)
	}
	if !ok {
		os.Exit(1)
	}
}

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
	id      string
}

func (d *driver) logf(format string, args ...any) {
	d.logMu.Lock()
	defer d.logMu.Unlock()
	fmt.Fprintf(d.logw, "[%s +%s] %s\n", time.Now().UTC().Format("15:04:05"), time.Since(d.t0).Round(time.Second), fmt.Sprintf(format, args...))
}

// env returns the services' settings: the caller's, or the suite's own ports and folder.
func suiteEnv(root string, long bool) []string {
	defaults := [][2]string{
		{"KAFKA_PORT", "49092"}, {"KAFKA_CONTROLLER_PORT", "49093"}, {"KAFKA_SASL_PORT", "0"},
		{"HBASE_ZK_PORT", "42181"}, {"HBASE_MASTER_PORT", "46000"}, {"HBASE_RS_PORT", "46020"},
		{"ABACUS_TESTENV_DIR", filepath.Join(root, "testenv", ".data", "chaos")},
		// The long form's comparison scans tens of millions of cells while memstores are full:
		// the standalone HBase ran out of its 1 GiB heap there (2026-11-30).
		{"HBASE_HEAP", map[bool]string{false: "1g", true: "4g"}[long]},
	}
	var env []string
	for _, kv := range defaults {
		v := os.Getenv(kv[0])
		if v == "" {
			v = kv[1]
		}
		env = append(env, kv[0]+"="+v)
	}
	return append(env, "KAFKA_BROKERS=1")
}

func envValue(env []string, key string) string {
	for _, kv := range env {
		if k, v, _ := strings.Cut(kv, "="); k == key {
			return v
		}
	}
	return ""
}

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

func run(ctx context.Context, o *options) (bool, error) {
	root, err := moduleRoot()
	if err != nil {
		return false, err
	}
	id := fmt.Sprintf("chaos%d", time.Now().Unix())
	if o.dir == "" {
		if o.dir, err = os.MkdirTemp("", "abacus-"+id+"-"); err != nil {
			return false, err
		}
	} else if err := os.MkdirAll(o.dir, 0o755); err != nil {
		return false, err
	}
	timeline, err := os.Create(filepath.Join(o.dir, "timeline.log"))
	if err != nil {
		return false, err
	}
	defer timeline.Close()
	env := suiteEnv(root, o.long)
	d := &driver{o: o, root: root, dir: o.dir, id: id, t0: time.Now(), logw: io.MultiWriter(os.Stdout, timeline),
		svc:     &services{script: filepath.Join(root, "testenv", "services.sh"), env: env},
		brokers: []string{"127.0.0.1:" + envValue(env, "KAFKA_PORT")}, zk: "127.0.0.1:" + envValue(env, "HBASE_ZK_PORT")}
	form := "short"
	if o.long {
		form = "long"
	}
	d.logf("abacus chaos run %s (%s form): seed %d, %d events over %d partitions, faults for %v; folder %s",
		id, form, o.seed, o.events, o.partitions, o.duration, o.dir)

	// Services: start what is not running; stop at the end only what this run started.
	status, err := d.svc.run(ctx, "kafka hbase", "status")
	if err != nil {
		return false, err
	}
	if strings.Contains(status, "stopped") {
		d.logf("starting Kafka and HBase (testenv/services.sh, data in %s)", envValue(env, "ABACUS_TESTENV_DIR"))
		if _, err := d.svc.run(ctx, "kafka hbase", "start"); err != nil {
			return false, err
		}
		defer func() {
			d.logf("stopping the services this run started")
			if _, err := d.svc.run(context.Background(), "kafka hbase", "stop"); err != nil {
				d.logf("%v", err)
			}
		}()
	} else {
		d.logf("using the services already running:\n%s", strings.TrimSpace(status))
	}

	bin := filepath.Join(o.dir, "abacus-chaos")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./bench/chaos/abacus-chaos")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		return false, fmt.Errorf("build the abacus binary: %v\n%s", err, out)
	}
	hctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	d.hb, err = hbase.NewClient(hctx, hbase.Config{ZooKeeper: d.zk})
	cancel()
	if err != nil {
		return false, err
	}
	defer d.hb.Close()
	if d.kc, err = kgo.NewClient(kgo.SeedBrokers(d.brokers...)); err != nil {
		return false, err
	}
	defer d.kc.Close()
	d.adm = kadm.NewClient(d.kc)

	d.source = id + "-events"
	if _, err := d.adm.CreateTopic(ctx, int32(o.partitions), 1, nil, d.source); err != nil {
		return false, fmt.Errorf("create %s: %w", d.source, err)
	}
	chaosRun, err := d.deployment(ctx, bin, "chaos", id+"-")
	if err != nil {
		return false, err
	}
	var refRun *runCfg
	if o.reference {
		if refRun, err = d.deployment(ctx, bin, "reference", id+"-ref-"); err != nil {
			return false, err
		}
	}

	sum := &summary{o: o, id: id, form: form}
	rng := rand.New(rand.NewPCG(o.seed, o.seed^0x51ed270b))
	f := &faults{svc: d.svc, hb: d.hb, rng: rand.New(rand.NewPCG(rng.Uint64(), 1)), logf: d.logf,
		tables: []string{chaosRun.aggTable, chaosRun.factsTable}, count: map[string]int{}}
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
		d.logf("kept: folder %s, tables %s %s, topics with prefix %s", o.dir, chaosRun.aggTable, chaosRun.factsTable, id)
	}
	return pass, nil
}

// deployment writes a deployment's config and creates its topics and tables with the real binary.
func (d *driver) deployment(ctx context.Context, bin, name, prefix string) (*runCfg, error) {
	topo, err := stream.Topology()
	if err != nil {
		return nil, err
	}
	names := map[string]string{stream.SourceTopic: d.source}
	if topo, err = topo.WithTopicNames(prefix, names); err != nil {
		return nil, err
	}
	tbl := strings.ReplaceAll(strings.TrimSuffix(prefix, "-"), "-", "_")
	rc := &runCfg{name: name, topo: topo, procGroup: prefix + "processor", aggGroup: prefix + "aggregates-sink",
		factsGroup: prefix + "facts-sink", aggTable: tbl + "_aggregates", factsTable: tbl + "_facts",
		config: filepath.Join(d.dir, name+".yaml")}
	cfg := fmt.Sprintf(`# %s pipeline of chaos run %s, written by bench/chaos
topology: %s
topics:
  prefix: %q
  names:
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
`, name, d.id, stream.Name, prefix, stream.SourceTopic, d.source, d.brokers[0], d.zk, rc.procGroup,
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

func (d *driver) startRoles(rc *runCfg) error {
	for _, r := range rc.roles {
		if err := r.Start(); err != nil {
			return err
		}
	}
	return nil
}

func (d *driver) stopRoles(rc *runCfg) {
	var wg sync.WaitGroup
	for _, r := range rc.roles {
		wg.Go(func() { r.Stop(90 * time.Second) })
	}
	wg.Wait()
}

// chaosPhase produces the stream while injecting faults, then closes the stream with the flush
// events and waits until the pipeline has drained.
func (d *driver) chaosPhase(ctx context.Context, rc *runCfg, f *faults, rng *rand.Rand, sum *summary) (bool, error) {
	o := d.o
	if err := d.startRoles(rc); err != nil {
		return false, err
	}
	defer d.stopRoles(rc)
	sum.roles = rc.roles

	// The stream lies days in the past, so nothing but the future-dated events is ever ahead of
	// the wall clock, and the flush events a day before now close every window.
	gen := &stream.Generator{Seed: o.seed, Entities: o.entities}
	span := gen.Span(o.events)
	gen.Start = time.Now().Add(-span - 3*24*time.Hour).UnixMilli()
	sum.kinds = map[stream.Kind]int64{}

	produceCtx, stopProducing := context.WithCancel(ctx)
	defer stopProducing()
	prodDone := make(chan error, 1)
	t0 := time.Now()
	go func() { prodDone <- d.produce(produceCtx, gen, sum) }()

	// Role kills, in shuffled rounds so that every role is killed about as often.
	faultCtx, stopFaults := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		order := []int{0, 1, 2}
		for i := 0; ; i++ {
			if i%3 == 0 {
				rng.Shuffle(3, func(a, b int) { order[a], order[b] = order[b], order[a] })
			}
			wait := o.killEvery/2 + time.Duration(rng.Int64N(int64(o.killEvery)))
			select {
			case <-faultCtx.Done():
				return
			case <-time.After(wait):
			}
			r := rc.roles[order[i%3]]
			pid := r.Kill()
			pause := time.Duration(rng.IntN(3000)) * time.Millisecond
			d.logf("SIGKILL %s (pid %d); restarting it in %v", r.name, pid, pause)
			time.Sleep(pause)
			if err := r.Start(); err != nil {
				d.logf("restart %s: %v", r.name, err)
			}
		}
	})
	// Infrastructure faults, one at a time, spread over the run after a warm-up that lets the
	// tables fill. Every planned fault runs, even past the planned duration.
	scheduleDone := make(chan struct{})
	go func() {
		defer close(scheduleDone)
		plan := f.schedule(o)
		warm := min(30*time.Second, o.duration/6)
		left := o.duration - warm
		d.logf("faults planned: %s", strings.Join(plan, ", "))
		select {
		case <-ctx.Done():
			return
		case <-time.After(warm):
		}
		for i, fault := range plan {
			gap := max(left/time.Duration(len(plan)-i+1), 0)
			gap = gap/2 + time.Duration(rng.Int64N(int64(gap)+1))
			if strings.HasPrefix(fault, faultHBaseOutage) {
				gap = max(gap-o.outage/2, 0) // an outage takes its own time from the budget
			}
			start := time.Now()
			select {
			case <-ctx.Done():
				return
			case <-time.After(gap):
			}
			if err := f.inject(ctx, o, fault); err != nil {
				d.logf("fault %s failed: %v", fault, err)
				f.mu.Lock()
				f.skipped = append(f.skipped, fmt.Sprintf("%s: %v", fault, err))
				f.mu.Unlock()
			}
			left -= time.Since(start)
		}
	}()

	// Role kills go on while the stream is produced and the scheduled faults run, all of which
	// may take longer than planned.
	select {
	case <-ctx.Done():
		stopFaults()
		wg.Wait()
		return false, ctx.Err()
	case <-time.After(o.duration):
	}
	<-scheduleDone
	if err := <-prodDone; err != nil {
		stopFaults()
		wg.Wait()
		return false, err
	}
	stopFaults()
	wg.Wait()
	d.logf("stream produced and faults done")
	sum.produce = time.Since(t0)
	// Every role runs again (a killed one was restarted; make sure).
	for _, r := range rc.roles {
		_ = r.Start()
	}
	// Close every window: one flush event per partition, a day past the stream.
	flushes := stream.FlushRecords(o.partitions, time.Now().Add(-24*time.Hour).UnixMilli())
	var recs []*kgo.Record
	for _, r := range flushes {
		recs = append(recs, &kgo.Record{Topic: d.source, Key: r.Key, Value: r.Value})
		sum.kinds[stream.Flush]++
	}
	pcl, err := kgo.NewClient(kgo.SeedBrokers(d.brokers...), kgo.RecordPartitioner(franz.Partitioner()))
	if err != nil {
		return false, err
	}
	err = pcl.ProduceSync(ctx, recs...).FirstErr()
	pcl.Close()
	if err != nil {
		return false, fmt.Errorf("produce the flush events: %w", err)
	}
	d.logf("flush events produced; waiting for the pipeline to drain")
	t1 := time.Now()
	if err := d.drain(ctx, rc); err != nil {
		sum.failures = append(sum.failures, err.Error())
		return false, nil
	}
	sum.drain = time.Since(t1)
	return true, nil
}

// produce writes the generated stream to the source topic at an even rate over the run's duration.
func (d *driver) produce(ctx context.Context, g *stream.Generator, sum *summary) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(d.brokers...), kgo.DefaultProduceTopic(d.source),
		kgo.RecordPartitioner(franz.Partitioner()), kgo.ProducerLinger(5*time.Millisecond))
	if err != nil {
		return err
	}
	defer cl.Close()
	var failed atomic.Int64
	var firstErr atomic.Value
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var recs []stream.Record
	var n int64
	t0, lastLog := time.Now(), time.Now()
	for n < d.o.events {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		// As many events as the even rate asks by now: a busy machine that delays ticks does not
		// slow the stream down.
		target := min(int64(float64(d.o.events)*float64(time.Since(t0))/float64(d.o.duration))+1, d.o.events)
		for ; n < target; n++ {
			recs = g.Next(recs[:0])
			for _, r := range recs {
				sum.kinds[r.Kind]++
				cl.Produce(ctx, &kgo.Record{Key: r.Key, Value: r.Value}, func(_ *kgo.Record, err error) {
					if err != nil {
						failed.Add(1)
						firstErr.CompareAndSwap(nil, err)
					}
				})
			}
		}
		if time.Since(lastLog) >= time.Minute {
			d.logf("produced %d of %d events", n, d.o.events)
			lastLog = time.Now()
		}
	}
	if err := cl.Flush(ctx); err != nil {
		return err
	}
	d.logf("produced all %d events", n)
	if f := failed.Load(); f > 0 {
		sum.produceFailures = f
		d.logf("%d records could not be produced (first: %v); the oracle reads the topic as it is", f, firstErr.Load())
	}
	return nil
}

// drain waits until the processor has read every source record, the sinks have committed
// every record of their topics, and the totals topic has stopped growing.
func (d *driver) drain(ctx context.Context, rc *runCfg) error {
	deadline := time.Now().Add(d.o.drainTimeout)
	var lastTotals int64 = -1
	stable := time.Time{}
	lastLog := time.Now()
	for {
		if time.Now().After(deadline) {
			return fmt.Errorf("%s pipeline did not drain within %v", rc.name, d.o.drainTimeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Second):
		}
		c, cancel := context.WithTimeout(ctx, 20*time.Second)
		procLag, err1 := kafkaread.GroupLag(c, d.adm, rc.procGroup, d.source)
		factsLag, err2 := kafkaread.GroupLag(c, d.adm, rc.factsGroup, d.source)
		aggLag, err3 := kafkaread.GroupLag(c, d.adm, rc.aggGroup, rc.topo.TotalsTopic())
		totalsEnd, err4 := kafkaread.EndSum(c, d.adm, rc.topo.TotalsTopic())
		cancel()
		if err := firstErr(err1, err2, err3, err4); err != nil {
			continue // the broker may be restarting
		}
		if time.Since(lastLog) > 30*time.Second {
			d.logf("%s: lag processor %d, facts sink %d, aggregates sink %d", rc.name, procLag, factsLag, aggLag)
			lastLog = time.Now()
		}
		if procLag != 0 || factsLag != 0 || aggLag != 0 || totalsEnd != lastTotals {
			lastTotals, stable = totalsEnd, time.Time{}
			continue
		}
		if stable.IsZero() {
			stable = time.Now()
		}
		if time.Since(stable) >= 10*time.Second {
			d.logf("%s pipeline drained: %d totals records", rc.name, totalsEnd)
			return nil
		}
	}
}

func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

// referencePhase runs the stream, as the chaos run left it in the source topic, through a second
// pipeline with no faults.
func (d *driver) referencePhase(ctx context.Context, rc *runCfg, sum *summary) error {
	d.logf("reference run: the same source topic through a crash-free pipeline")
	t0 := time.Now()
	if err := d.startRoles(rc); err != nil {
		return err
	}
	defer d.stopRoles(rc)
	if err := d.drain(ctx, rc); err != nil {
		sum.failures = append(sum.failures, err.Error())
		return nil
	}
	for _, r := range rc.roles {
		if _, _, exits := r.counts(); len(exits) > 0 {
			sum.failures = append(sum.failures, fmt.Sprintf("reference %s exited by itself: %v", r.name, exits))
		}
	}
	sum.reference = time.Since(t0)
	sum.refRan = true
	return nil
}

// compare computes the oracle from the source topic, compares the tables and checks the dead
// letters and the late records.
func (d *driver) compare(ctx context.Context, chaosRun, refRun *runCfg, sum *summary) error {
	t0 := time.Now()
	layout := stream.Layout{AggregatesBuckets: 8, FactsBuckets: 8, Family: "d"}
	o := stream.NewOracle(layout)
	err := kafkaread.All(ctx, d.brokers, d.source, func(r *kgo.Record) {
		o.Feed(stream.SourceRecord{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: r.Key, Value: r.Value, Timestamp: r.Timestamp})
	}, kgo.FetchMaxBytes(32<<20))
	if err != nil {
		return err
	}
	sum.oracle = o
	if n := o.Open(); n != 0 {
		sum.failures = append(sum.failures, fmt.Sprintf("the oracle has %d windows still open: the flush events are missing", n))
	}
	d.logf("oracle: %d records, %d aggregate cells, %d fact cells, %d bad records", o.Records, o.Aggregates.Len(), o.Facts.Len(), len(o.Bad))

	var refAgg, refFacts *stream.Cells
	if refRun != nil && sum.refRan {
		var err error
		if sum.refAgg, _, refAgg, err = tableCheck(ctx, d.hb, refRun.aggTable, o.Aggregates, nil, describeAggregate); err != nil {
			return err
		}
		if sum.refFacts, _, refFacts, err = tableCheck(ctx, d.hb, refRun.factsTable, o.Facts, nil, describeFact); err != nil {
			return err
		}
		dl, err := readDeadLetters(ctx, d.brokers, refRun.topo.DeadLetterTopic())
		if err != nil {
			return err
		}
		c := checkDeadLetters(dl, o.Bad)
		sum.refDLQ = &c
		lr, err := readLateRecords(ctx, d.brokers, refRun.topo.LateTopic())
		if err != nil {
			return err
		}
		lc := checkLateRecords(lr, o.Late)
		sum.refLate = &lc
	}
	var err2 error
	if sum.chaosAgg, sum.chaosVsRefAgg, _, err2 = tableCheck(ctx, d.hb, chaosRun.aggTable, o.Aggregates, refAgg, describeAggregate); err2 != nil {
		return err2
	}
	if sum.chaosFacts, sum.chaosVsRefFacts, _, err2 = tableCheck(ctx, d.hb, chaosRun.factsTable, o.Facts, refFacts, describeFact); err2 != nil {
		return err2
	}
	dl, err := readDeadLetters(ctx, d.brokers, chaosRun.topo.DeadLetterTopic())
	if err != nil {
		return err
	}
	c := checkDeadLetters(dl, o.Bad)
	sum.chaosDLQ = &c
	lr, err := readLateRecords(ctx, d.brokers, chaosRun.topo.LateTopic())
	if err != nil {
		return err
	}
	lc := checkLateRecords(lr, o.Late)
	sum.chaosLate = &lc
	sum.compare = time.Since(t0)
	return nil
}

// cleanup drops the run's tables and topics after a pass, so that runs do not fill the services.
func (d *driver) cleanup(runs ...*runCfg) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	topics := []string{d.source}
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
		topics = append(topics, rc.topo.TotalsTopic(), rc.topo.DeadLetterTopic(), rc.topo.LateTopic(), rc.procGroup+"-loop", rc.procGroup+"-table")
	}
	if _, err := d.adm.DeleteTopics(ctx, topics...); err != nil {
		d.logf("delete topics: %v", err)
	}
	if err := os.RemoveAll(d.dir); err != nil {
		d.logf("remove %s: %v", d.dir, err)
	}
}

// summary is what a run found.
type summary struct {
	o               *options
	id, form        string
	kinds           map[stream.Kind]int64
	produceFailures int64
	faults          *faults
	roles           []*role
	oracle          *stream.Oracle
	refRan          bool

	chaosAgg, chaosFacts, refAgg, refFacts stream.Diff
	chaosVsRefAgg, chaosVsRefFacts         stream.Diff
	chaosDLQ, refDLQ                       *dlqCheck
	chaosLate, refLate                     *lateCheck

	produce, drain, reference, compare time.Duration
	failures                           []string
}

// printSummary prints the run's summary and says whether it passed.
func (d *driver) printSummary(s *summary) bool {
	w := d.logw
	fmt.Fprintf(w, "\n===== abacus chaos run %s (%s form), seed %d =====\n", s.id, s.form, s.o.seed)
	var kinds []string
	var events int64
	for _, k := range stream.Kinds() {
		if n := s.kinds[k]; n > 0 {
			kinds = append(kinds, fmt.Sprintf("%s %d", k, n))
			events += n
		}
	}
	fmt.Fprintf(w, "events:   %d records produced over %d partitions (%s)\n", events, s.o.partitions, strings.Join(kinds, ", "))
	if s.produceFailures > 0 {
		fmt.Fprintf(w, "          %d records failed to produce\n", s.produceFailures)
	}
	if f := s.faults; f != nil {
		f.mu.Lock()
		var kills []string
		totalKills := 0
		var exits []string
		for _, r := range s.roles {
			k, starts, ex := r.counts()
			totalKills += k
			kills = append(kills, fmt.Sprintf("%s %d (started %d times)", r.name, k, starts))
			for _, e := range ex {
				exits = append(exits, r.name+" at "+e)
			}
		}
		fmt.Fprintf(w, "kills:    %d SIGKILLs (%s)\n", totalKills, strings.Join(kills, ", "))
		fmt.Fprintf(w, "outages:  HBase stopped %d times, SIGKILLed %d times: down %.1f minutes in all; broker restarted %d times (%d by SIGKILL)\n",
			f.count[faultHBaseOutage], f.count[faultHBaseKill], f.outage.Minutes(), f.count[faultBrokerRestart], f.brokerKills)
		var splits []string
		for k, n := range f.count {
			if strings.HasPrefix(k, faultSplit+" ") {
				splits = append(splits, fmt.Sprintf("%s %d", strings.TrimPrefix(k, faultSplit+" "), n))
			}
		}
		sort.Strings(splits)
		fmt.Fprintf(w, "regions:  %d splits (%s), %d unassign/assigns\n", f.count[faultSplit], strings.Join(splits, ", "), f.count[faultBounce])
		for _, sk := range f.skipped {
			fmt.Fprintf(w, "          fault not done: %s\n", sk)
		}
		if len(f.revived) > 0 {
			fmt.Fprintf(w, "          HBase found dead and restarted by the suite's supervisor %d times (no planned fault; a region server aborted?):\n", len(f.revived))
			for _, r := range f.revived {
				fmt.Fprintf(w, "          %s\n", r)
			}
		}
		reruns, waits := 0, 0
		for _, r := range s.roles {
			reruns += r.logLines(msgGroupRunAgain)
			waits += r.logLines(msgStartWaited)
		}
		fmt.Fprintf(w, "rode out: the processor ran its group again in process %d times (broker outages); roles retried a start step %d times waiting for a server\n",
			reruns, waits)
		fmt.Fprintf(w, "exits:    %d unplanned exits of a role (restarted after 2 s)\n", len(exits))
		for _, e := range exits {
			fmt.Fprintf(w, "          %s\n", e)
		}
		f.mu.Unlock()
	}
	if o := s.oracle; o != nil {
		late := []string{}
		for set, n := range o.LateFor {
			late = append(late, fmt.Sprintf("%s %d", set, n))
		}
		sort.Strings(late)
		lateRecs := []string{}
		for set, n := range o.LateRecords {
			lateRecs = append(lateRecs, fmt.Sprintf("%s %d", set, n))
		}
		sort.Strings(lateRecs)
		fmt.Fprintf(w, "oracle:   %d records read back, %d applied, late for every window (%s), %d bad; expects %d aggregate and %d fact cells, late records (%s) for %d events\n",
			o.Records, o.Applied, strings.Join(late, ", "), len(o.Bad), o.Aggregates.Len(), o.Facts.Len(), strings.Join(lateRecs, ", "), len(o.Late))
	}
	var compared, mismatches, extraVersions int64
	diff := func(what string, dd stream.Diff, ran bool) {
		if !ran {
			return
		}
		compared += dd.Compared
		mismatches += dd.Missing + dd.Extra + dd.WrongValue
		extraVersions += dd.ExtraVersions
		fmt.Fprintf(w, "%-34s %9d cells compared: %d missing, %d extra, %d wrong, %d extra versions\n", what+":", dd.Compared, dd.Missing, dd.Extra, dd.WrongValue, dd.ExtraVersions)
		for _, e := range dd.Examples {
			fmt.Fprintf(w, "          %s\n", e)
		}
		if dd.Mismatches() > 0 {
			s.failures = append(s.failures, fmt.Sprintf("%s: %d differences", what, dd.Mismatches()))
		}
	}
	ran := s.oracle != nil
	diff("chaos aggregates vs oracle", s.chaosAgg, ran)
	diff("chaos facts vs oracle", s.chaosFacts, ran)
	diff("reference aggregates vs oracle", s.refAgg, ran && s.refRan)
	diff("reference facts vs oracle", s.refFacts, ran && s.refRan)
	diff("chaos aggregates vs reference", s.chaosVsRefAgg, ran && s.refRan)
	diff("chaos facts vs reference", s.chaosVsRefFacts, ran && s.refRan)
	dlq := func(what string, c *dlqCheck, clean bool) {
		if c == nil {
			return
		}
		fmt.Fprintf(w, "%-34s %d records for %d bad source records: %d once, %d repeated identically, %d repeated differently, %d missing, %d unexpected, %d wrong reason\n",
			what+":", c.Records, c.Bad, c.Once, c.Identical, c.Different, c.Missing, c.Unexpected, c.WrongReason)
		var hist []string
		for n, k := range c.Distinct {
			hist = append(hist, fmt.Sprintf("%d with %d", k, n))
		}
		sort.Strings(hist)
		if len(hist) > 0 || c.OrderOnly > 0 {
			fmt.Fprintf(w, "          bad records by distinct dead letters: %s; %d whose repeats differ only in header order\n", strings.Join(hist, ", "), c.OrderOnly)
		}
		for _, e := range c.Examples {
			fmt.Fprintf(w, "          %s\n", e)
		}
		if c.Different+c.Missing+c.Unexpected+c.WrongReason > 0 {
			s.failures = append(s.failures, fmt.Sprintf("%s: dead letters missing, unexpected or differing", what))
		}
		if clean && c.Identical > 0 {
			s.failures = append(s.failures, fmt.Sprintf("%s: %d bad records dead-lettered more than once in a run without crashes", what, c.Identical))
		}
	}
	dlq("chaos dead letters", s.chaosDLQ, false)
	dlq("reference dead letters", s.refDLQ, true)
	lateSum := func(what string, c *lateCheck, clean bool) {
		if c == nil {
			return
		}
		fmt.Fprintf(w, "%-34s %d records for %d expected (event, set): %d found (%d once, %d repeated identically, %d repeated differently), %d missing, %d unexpected, %d wrong content\n",
			what+":", c.Records, c.Expected, c.Found(), c.Once, c.Identical, c.Different, c.Missing, c.Unexpected, c.WrongContent)
		fmt.Fprintf(w, "          timestamps: %d of %d records carry their source record's; %d repeated (event, set) with differing timestamps\n",
			c.SourceTimestamp, c.Records, c.TimestampDiffers)
		for _, e := range c.Examples {
			fmt.Fprintf(w, "          %s\n", e)
		}
		if c.Different+c.Missing+c.Unexpected+c.WrongContent > 0 {
			s.failures = append(s.failures, fmt.Sprintf("%s: %d missing, %d unexpected, %d repeated differently, %d with wrong content",
				what, c.Missing, c.Unexpected, c.Different, c.WrongContent))
		}
		if clean && c.Identical > 0 {
			s.failures = append(s.failures, fmt.Sprintf("%s: %d late (event, set) sent more than once in a run without crashes", what, c.Identical))
		}
		// The processor produces a set-aside record with its source record's timestamp, so that a
		// repeat is the same record in every field.
		if c.SourceTimestamp != c.Records || c.TimestampDiffers > 0 {
			s.failures = append(s.failures, fmt.Sprintf("%s: %d of %d records without their source record's timestamp, %d repeats with another",
				what, c.Records-c.SourceTimestamp, c.Records, c.TimestampDiffers))
		}
	}
	lateSum("chaos late records", s.chaosLate, false)
	lateSum("reference late records", s.refLate, true)
	fmt.Fprintf(w, "timings:  produce %v, drain after the faults %v, reference run %v, oracle and comparison %v; total %v\n",
		s.produce.Round(time.Second), s.drain.Round(time.Second), s.reference.Round(time.Second), s.compare.Round(time.Second),
		time.Since(d.t0).Round(time.Second))
	fmt.Fprintf(w, "summary:  %d events, %d cells compared, %d mismatches, %d extra versions\n", s.kinds[stream.OnTime]+s.kinds[stream.Straggler]+s.kinds[stream.Late]+s.kinds[stream.Future]+s.kinds[stream.Malformed], compared, mismatches, extraVersions)
	if len(s.failures) == 0 {
		fmt.Fprintf(w, "RESULT:   PASS\n")
		return true
	}
	fmt.Fprintf(w, "RESULT:   FAIL\n")
	for _, f := range s.failures {
		fmt.Fprintf(w, "          %s\n", f)
	}
	return false
}
