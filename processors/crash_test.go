package processors_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/abacus-stream/abacus/internal/testenv"
	"github.com/abacus-stream/abacus/processors"
	"github.com/abacus-stream/abacus/totals"
)

const envCrashChild = "ABACUS_TEST_CRASH_CHILD"

// crashChild is what the parent tells a child processor process.
type crashChild struct {
	Brokers []string
	Name    string
	Input   string
	Storage string
}

func crashConfig(c crashChild) processors.Config {
	return processors.Config{Brokers: c.Brokers, StoragePath: c.Storage, IdleTimeout: 5 * time.Second,
		TickInterval: 250 * time.Millisecond,
		// Short, so that windows are pruned while the test kills processes; still far above the
		// time Kafka takes to acknowledge a total.
		FinalRetention: 2 * time.Second,
		// A killed member holds its partitions until its session expires: keep that short.
		Sarama: func(sc *sarama.Config) {
			sc.Consumer.Group.Session.Timeout = 6 * time.Second
			sc.Consumer.Group.Heartbeat.Interval = time.Second
		}}
}

// TestCrashChild is not a test of its own: it is the processor process that TestCrash* start and
// kill. Without the environment variable it skips.
func TestCrashChild(t *testing.T) {
	spec := os.Getenv(envCrashChild)
	if spec == "" {
		t.Skip("runs only as the child process of a crash test")
	}
	var c crashChild
	if err := json.Unmarshal([]byte(spec), &c); err != nil {
		t.Fatal(err)
	}
	topo := scenarioTopology(t, c.Name, c.Input, false)
	cfg := crashConfig(c)
	cfg.Logger = testLogger(t)
	p, err := processors.New(topo, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := p.Run(ctx); err != nil {
		t.Fatal(err)
	}
}

// startChild starts a processor process writing its log to logPath.
func startChild(t *testing.T, c crashChild, logPath string) *exec.Cmd {
	t.Helper()
	spec, _ := json.Marshal(c)
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.v")
	cmd.Env = append(os.Environ(), envCrashChild+"="+string(spec))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatalf("start processor process: %v", err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
		logf.Close()
	})
	return cmd
}

// runCrash kills the processor process with SIGKILL several times mid-stream (once also deleting
// its local storage, so that state comes back from the changelog alone), and checks that the
// totals equal the oracle's, which a crash-free run matches (TestScenario*), exactly.
func runCrash(t *testing.T, brokers []string) {
	// About a minute alone; the main stage runs it beside three other stages on two cores, where
	// it took up to three. The bound only keeps a hung run from holding the stage: the test checks
	// what the totals are, not how fast they come.
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	name := uniqueName("crash")
	input := name + "-in"
	createTopic(ctx, t, brokers, input, scenarioPartitions)
	ins := genInputs(3, 20000, 200, baseTime)
	produce(ctx, t, brokers, input, ins)
	o := newOracle(scenarioPartitions)
	for _, in := range ins {
		o.feed(in)
	}
	o.idle()

	dir := t.TempDir()
	c := crashChild{Brokers: brokers, Name: name, Input: input, Storage: filepath.Join(dir, "storage")}
	logPath := filepath.Join(dir, "processor.log")
	topic := name + "-totals"

	// Kill points, in totals records seen: the hop set emits on every update, about two records
	// per applied event.
	approx := 2 * o.applied
	killAt := []int{approx / 6, approx / 3, approx / 2, 2 * approx / 3}
	if os.Getenv("ABACUS_TEST_NO_KILL") != "" {
		killAt = nil
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	seen := 0
	for i, at := range killAt {
		cmd := startChild(t, c, logPath)
		for seen < at {
			fs := cl.PollFetches(ctx)
			if ctx.Err() != nil {
				t.Fatalf("run %d: waiting for %d totals records (saw %d): %v; log in %s", i, at, seen, ctx.Err(), logPath)
			}
			fs.EachRecord(func(r *kgo.Record) {
				if _, err := totals.Decode(r.Value); err != nil {
					t.Fatalf("totals record: %v", err)
				}
				seen++
			})
		}
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		cmd.Wait()
		t.Logf("run %d: SIGKILL after %d totals records", i, seen)
		if i == 1 {
			// Lose the machine: state must come back from the changelog topic.
			if err := os.RemoveAll(c.Storage); err != nil {
				t.Fatal(err)
			}
		}
	}
	cmd := startChild(t, c, logPath)
	describeMissing = o.missing
	defer func() { describeMissing = func(*totalsLog) string { return "" } }()
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			os.WriteFile(filepath.Join(os.TempDir(), name+".log"), b, 0o644)
			t.Logf("processor log kept in %s", filepath.Join(os.TempDir(), name+".log"))
		}
	})
	readTotals(ctx, t, brokers, topic, o.hasAllFinals)
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Errorf("last processor run: %v; log in %s", err, logPath)
	}
	end := endOffsets(ctx, t, brokers, topic)
	l := readTotals(ctx, t, brokers, topic, func(l *totalsLog) bool { return int64(l.count) >= end })
	o.check(t, l)
	setAsideOnce(ctx, t, brokers, o, name+"-dead-letter", name+"-late")
	t.Logf("%d records, %d applied, %d final windows, %d totals records after %d kills",
		len(ins), o.applied, len(o.final), l.count, len(killAt))
}

// setAsideOnce checks that the dead-letter and late topics hold each record the oracle expects
// exactly once: the processor runs killed mid-stream wrote theirs for records processed again,
// which the next run must find and not write again (processors/aside.go).
func setAsideOnce(ctx context.Context, t *testing.T, brokers []string, o *oracle, deadTopic, lateTopic string) {
	t.Helper()
	dead := distinctRecords(ctx, t, brokers, deadTopic)
	if want := o.future + o.bad; dead.total != want || dead.distinct != want {
		t.Errorf("dead-letter topic holds %d records (%d distinct), want %d once each", dead.total, dead.distinct, want)
	}
	lateWant := 0
	for _, n := range o.late {
		lateWant += n
	}
	late := distinctRecords(ctx, t, brokers, lateTopic)
	if late.total != lateWant || late.distinct != lateWant {
		n, some := late.missing(o.lateRecords)
		t.Errorf("late topic holds %d records (%d distinct), want %d once each; %d missing: %v", late.total, late.distinct, lateWant, n, some)
	}
	t.Logf("%d dead letters and %d late records, each once", dead.total, late.total)
}

// TestCrashKfake runs the crash test with kfake in the test process as the broker.
func TestCrashKfake(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processor processes")
	}
	runCrash(t, kfakeBrokers(t))
}

// TestCrashRealKafka runs the crash test against the real broker.
func TestCrashRealKafka(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processor processes")
	}
	runCrash(t, testenv.Kafka(t))
}
