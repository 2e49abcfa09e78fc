package processors_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/abacus-stream/abacus/internal/testenv"
	"github.com/abacus-stream/abacus/partitioner/franz"
	"github.com/abacus-stream/abacus/processors"
	"github.com/abacus-stream/abacus/topology"
)

// clusterPipe is one topology running on the three-broker cluster during TestClusterScenarioBrokerKills:
// its records, its oracle, its processor.
type clusterPipe struct {
	name  string
	parts int
	input string
	topo  *topology.Topology
	cfg   processors.Config
	reg   *prometheus.Registry
	prod  *kgo.Client
	o     *oracle
	// chunks are the records, cut into the stretches the test produces between its steps; the
	// last one ends with a closing event per partition.
	chunks [][]input
	sent   int
	done   chan error // the processor's Run result
	stop   func() error
	// With child set, the processor runs as a process of its own (inst), which the test
	// SIGKILLs while a broker is down; its storage and log are under dir.
	child   bool
	inst    *instance
	dir     string
	adm     *kadm.Client
	brokers []string
}

// closingEvents returns one event per partition, an hour of event time after last, for entities
// of their own: they move every partition's stream time past every window of the scenario, so
// all close by the data alone (the idle timeout, a wall-clock decision, is kept out of the test).
func closingEvents(parts int, last int64, repartition bool) []input {
	var out []input
	for p := range int32(parts) {
		for i := 0; ; i++ {
			dev := fmt.Sprintf("zz-close-%d-%d", p, i)
			if partitionOf(dev, parts) != p {
				continue
			}
			r := reading{Dev: dev, TS: last + 3_600_000, V: 1}
			v, _ := json.Marshal(r)
			key := dev
			if repartition {
				key = "src-close"
			}
			out = append(out, input{key: key, value: v, r: r})
			break
		}
	}
	return out
}

func newClusterPipe(ctx context.Context, t *testing.T, c *testenv.Cluster, label string, seed uint64, records, parts int, repartition, child bool) *clusterPipe {
	t.Helper()
	return newPipe(ctx, t, c.Brokers, c.Admin(), 3, "cl-"+label, seed, records, parts, repartition, child)
}

// newPipe is a clusterPipe on brokers, its topics replicated replication times.
func newPipe(ctx context.Context, t *testing.T, brokers []string, adm *kadm.Client, replication int16, label string, seed uint64,
	records, parts int, repartition, child bool) *clusterPipe {
	t.Helper()
	name := uniqueName(label)
	p := &clusterPipe{name: name, parts: parts, input: name + "-in", reg: prometheus.NewRegistry(), o: newOracle(parts),
		child: child, dir: t.TempDir(), adm: adm, brokers: brokers}
	if _, err := adm.CreateTopic(ctx, int32(parts), replication, nil, p.input); err != nil {
		t.Fatalf("create %s with replication %d: %v", p.input, replication, err)
	}
	p.topo = scenarioTopology(t, name, p.input, repartition)
	ins := genInputs(seed, records, 20, baseTime)
	if repartition {
		rekey(ins)
	}
	ins = append(ins, closingEvents(parts, baseTime+int64(records)*200, repartition)...)
	for _, in := range ins {
		p.o.feed(in)
	}
	// Five stretches: before the first kill, while the first victim is down, while it comes
	// back, while the second is down, while it comes back (with the closing events).
	n := len(ins) - parts
	for i := range 5 {
		p.chunks = append(p.chunks, ins[i*n/5:(i+1)*n/5])
	}
	p.chunks[4] = append(p.chunks[4], ins[n:]...)

	p.cfg = processors.Config{Brokers: brokers, StoragePath: filepath.Join(t.TempDir(), "storage"), Replication: int(replication),
		// No idle advance in this test: a partition whose fetches stall while its leader fails
		// over must not be judged idle (the oracle knows nothing of wall-clock time). Windows
		// close through the closing events.
		IdleTimeout: 10 * time.Minute, TickInterval: 500 * time.Millisecond,
		// Closed windows leave the table through close messages on the loop topic at once, so
		// the loop carries traffic while brokers die.
		FinalRetention: time.Second,
		Registerer:     p.reg, Logger: testLogger(t)}
	prod, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(p.input),
		kgo.RecordPartitioner(franz.Partitioner()), kgo.MetadataMinAge(250*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(prod.Close)
	p.prod = prod
	return p
}

func (p *clusterPipe) start(t *testing.T) {
	t.Helper()
	if p.child {
		p.inst = startInstance(t, scaleChild{Brokers: p.cfg.Brokers, Name: p.name, Input: p.input, Topology: "scenario", Replication: p.cfg.Replication},
			"processor", p.dir)
		p.stop = func() error { p.inst.stop(t); return nil }
		return
	}
	proc, err := processors.New(p.topo, p.cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p.done = make(chan error, 1)
	go func() { p.done <- proc.Run(ctx) }()
	stopped := false
	p.stop = func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		return <-p.done
	}
	t.Cleanup(func() { p.stop() })
}

// alive fails the test if the processor stopped: no broker outage of this test may stop it.
func (p *clusterPipe) alive(t *testing.T, when string) {
	t.Helper()
	if p.child {
		p.inst.alive(t)
		return
	}
	select {
	case err := <-p.done:
		p.done <- err
		t.Fatalf("%s: the processor stopped %s: %v", p.name, when, err)
	default:
	}
}

// topics are the topics the pipe's processor uses, by role.
func (p *clusterPipe) topics() []processors.TopicSpec {
	return processors.TopicSpecs(p.topo, p.cfg, int32(p.parts))
}

// produce produces chunk i, spread over d (all at once when d is 0), and returns at once; the
// returned channel is closed when every record is acknowledged.
func (p *clusterPipe) produce(ctx context.Context, t *testing.T, i int, d time.Duration) <-chan error {
	recs := make([]*kgo.Record, len(p.chunks[i]))
	for j, in := range p.chunks[i] {
		recs[j] = &kgo.Record{Key: []byte(in.key), Value: in.value}
	}
	p.sent += len(recs)
	done := make(chan error, 1)
	go func() {
		const batch = 25
		var pause time.Duration
		if n := (len(recs) + batch - 1) / batch; n > 0 {
			pause = d / time.Duration(n)
		}
		for len(recs) > 0 {
			k := min(batch, len(recs))
			if err := p.prod.ProduceSync(ctx, recs[:k]...).FirstErr(); err != nil {
				done <- fmt.Errorf("%s: produce: %w", p.name, err)
				return
			}
			recs = recs[k:]
			time.Sleep(pause)
		}
		close(done)
	}()
	return done
}

// await waits until a produce of chunk what is acknowledged and the processor received it.
func (p *clusterPipe) await(t *testing.T, what string, produced <-chan error, timeout time.Duration) {
	t.Helper()
	if err := <-produced; err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	p.waitIn(t, timeout)
}

// crash SIGKILLs the processor's process and starts it again on the same storage folder.
func (p *clusterPipe) crash(t *testing.T) {
	t.Helper()
	committed := map[int32]int64{}
	if os, err := p.adm.FetchOffsets(context.Background(), p.name); err == nil {
		os.Each(func(o kadm.OffsetResponse) {
			if o.Topic == p.input {
				committed[o.Partition] = o.At
			}
		})
	}
	p.inst.kill(t)
	t.Logf("%s: processor SIGKILLed; the group had committed %v of %s", p.name, committed, p.input)
	p.start(t)
}

// waitIn waits until the processor received every record produced so far (for a processor
// process: until its group committed them).
func (p *clusterPipe) waitIn(t *testing.T, timeout time.Duration) {
	t.Helper()
	if p.child {
		groupCaughtUp(context.Background(), t, p.adm, p.name, p.input, timeout, p.inst)
		return
	}
	deadline := time.Now().Add(timeout)
	for counter(t, p.reg, "abacus_processor_events_in_total") < float64(p.sent) {
		p.alive(t, "while records were coming")
		if time.Now().After(deadline) {
			t.Fatalf("%s: the processor received %v of %d records in %v", p.name,
				counter(t, p.reg, "abacus_processor_events_in_total"), p.sent, timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestClusterScenarioBrokerKills runs the oracle scenario on the three-broker cluster, with every
// topic at replication 3 and min.insync.replicas 2, while a broker that leads partitions of the
// source, table (changelog), totals and loop topics is SIGKILLed mid-stream and started again,
// twice (two different brokers); that broker is also the groups' coordinator. Two topologies run
// at once:
//
//   - one keyed by entity over four partitions, its processor a process of its own that is also
//     SIGKILLed (and started again) 2 s after each broker, while the dead broker's partitions
//     have no leader yet: writes to them are in flight while later writes to the other brokers
//     are acknowledged, the case where a commit could pass an earlier record's writes;
//   - one whose events are re-keyed through the loop topic (one partition), its processor in
//     this process, which must keep running through both outages.
//
// Then: every final total equals the oracle's; the in-process processor wrote exactly one final
// record per window, the killed one no two different ones (identical repeats after a crash are
// allowed, and counted); every dead-lettered and late record is in its topic.
func TestClusterScenarioBrokerKills(t *testing.T) {
	c := testenv.KafkaCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()

	pipes := []*clusterPipe{
		newClusterPipe(ctx, t, c, "plain", 21, 3000, scenarioPartitions, false, true),
		newClusterPipe(ctx, t, c, "rekeyed", 22, 1500, 1, true, false),
	}
	for _, p := range pipes {
		p.start(t)
	}
	wait := func(what string, chans ...<-chan error) {
		t.Helper()
		for _, ch := range chans {
			if err := <-ch; err != nil {
				t.Fatalf("%s: %v", what, err)
			}
		}
		for _, p := range pipes {
			p.waitIn(t, 3*time.Minute)
		}
	}
	produceAll := func(i int, over time.Duration) []<-chan error {
		var out []<-chan error
		for _, p := range pipes {
			out = append(out, p.produce(ctx, t, i, over))
		}
		return out
	}
	wait("first stretch", produceAll(0, 0)...)

	// Every topic of both pipelines: replication 3, min.insync.replicas 2.
	var all []processors.TopicSpec
	for _, p := range pipes {
		all = append(all, p.topics()...)
	}
	checkReplicated(ctx, t, c, all)

	kill := func(victim int32, stretch int) {
		t.Helper()
		// The victim leads partition 0 of every topic of the roles the issue names (and the
		// others': dead-letter, late), so its death moves the leader of each.
		for _, s := range all {
			c.MakeLeader(t, s.Name, 0, victim)
		}
		// It is also the coordinator of both groups: their offset commits fail over too.
		for _, p := range pipes {
			c.MakeCoordinator(t, p.name, victim)
		}
		led := map[processors.TopicRole]int{}
		for _, s := range all {
			for part := range s.Partitions {
				if c.Leader(t, s.Name, part) == victim {
					led[s.Role]++
				}
			}
		}
		t.Logf("broker %d leads, by role: %v", victim, led)
		for _, role := range []processors.TopicRole{processors.RoleSource, processors.RoleTable, processors.RoleTotals, processors.RoleLoop} {
			if led[role] == 0 {
				t.Fatalf("broker %d leads no partition of a %s topic", victim, role)
			}
		}
		chans := produceAll(stretch, 15*time.Second)
		killed := time.Now()
		c.KillBroker(t, victim)
		time.Sleep(2 * time.Second)
		for _, p := range pipes {
			if p.child {
				p.crash(t)
				t.Logf("%s: processor SIGKILLed and started again %v after broker %d", p.name, time.Since(killed).Round(time.Millisecond), victim)
			}
		}
		wait(fmt.Sprintf("records produced while broker %d is down", victim), chans...)
		for _, p := range pipes {
			p.alive(t, fmt.Sprintf("after broker %d was killed", victim))
		}
		t.Logf("broker %d down: the processors received every record produced meanwhile %v after the kill",
			victim, time.Since(killed).Round(time.Millisecond))

		chans = produceAll(stretch+1, 10*time.Second)
		c.StartBroker(t, victim)
		for _, s := range all {
			c.WaitInSync(t, s.Name, partitionList(s.Partitions), victim, 2*time.Minute)
		}
		wait(fmt.Sprintf("records produced while broker %d came back", victim), chans...)
		t.Logf("broker %d back in every ISR %v after the kill", victim, time.Since(killed).Round(time.Millisecond))
	}
	first := c.Leader(t, pipes[0].input, 0)
	if first < 1 {
		first = 1
	}
	kill(first, 1)
	kill(first%3+1, 3)

	for _, p := range pipes {
		p.check(ctx, t, p.child)
	}
}

// check waits for every final the oracle expects, stops the processor and compares everything it
// wrote with the oracle: totals, dead letters and late records. With repeats, a final may be
// written again, identical (a processor that crashed, or restarted in process, replays);
// otherwise each must be written once. Dead letters and late records are written once either way.
func (p *clusterPipe) check(ctx context.Context, t *testing.T, repeats bool) {
	t.Helper()
	p.alive(t, "at the end of the stream")
	readTotals(ctx, t, p.brokers, p.topo.TotalsTopic(), p.o.hasAllFinals)
	if err := p.stop(); err != nil {
		t.Fatalf("%s: processor run: %v", p.name, err)
	}
	end := endOffsets(ctx, t, p.brokers, p.topo.TotalsTopic())
	l := readTotals(ctx, t, p.brokers, p.topo.TotalsTopic(), func(l *totalsLog) bool { return int64(l.count) >= end })
	p.o.check(t, l)
	again := 0
	for k, fs := range l.finals {
		again += len(fs) - 1
		if len(fs) != 1 && !repeats {
			t.Errorf("%s: %v has %d final records", p.name, k, len(fs))
		}
	}
	dead := distinctRecords(ctx, t, p.brokers, p.topo.DeadLetterTopic())
	// Each once, crashes or not: a run finds what the one before it set aside (aside.go).
	if dead.distinct != p.o.future+p.o.bad || dead.total != dead.distinct {
		t.Errorf("%s: dead-letter topic holds %d records (%d distinct), want %d", p.name, dead.total, dead.distinct, p.o.future+p.o.bad)
	}
	lateWant := 0
	for _, n := range p.o.late {
		lateWant += n
	}
	if lt := p.topo.LateTopic(); lt != "" {
		late := distinctRecords(ctx, t, p.brokers, lt)
		if late.distinct != lateWant || late.total != late.distinct {
			n, some := late.missing(p.o.lateRecords)
			t.Errorf("%s: late topic holds %d records (%d distinct), want %d; %d missing: %v", p.name, late.total, late.distinct, lateWant, n, some)
		}
	} else if got := counter(t, p.reg, "abacus_processor_late_dropped_total"); got < float64(lateWant) {
		t.Errorf("%s: %v late events dropped, want %d", p.name, got, lateWant)
	}
	t.Logf("%s: %d records, %d applied, %d final windows equal to the oracle, %d identical repeats of a final, %d totals records, %v duplicates skipped",
		p.name, p.sent, p.o.applied, len(p.o.final), again, l.count, counter(t, p.reg, "abacus_processor_duplicates_skipped_total"))
}

func partitionList(n int32) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = int32(i)
	}
	return out
}

// checkReplicated fails the test unless every topic has three replicas of each partition, all in
// sync, and min.insync.replicas 2.
func checkReplicated(ctx context.Context, t *testing.T, c *testenv.Cluster, specs []processors.TopicSpec) {
	t.Helper()
	var names []string
	for _, s := range specs {
		names = append(names, s.Name)
		for part := range s.Partitions {
			c.WaitPartition(t, s.Name, part, "3 replicas in sync", 30*time.Second,
				func(leader int32, isr []int32) bool { return leader > 0 && len(isr) == 3 })
		}
	}
	md, err := c.Admin().Metadata(ctx, names...)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range specs {
		for _, p := range md.Topics[s.Name].Partitions {
			if len(p.Replicas) != 3 {
				t.Errorf("%s topic %s/%d has replicas %v, want 3", s.Role, s.Name, p.Partition, p.Replicas)
			}
		}
		if got := testenv.TopicConfig(ctx, t, c.Admin(), s.Name, "min.insync.replicas"); got != "2" {
			t.Errorf("%s topic %s: min.insync.replicas %q, want 2", s.Role, s.Name, got)
		}
	}
}

type recordCount struct {
	total, distinct int
	seen            map[string]bool // "partition@offset set" of each distinct record
}

// missing lists up to ten of want that c has not, and how many in all.
func (c recordCount) missing(want map[string]bool) (int, []string) {
	var out []string
	n := 0
	for k := range want {
		if !c.seen[k] {
			n++
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return n, out[:min(10, len(out))]
}

// distinctRecords reads a dead-letter or late topic and counts its records, and the distinct ones
// by source record (and set, for late records).
func distinctRecords(ctx context.Context, t *testing.T, brokers []string, topic string) recordCount {
	t.Helper()
	recs := readSetAside(ctx, t, brokers, topic)
	seen := map[string]bool{}
	for _, r := range recs {
		seen[fmt.Sprintf("%d@%d %s", r.Source.Partition, r.Source.Offset, r.Set)] = true
	}
	return recordCount{total: len(recs), distinct: len(seen), seen: seen}
}

// TestClusterTwoBrokersDown runs the oracle scenario on the three-broker cluster while two of the
// three brokers (a majority of the KRaft controllers, and of every partition's replicas) are
// SIGKILLed at once, for longer than the producers retry, and then started again. With
// min.insync.replicas=2 no write can succeed meanwhile, by design; the processor must wait (its
// writes fail, goka stops the group, Run runs it again) rather than stop, and once the brokers are
// back every final must equal the oracle's, with dead letters and late records all present
// (identical repeats allowed: a group run again replays).
func TestClusterTwoBrokersDown(t *testing.T) {
	c := testenv.KafkaCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	p := newClusterPipe(ctx, t, c, "two-down", 41, 2000, scenarioPartitions, false, false)
	p.start(t)
	p.await(t, "first stretch", p.produce(ctx, t, 0, 0), 4*time.Minute)

	ch := p.produce(ctx, t, 1, 20*time.Second)
	time.Sleep(3 * time.Second)
	survivor := c.Leader(t, p.input, 0)
	if survivor < 1 {
		survivor = 1
	}
	var down []int32
	for id := int32(1); id <= 3; id++ {
		if id != survivor {
			down = append(down, id)
		}
	}
	t0 := time.Now()
	for _, id := range down {
		c.KillBroker(t, id)
	}
	// Longer than the producers' retries (about a minute): the processor's writes fail for good.
	time.Sleep(75 * time.Second)
	p.alive(t, "while two brokers were down")
	c.StartBrokers(t, down...)
	for _, s := range p.topics() {
		for _, id := range down {
			c.WaitInSync(t, s.Name, partitionList(s.Partitions), id, 3*time.Minute)
		}
	}
	t.Logf("brokers %v SIGKILLed and back in every ISR after %v", down, time.Since(t0).Round(time.Millisecond))
	p.await(t, "records produced while two brokers were down", ch, 4*time.Minute)
	for i := 2; i < len(p.chunks); i++ {
		p.await(t, fmt.Sprintf("stretch %d", i), p.produce(ctx, t, i, 0), 4*time.Minute)
	}
	t.Logf("the processor ran its group again %v times", counter(t, p.reg, "abacus_processor_restarts_total"))
	p.check(ctx, t, true)
}
