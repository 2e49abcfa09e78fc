package processors_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/abacus-stream/abacus/internal/testenv"
	"github.com/abacus-stream/abacus/partitioner/franz"
	"github.com/abacus-stream/abacus/processors"
	"github.com/abacus-stream/abacus/topology"
	"github.com/abacus-stream/abacus/windows"
)

const envScaleChild = "ABACUS_TEST_SCALE_CHILD"

// scaleChild is what the parent tells a processor instance it starts as a process of its own.
type scaleChild struct {
	Brokers  []string
	Name     string
	Input    string
	Storage  string
	Topology string // "scenario" (scenarioTopology), "scenario-v2" (scenarioV2Topology) or "count" (countTopology)
	// Replication of the topics the processor creates (0: the default, 1).
	Replication int
	// InstanceID, if set, makes the instance a static member of its group (as abacus run does),
	// with a session of 20 s: started again within it, it takes its partitions back with no
	// rebalance.
	InstanceID string
}

// countTopology counts events per entity in one-hour windows: the least state per entity, for
// measuring how partition moves grow with the entities moved.
func countTopology(t testing.TB, name, input string) *topology.Topology {
	t.Helper()
	b := topology.New(name)
	topology.NewSource(b, input, topology.JSON[reading](),
		func(r reading) string { return r.Dev },
		func(r reading) time.Time { return time.UnixMilli(r.TS) }).
		Aggregate("hour", windows.Tumbling(time.Hour)).Grace(0).Count("n")
	topo, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	return topo
}

// TestScaleChild is not a test of its own: it is the processor instance that the scale-out tests
// start, kill and stop, with its log as JSON on stdout. Without the environment variable it skips.
func TestScaleChild(t *testing.T) {
	spec := os.Getenv(envScaleChild)
	if spec == "" {
		t.Skip("runs only as a processor instance of a scale-out test")
	}
	var c scaleChild
	if err := json.Unmarshal([]byte(spec), &c); err != nil {
		t.Fatal(err)
	}
	topo := scenarioTopology(t, c.Name, c.Input, false)
	switch c.Topology {
	case "count":
		topo = countTopology(t, c.Name, c.Input)
	case "scenario-v2":
		topo = scenarioV2Topology(t, c.Name, c.Input)
	}
	p, err := processors.New(topo, processors.Config{Brokers: c.Brokers, StoragePath: c.Storage, Replication: c.Replication,
		// No idle advance: a partition waiting to be moved must not be judged idle (the oracle
		// knows nothing of wall-clock time); windows close through closing events.
		IdleTimeout: 10 * time.Minute, TickInterval: 500 * time.Millisecond, FinalRetention: 2 * time.Second,
		Logger: slog.New(slog.NewJSONHandler(os.Stdout, &slog.HandlerOptions{Level: slog.LevelInfo})),
		// A killed instance holds its partitions until its session expires: keep that short
		// (the broker's minimum is 6 s).
		Sarama: func(sc *sarama.Config) {
			sc.Consumer.Group.Session.Timeout = 6 * time.Second
			if c.InstanceID != "" {
				sc.Consumer.Group.Session.Timeout = 20 * time.Second
			}
			sc.Consumer.Group.Heartbeat.Interval = time.Second
		}, InstanceID: c.InstanceID})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := p.Run(ctx); err != nil {
		t.Fatal(err)
	}
}

// instance is a processor process started by a scale-out test.
type instance struct {
	name     string
	cmd      *exec.Cmd
	logPath  string
	killedAt time.Time
	exited   chan error
}

// startInstance starts a processor instance with its own storage folder.
func startInstance(t *testing.T, c scaleChild, name, dir string) *instance {
	t.Helper()
	c.Storage = filepath.Join(dir, name)
	spec, _ := json.Marshal(c)
	in := &instance{name: name, logPath: filepath.Join(dir, name+".log"), exited: make(chan error, 1)}
	logf, err := os.OpenFile(in.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	in.cmd = exec.Command(os.Args[0], "-test.run=^TestScaleChild$", "-test.v", "-test.count=1")
	in.cmd.Env = append(os.Environ(), envScaleChild+"="+string(spec))
	in.cmd.Stdout, in.cmd.Stderr = logf, logf
	if err := in.cmd.Start(); err != nil {
		t.Fatalf("start processor %s: %v", name, err)
	}
	go func() {
		in.exited <- in.cmd.Wait()
		logf.Close()
	}()
	t.Cleanup(func() {
		if in.cmd.ProcessState == nil {
			in.cmd.Process.Kill()
			<-in.exited
		}
		if t.Failed() {
			b, _ := os.ReadFile(in.logPath)
			keep := filepath.Join(os.TempDir(), fmt.Sprintf("%s-%s.log", filepath.Base(dir), name))
			os.WriteFile(keep, b, 0o644)
			t.Logf("log of processor %s kept in %s", name, keep)
		}
	})
	return in
}

// kill SIGKILLs the instance, as a crash would.
func (in *instance) kill(t *testing.T) {
	t.Helper()
	in.killedAt = time.Now()
	if err := in.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-in.exited
}

// stop stops the instance cleanly (SIGTERM) and fails the test unless it exits with success.
func (in *instance) stop(t *testing.T) {
	t.Helper()
	if err := in.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-in.exited:
		if err != nil {
			t.Fatalf("processor %s did not stop cleanly: %v (log %s)", in.name, err, in.logPath)
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("processor %s did not stop within 2 minutes of SIGTERM (log %s)", in.name, in.logPath)
	}
}

// alive fails the test if the instance exited.
func (in *instance) alive(t *testing.T) {
	t.Helper()
	select {
	case err := <-in.exited:
		in.exited <- err
		t.Fatalf("processor %s exited: %v (log %s)", in.name, err, in.logPath)
	default:
	}
}

// handoverEvent is a "partitions released" or "partition taken over" line of an instance's log.
type handoverEvent struct {
	instance string
	at       time.Time
	released []int32       // released: the partitions given up
	took     time.Duration // released: how long giving them up took
	// taken over:
	partition  int32
	restored   int
	restore    time.Duration
	firstEvent time.Duration
}

// assigned is when the partition was assigned to the instance that took it over.
func (e handoverEvent) assigned() time.Time { return e.at.Add(-e.firstEvent) }

// revoked is when the instance that released partitions began to give them up.
func (e handoverEvent) revoked() time.Time { return e.at.Add(-e.took) }

// readHandovers reads the handover lines of the instances' logs, in time order.
func readHandovers(t *testing.T, ins ...*instance) []handoverEvent {
	t.Helper()
	var out []handoverEvent
	for _, in := range ins {
		f, err := os.Open(in.logPath)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var l struct {
				Time       time.Time `json:"time"`
				Msg        string    `json:"msg"`
				Partitions []int32   `json:"partitions"`
				Took       int64     `json:"took"`
				Partition  int32     `json:"partition"`
				Restored   int       `json:"restored_records"`
				Restore    int64     `json:"restore"`
				FirstEvent int64     `json:"first_event"`
			}
			if !strings.HasPrefix(sc.Text(), "{") || json.Unmarshal(sc.Bytes(), &l) != nil {
				continue
			}
			switch l.Msg {
			case "partitions released":
				out = append(out, handoverEvent{instance: in.name, at: l.Time, released: l.Partitions, took: time.Duration(l.Took), partition: -1})
			case "partition taken over":
				out = append(out, handoverEvent{instance: in.name, at: l.Time, partition: l.Partition, restored: l.Restored,
					restore: time.Duration(l.Restore), firstEvent: time.Duration(l.FirstEvent)})
			}
		}
		f.Close()
	}
	sort.Slice(out, func(i, j int) bool { return out[i].at.Before(out[j].at) })
	return out
}

// move is one partition's move from one instance to another.
type move struct {
	partition int32
	from, to  string
	cause     string        // what the test did last before the move: "SIGKILL", "join", "clean stop", "start"; "rebalance after SIGKILL" for survivors' partitions
	total     time.Duration // revoke (or the kill) at the old owner to the first event at the new one
	restore   time.Duration // assignment to restored table, at the new owner
	first     time.Duration // assignment to first event, at the new owner
	restored  int
}

// action is something a test did to its instances, at a time.
type action struct {
	at    time.Time
	cause string
}

// moves pairs each takeover with what ended the previous owner's hold: its kill, or its release
// of the partition (a takeover with no previous owner is timed from its assignment). Each move
// is labelled with the last action before its assignment.
func moves(evs []handoverEvent, byName map[string]*instance, actions []action) []move {
	owner := map[int32]string{}
	var out []move
	for i, e := range evs {
		if e.partition < 0 {
			continue
		}
		m := move{partition: e.partition, from: owner[e.partition], to: e.instance, restore: e.restore, first: e.firstEvent,
			restored: e.restored, total: e.firstEvent}
		for _, a := range actions {
			if !a.at.After(e.assigned()) {
				m.cause = a.cause
			}
		}
		owner[e.partition] = e.instance
		if prev := byName[m.from]; prev != nil && !prev.killedAt.IsZero() && prev.killedAt.Before(e.assigned()) {
			m.total = e.at.Sub(prev.killedAt)
		} else if prev != nil {
			if m.cause == "SIGKILL" {
				// A partition of a survivor, moved by the rebalance that followed.
				m.cause = "rebalance after SIGKILL"
			}
			// The previous owner's last release of the partition before the new owner got it.
			for j := i - 1; j >= 0; j-- {
				r := evs[j]
				if r.instance == m.from && r.partition < 0 && slices.Contains(r.released, e.partition) && !r.revoked().After(e.assigned()) {
					m.total = e.at.Sub(r.revoked())
					break
				}
			}
		}
		out = append(out, m)
	}
	return out
}

// summarize logs every move and, per cause, the count, median and largest revoke-to-first-event
// time, and returns the summary.
func summarize(t *testing.T, ms []move, label string) map[string][]time.Duration {
	t.Helper()
	by := map[string][]time.Duration{}
	for _, m := range ms {
		t.Logf("%s: partition %2d %-2s -> %-2s (%s): %v from revoke to first event; at the new owner: %d changelog records restored in %v, first event %v after the assignment",
			label, m.partition, m.from, m.to, m.cause, m.total.Round(time.Millisecond), m.restored, m.restore.Round(time.Millisecond), m.first.Round(time.Millisecond))
		by[m.cause] = append(by[m.cause], m.total)
	}
	causes := make([]string, 0, len(by))
	for c := range by {
		causes = append(causes, c)
	}
	sort.Strings(causes)
	var parts []string
	for _, c := range causes {
		ds := by[c]
		slices.Sort(ds)
		parts = append(parts, fmt.Sprintf("%s: %d moves, median %v, max %v", c, len(ds), ds[len(ds)/2].Round(100*time.Millisecond), ds[len(ds)-1].Round(100*time.Millisecond)))
	}
	t.Logf("%s partition moves (revoke, or SIGKILL, at the old owner to the first event processed by the new one): %s", label, strings.Join(parts, "; "))
	return by
}

// groupCaughtUp waits until the group committed every record of topic.
func groupCaughtUp(ctx context.Context, t *testing.T, adm *kadm.Client, group, topic string, timeout time.Duration, ins ...*instance) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	behind := int64(-1)
	for {
		for _, in := range ins {
			in.alive(t)
		}
		ends, err := adm.ListEndOffsets(ctx, topic)
		committed, cerr := adm.FetchOffsets(ctx, group)
		if err == nil && cerr == nil {
			behind = 0
			ends.Each(func(o kadm.ListedOffset) {
				c, ok := committed.Lookup(topic, o.Partition)
				if !ok {
					behind += o.Offset
				} else {
					behind += max(0, o.Offset-c.At)
				}
			})
			if behind == 0 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("group %s still %d records behind on %s after %v (%v, %v)", group, behind, topic, timeout, err, cerr)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// pacedProducer produces records to one topic, spread over a time, in the background.
type pacedProducer struct {
	cl *kgo.Client
}

func newPacedProducer(t *testing.T, brokers []string, topic string) *pacedProducer {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(franz.Partitioner()),
		kgo.ProducerBatchMaxBytes(1<<20))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return &pacedProducer{cl: cl}
}

// produce sends ins spread over d and closes the returned channel once all are acknowledged.
func (pp *pacedProducer) produce(ctx context.Context, ins []input, d time.Duration) <-chan error {
	recs := make([]*kgo.Record, len(ins))
	for i, in := range ins {
		recs[i] = &kgo.Record{Key: []byte(in.key), Value: in.value}
	}
	done := make(chan error, 1)
	go func() {
		batch := max(1, len(recs)/max(1, int(d/(100*time.Millisecond))))
		pause := time.Duration(0)
		if d > 0 {
			pause = 100 * time.Millisecond
		} else {
			batch = 10_000
		}
		for len(recs) > 0 {
			k := min(batch, len(recs))
			if err := pp.cl.ProduceSync(ctx, recs[:k]...).FirstErr(); err != nil {
				done <- err
				return
			}
			recs = recs[k:]
			time.Sleep(pause)
		}
		close(done)
	}()
	return done
}

func wait(t *testing.T, what string, ch <-chan error) {
	t.Helper()
	if err := <-ch; err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// TestInstancesJoinAndDieMidStream runs the oracle scenario over a 12-partition source with
// processor instances in processes of their own: three start; mid-stream one is SIGKILLed, one
// is added, one is stopped cleanly, while records keep coming. Every final total equals the
// oracle's (identical repeats of a final are allowed only because of the SIGKILL, and counted),
// every dead letter and late record is there once, and every partition move is timed from the revoke (or the kill) at
// the old owner to the first event processed by the new one, from the instances' logs.
func TestInstancesJoinAndDieMidStream(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processor processes")
	}
	brokers := testenv.Kafka(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	const parts = 12
	name := uniqueName("scale")
	src := name + "-in"
	createTopic(ctx, t, brokers, src, parts)
	const records = 12_000
	ins := genInputs(31, records, 120, baseTime)
	ins = append(ins, closingEvents(parts, baseTime+records*200, false)...)
	o := newOracle(parts)
	for _, in := range ins {
		o.feed(in)
	}
	n := len(ins) - parts
	var chunks [][]input
	for i := range 5 {
		chunks = append(chunks, ins[i*n/5:(i+1)*n/5])
	}
	chunks[4] = append(chunks[4], ins[n:]...)

	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	pp := newPacedProducer(t, brokers, src)
	dir := t.TempDir()
	spec := scaleChild{Brokers: brokers, Name: name, Input: src, Topology: "scenario"}
	byName := map[string]*instance{}
	start := func(n string) *instance {
		in := startInstance(t, spec, n, dir)
		byName[n] = in
		return in
	}
	actions := []action{{time.Now(), "start"}}
	a, b, c := start("A"), start("B"), start("C")
	all := []*instance{a, b, c}
	taken := func(who ...*instance) map[int32]string {
		owners := map[int32]string{}
		for _, e := range readHandovers(t, who...) {
			if e.partition >= 0 {
				owners[e.partition] = e.instance
			}
		}
		return owners
	}
	waitTaken := func(what string, ok func(map[int32]string) bool) {
		t.Helper()
		deadline := time.Now().Add(3 * time.Minute)
		for !ok(taken(all...)) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 3 minutes (owners %v)", what, taken(all...))
			}
			time.Sleep(250 * time.Millisecond)
		}
	}

	// Three instances share the partitions.
	wait(t, "produce the first fifth", pp.produce(ctx, chunks[0], 5*time.Second))
	waitTaken("every partition taken by A, B or C", func(o map[int32]string) bool { return len(o) == parts })
	groupCaughtUp(ctx, t, adm, name, src, 3*time.Minute, all...)
	owners := taken(all...)
	var ofA []int32
	for p, who := range owners {
		if who == "A" {
			ofA = append(ofA, p)
		}
	}
	if len(ofA) == 0 {
		t.Fatalf("A owns no partition: %v", owners)
	}

	// A is SIGKILLed while records come.
	ch := pp.produce(ctx, chunks[1], 10*time.Second)
	time.Sleep(3 * time.Second)
	actions = append(actions, action{time.Now(), "SIGKILL"})
	a.kill(t)
	all = []*instance{b, c}
	wait(t, "produce the second fifth", ch)
	waitTaken("A's partitions taken by B or C", func(o map[int32]string) bool {
		for _, p := range ofA {
			if o[p] == "A" || o[p] == "" {
				return false
			}
		}
		return true
	})
	groupCaughtUp(ctx, t, adm, name, src, 3*time.Minute, all...)

	// D joins while records come.
	ch = pp.produce(ctx, chunks[2], 10*time.Second)
	time.Sleep(3 * time.Second)
	actions = append(actions, action{time.Now(), "join"})
	d := start("D")
	all = []*instance{b, c, d}
	wait(t, "produce the third fifth", ch)
	waitTaken("a partition taken by D", func(o map[int32]string) bool { return slices.Contains(mapValues(o), "D") })
	groupCaughtUp(ctx, t, adm, name, src, 3*time.Minute, all...)

	// B stops cleanly while records come.
	owners = taken(a, b, c, d)
	var ofB []int32
	for p, who := range owners {
		if who == "B" {
			ofB = append(ofB, p)
		}
	}
	ch = pp.produce(ctx, chunks[3], 10*time.Second)
	time.Sleep(3 * time.Second)
	actions = append(actions, action{time.Now(), "clean stop"})
	b.stop(t)
	all = []*instance{c, d}
	wait(t, "produce the fourth fifth", ch)
	waitTaken("B's partitions taken by C or D", func(o map[int32]string) bool {
		for _, p := range ofB {
			if o[p] == "B" {
				return false
			}
		}
		return true
	})

	// The rest, with the closing events; every window closes.
	wait(t, "produce the last fifth", pp.produce(ctx, chunks[4], 5*time.Second))
	describeMissing = o.missing
	defer func() { describeMissing = func(*totalsLog) string { return "" } }()
	readTotals(ctx, t, brokers, name+"-totals", o.hasAllFinals)
	c.stop(t)
	d.stop(t)

	end := endOffsets(ctx, t, brokers, name+"-totals")
	l := readTotals(ctx, t, brokers, name+"-totals", func(l *totalsLog) bool { return int64(l.count) >= end })
	o.check(t, l)
	repeats := 0
	for _, fs := range l.finals {
		repeats += len(fs) - 1
	}
	setAsideOnce(ctx, t, brokers, o, name+"-dead-letter", name+"-late")
	t.Logf("%d records over %d partitions, %d final windows equal to the oracle, %d identical repeats of a final (after the SIGKILL)",
		len(ins), parts, len(o.final), repeats)

	ms := moves(readHandovers(t, a, b, c, d), byName, actions)
	by := summarize(t, ms, "12 partitions, 3 instances")
	for _, cause := range []string{"SIGKILL", "join", "clean stop"} {
		if len(by[cause]) == 0 {
			t.Errorf("no partition moved by %s", cause)
		}
	}
}

func mapValues(m map[int32]string) []string {
	out := make([]string, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// TestPartitionMoveTimeByState measures how partition moves grow with the state moved: for each
// size (entities per partition: ABACUS_MOVE_ENTITIES, default 10000,100000), one instance builds
// the state of four partitions (one open window per entity), a second joins and restores the
// partitions it gets from the changelog, then stops cleanly and gives them back (to an instance
// that kept its local copy, so it restores only what changed meanwhile). Events keep coming to
// every partition throughout; at the end every entity's final count equals the events it got.
// The times are logged, never asserted.
func TestPartitionMoveTimeByState(t *testing.T) {
	if testing.Short() {
		t.Skip("builds up to 400k entities of state")
	}
	brokers := testenv.Kafka(t)
	sizes := []int{10_000, 100_000}
	if s := os.Getenv("ABACUS_MOVE_ENTITIES"); s != "" {
		sizes = nil
		for _, f := range strings.Split(s, ",") {
			var n int
			if _, err := fmt.Sscan(f, &n); err != nil || n < 1 {
				t.Fatalf("ABACUS_MOVE_ENTITIES=%s: %q is not a count", s, f)
			}
			sizes = append(sizes, n)
		}
	}
	var lines []string
	for _, size := range sizes {
		lines = append(lines, measureMoves(t, brokers, size))
	}
	for _, l := range lines {
		t.Log(l)
	}
}

// measureMoves runs one size of TestPartitionMoveTimeByState and returns its summary line.
func measureMoves(t *testing.T, brokers []string, perPartition int) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	const parts = 4
	name := uniqueName(fmt.Sprintf("moves%d", perPartition))
	src := name + "-in"
	createTopic(ctx, t, brokers, src, parts)
	entities := make([][]string, parts)
	for i := 0; ; i++ {
		e := fmt.Sprintf("e%07d", i)
		p := partitionOf(e, parts)
		if len(entities[p]) < perPartition {
			entities[p] = append(entities[p], e)
		}
		done := true
		for _, es := range entities {
			done = done && len(es) == perPartition
		}
		if done {
			break
		}
	}
	counts := map[string]int64{}
	event := func(e string, k int) input {
		r := reading{Dev: e, TS: baseTime + int64(k%1000), V: 1}
		v, _ := json.Marshal(r)
		counts[e]++
		return input{key: e, value: v, r: r}
	}
	var initial []input
	for _, es := range entities {
		for i, e := range es {
			initial = append(initial, event(e, i))
		}
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	pp := newPacedProducer(t, brokers, src)
	dir := t.TempDir()
	spec := scaleChild{Brokers: brokers, Name: name, Input: src, Topology: "count"}
	byName := map[string]*instance{}
	a := startInstance(t, spec, "A", dir)
	byName["A"] = a
	built := time.Now()
	wait(t, "produce the initial state", pp.produce(ctx, initial, 0))
	groupCaughtUp(ctx, t, adm, name, src, 10*time.Minute, a)
	t.Logf("%d entities per partition: A built the state of %d partitions in %v", perPartition, parts, time.Since(built).Round(time.Millisecond))

	// A trickle of events to every partition, so that each has a first event soon after a move.
	var mu sync.Mutex
	stopTrickle := make(chan struct{})
	trickled := make(chan error, 1)
	go func() {
		defer close(trickled)
		for k := 0; ; k++ {
			select {
			case <-stopTrickle:
				return
			case <-time.After(100 * time.Millisecond):
			}
			var batch []*kgo.Record
			mu.Lock()
			for _, es := range entities {
				in := event(es[k%len(es)], k)
				batch = append(batch, &kgo.Record{Key: []byte(in.key), Value: in.value})
			}
			mu.Unlock()
			if err := pp.cl.ProduceSync(ctx, batch...).FirstErr(); err != nil {
				trickled <- err
				return
			}
		}
	}()

	joined := time.Now()
	b := startInstance(t, spec, "B", dir)
	byName["B"] = b
	waitFor := func(what string, ok func([]handoverEvent) bool) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Minute)
		for !ok(readHandovers(t, a, b)) {
			a.alive(t)
			if time.Now().After(deadline) {
				t.Fatalf("%d entities per partition: %s: not within 5 minutes", perPartition, what)
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
	takenBy := func(evs []handoverEvent, who string, after time.Time) []int32 {
		var ps []int32
		for _, e := range evs {
			if e.partition >= 0 && e.instance == who && e.at.After(after) {
				ps = append(ps, e.partition)
			}
		}
		return ps
	}
	waitFor("B took over two partitions", func(evs []handoverEvent) bool { return len(takenBy(evs, "B", joined)) >= parts/2 })
	ofB := takenBy(readHandovers(t, b), "B", joined)
	time.Sleep(2 * time.Second)
	stopped := time.Now()
	b.stop(t)
	waitFor("A took B's partitions back", func(evs []handoverEvent) bool { return len(takenBy(evs, "A", stopped)) >= len(ofB) })
	close(stopTrickle)
	if err := <-trickled; err != nil {
		t.Fatal(err)
	}

	// Close every window and check every entity's count.
	wait(t, "produce the closing events", pp.produce(ctx, closingEvents(parts, baseTime+2*3_600_000, false), 0))
	want := 0
	for _, es := range entities {
		want += len(es)
	}
	l := readTotals(ctx, t, brokers, name+"-totals", func(l *totalsLog) bool { return len(l.finals) >= want })
	a.stop(t)
	bad := 0
	for k, fs := range l.finals {
		n, _ := fs[0].Value("n")
		if n.Int != counts[k.entity] && bad < 10 {
			t.Errorf("%s: final count %d, want %d", k.entity, n.Int, counts[k.entity])
			bad++
		}
	}

	ms := moves(readHandovers(t, a, b), byName, []action{{built, "start"}, {joined, "join"}, {stopped, "clean stop"}})
	var join, back []move
	for _, m := range ms {
		switch {
		case m.to == "B":
			join = append(join, m)
		case m.from == "B":
			back = append(back, m)
		}
	}
	summarize(t, append(join, back...), fmt.Sprintf("%d entities per partition", perPartition))
	line := func(ms []move) string {
		if len(ms) == 0 {
			return "none"
		}
		var restore, total time.Duration
		restored := 0
		for _, m := range ms {
			restore, total = max(restore, m.restore), max(total, m.total)
			restored = max(restored, m.restored)
		}
		return fmt.Sprintf("%d partitions, up to %d changelog records restored in %v, revoke to first event %v",
			len(ms), restored, restore.Round(10*time.Millisecond), total.Round(10*time.Millisecond))
	}
	return fmt.Sprintf("partition moves with %d entities per partition: to a joining instance (restore from the changelog): %s; back after a clean stop (local copy kept): %s",
		perPartition, line(join), line(back))
}
