package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/IBM/sarama"
	"github.com/lovoo/goka"
	"github.com/lovoo/goka/codec"
	"github.com/lovoo/goka/storage"
	"github.com/twmb/franz-go/pkg/kgo"
)

// childArgs say what one system process runs (procbench child ...).
type childArgs struct {
	system     string
	brokers    []string
	input      string
	group      string
	output     string
	late       string // abacus: the late topic ("": late events are counted and dropped)
	rollup     bool   // abacus: add the per-region and global sets (a rollup workload)
	registry   string // abacus: look the region up in this table topic (a join workload)
	storage    string
	cpuprofile string
	// finalRetention is abacus's Config.FinalRetention (0: its default).
	finalRetention time.Duration
}

// childMain runs one Go system in this process, as the harness's step asked: it prints its
// progress on stdout, and stops cleanly when stdin reaches EOF (the harness closes it) or on
// SIGINT/SIGTERM. Exit status: 0 after a requested stop, 1 on an error, 2 when the system
// returned on its own before it was asked to stop.
func childMain(args []string) int {
	fl := flag.NewFlagSet("child", flag.ExitOnError)
	var a childArgs
	var brokers string
	fl.StringVar(&a.system, "system", "", "abacus | goka-naive | franz-consume")
	fl.StringVar(&brokers, "brokers", "", "Kafka seed brokers, comma separated")
	fl.StringVar(&a.input, "input", "", "input topic")
	fl.StringVar(&a.group, "group", "", "consumer group (and abacus topology name)")
	fl.StringVar(&a.output, "output", "", "output topic (abacus totals)")
	fl.StringVar(&a.late, "late", "", "late topic (abacus)")
	fl.BoolVar(&a.rollup, "rollup", false, "abacus: add the per-region and global rollup sets")
	fl.StringVar(&a.registry, "registry", "", "abacus: the table topic the region is looked up in (join workloads)")
	fl.StringVar(&a.storage, "storage", "", "local storage folder (goka tables)")
	fl.StringVar(&a.cpuprofile, "cpuprofile", "", "write a CPU profile of this process here")
	fl.DurationVar(&a.finalRetention, "final-retention", 0, "abacus: Config.FinalRetention (0: default)")
	fl.Parse(args)
	a.brokers = strings.Split(brokers, ",")

	if a.cpuprofile != "" {
		f, err := os.Create(a.cpuprofile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "cpuprofile:", err)
			return 1
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, "cpuprofile:", err)
			return 1
		}
		defer func() {
			pprof.StopCPUProfile()
			f.Close()
		}()
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	go reportStorage(ctx, a.storage)

	var last atomic.Int64
	progress := func(n int64) {
		if n != last.Swap(n) {
			fmt.Printf("progress %d\n", n)
		}
	}
	var err error
	switch a.system {
	case "abacus":
		err = runAbacus(ctx, a, progress)
	case "goka-naive":
		err = runNaive(ctx, a, progress)
	case "franz-consume":
		err = runConsume(ctx, a, progress)
	default:
		err = fmt.Errorf("unknown system %q", a.system)
	}
	if ctx.Err() == nil {
		// The system returned although nobody asked it to stop: the step must say so.
		if err == nil {
			err = errors.New("returned before it was asked to stop")
		}
		fmt.Fprintf(os.Stderr, "%s: %v\n", a.system, err)
		return 2
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintf(os.Stderr, "%s: %v\n", a.system, err)
		return 1
	}
	return 0
}

// reportStorage prints "storage <bytes>" whenever the local storage grows: during a restore,
// nothing else shows that the process is alive and working.
func reportStorage(ctx context.Context, dir string) {
	if dir == "" {
		return
	}
	t := time.NewTicker(time.Second)
	defer t.Stop()
	var last int64
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if n := dirSize(dir); n != last {
			last = n
			fmt.Printf("storage %d\n", n)
		}
	}
}

func dirSize(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

// runNaive is the goka processor a team would write first: decode, fold count/sum/max into one
// value per entity, SetValue; no windows, no fences, no emission.
func runNaive(ctx context.Context, a childArgs, progress func(int64)) error {
	var seen atomic.Int64
	graph := goka.DefineGroup(goka.Group(a.group),
		goka.Input(goka.Stream(a.input), new(codec.Bytes), func(ctx goka.Context, msg any) {
			var r reading
			if err := json.Unmarshal(msg.([]byte), &r); err != nil {
				ctx.Fail(err)
			}
			var st [24]byte
			if v := ctx.Value(); v != nil {
				copy(st[:], v.([]byte))
			}
			binary.BigEndian.PutUint64(st[0:], binary.BigEndian.Uint64(st[0:])+1)
			binary.BigEndian.PutUint64(st[8:], math.Float64bits(math.Float64frombits(binary.BigEndian.Uint64(st[8:]))+r.V))
			binary.BigEndian.PutUint64(st[16:], math.Float64bits(max(math.Float64frombits(binary.BigEndian.Uint64(st[16:])), r.V)))
			ctx.SetValue(st[:])
			seen.Add(1)
		}),
		goka.Persist(new(codec.Bytes)))
	// The same sarama settings as abacus: protocol version, oldest offset for a new group.
	sc := goka.DefaultConfig()
	sc.Version = sarama.V2_8_0_0
	sc.Consumer.Offsets.Initial = sarama.OffsetOldest
	sc.Producer.RequiredAcks = sarama.WaitForAll
	tmc := goka.NewTopicManagerConfig()
	tmc.Table.Replication, tmc.Stream.Replication = 1, 1
	if err := ensureTable(ctx, a, sc, tmc); err != nil {
		return err
	}
	proc, err := goka.NewProcessor(a.brokers, graph,
		goka.WithTopicManagerBuilder(goka.TopicManagerBuilderWithConfig(sc, tmc)),
		goka.WithConsumerGroupBuilder(goka.ConsumerGroupBuilderWithConfig(sc)),
		goka.WithConsumerSaramaBuilder(goka.SaramaConsumerBuilderWithConfig(sc)),
		goka.WithProducerBuilder(goka.ProducerBuilderWithConfig(sc)),
		goka.WithStorageBuilder(storage.DefaultBuilder(a.storage)),
		goka.WithLogger(gokaQuiet{}))
	if err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- proc.Run(ctx) }()
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case err := <-done:
			return err
		case <-t.C:
			progress(seen.Load())
		}
	}
}

// ensureTable creates the naive group's table and waits until every partition answers an offset
// request. goka creates it itself, but only waits for the topic to show in metadata: the partition
// setup that follows at once then sometimes meets a broker that is not the partitions' leader yet
// and fails the processor (seen on a fresh single-node KRaft broker).
func ensureTable(ctx context.Context, a childArgs, sc *sarama.Config, tmc *goka.TopicManagerConfig) error {
	tm, err := goka.NewTopicManager(a.brokers, sc, tmc)
	if err != nil {
		return err
	}
	defer tm.Close()
	parts, err := tm.Partitions(a.input)
	if err != nil {
		return fmt.Errorf("partitions of %s: %w", a.input, err)
	}
	table := string(goka.GroupTable(goka.Group(a.group)))
	if err := tm.EnsureTableExists(table, len(parts)); err != nil {
		return err
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, p := range parts {
		for {
			_, err := tm.GetOffset(table, p, sarama.OffsetOldest)
			if err == nil {
				break
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				return fmt.Errorf("table %s partition %d not ready: %w", table, p, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return nil
}

// runConsume only consumes: the floor under any processor on this broker. It commits like goka
// does (sarama's default: every second).
func runConsume(ctx context.Context, a childArgs, progress func(int64)) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(a.brokers...), kgo.ConsumerGroup(a.group), kgo.ConsumeTopics(a.input),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.AutoCommitInterval(time.Second))
	if err != nil {
		return err
	}
	defer cl.Close()
	var n atomic.Int64
	go func() {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				progress(n.Load())
			}
		}
	}()
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			return errors.Join(ctx.Err(), cl.CommitUncommittedOffsets(cctx))
		}
		var ferr error
		fs.EachError(func(t string, p int32, err error) { ferr = errors.Join(ferr, fmt.Errorf("fetch %s/%d: %w", t, p, err)) })
		if ferr != nil {
			return ferr
		}
		n.Add(int64(fs.NumRecords()))
	}
}

// gokaQuiet drops goka's logs: it reports every rebalance step.
type gokaQuiet struct{}

func (gokaQuiet) Print(...any)          {}
func (gokaQuiet) Println(...any)        {}
func (gokaQuiet) Printf(string, ...any) {}
