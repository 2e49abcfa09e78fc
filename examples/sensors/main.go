// Command sensors is a runnable abacus topology: per-device hourly max and mean temperature and
// per-device daily event count over a stream of JSON readings, emitted as final window totals.
//
// With no -brokers it runs everything in process (kfake as the broker), produces a few synthetic
// readings, and prints the final totals as they arrive; it is a demonstration and must never be
// used as a load generator against a shared cluster.
//
//	go run ./examples/sensors                       # in process
//	go run ./examples/sensors -brokers 127.0.0.1:9092
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/abacus-stream/abacus/partitioner/franz"
	"github.com/abacus-stream/abacus/processors"
	"github.com/abacus-stream/abacus/topology"
	"github.com/abacus-stream/abacus/totals"
	"github.com/abacus-stream/abacus/windows"
)

// Reading is one sensor event.
type Reading struct {
	Device string  `json:"device"`
	TS     int64   `json:"ts"` // ms since the Unix epoch
	Temp   float64 `json:"temp"`
}

// sensors declares the topology.
func sensors(name, input string) (*topology.Topology, error) {
	b := topology.New(name)
	src := topology.NewSource(b, input, topology.JSON[Reading](),
		func(r Reading) string { return r.Device },
		func(r Reading) time.Time { return time.UnixMilli(r.TS) })
	src.Aggregate("device-hourly", windows.Tumbling(time.Hour)).Grace(5*time.Minute).
		Max("max_temp", "temp").Mean("mean_temp", "temp").Quantiles("temp_p", "temp", 0.5, 0.99)
	src.Aggregate("device-daily", windows.Tumbling(24*time.Hour)).Grace(time.Hour).
		Count("events")
	return b.Build()
}

func main() {
	brokersFlag := flag.String("brokers", "", "Kafka seed brokers, comma separated (empty: run kfake in process)")
	devices := flag.Int("devices", 5, "synthetic devices")
	hours := flag.Int("hours", 30, "hours of synthetic readings, one per device per minute")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, log, *brokersFlag, *devices, *hours); err != nil {
		log.Error("sensors example failed", "err", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, log *slog.Logger, brokersFlag string, devices, hours int) error {
	var brokers []string
	if brokersFlag == "" {
		c, err := kfake.NewCluster(kfake.NumBrokers(1))
		if err != nil {
			return fmt.Errorf("start kfake: %w", err)
		}
		defer c.Close()
		brokers = c.ListenAddrs()
	} else {
		brokers = strings.Split(brokersFlag, ",")
	}
	// Each run gets its own topology (group, table) and input topic, so runs against a shared
	// broker never see each other's state.
	name := fmt.Sprintf("sensors-example-%d", time.Now().UnixNano())
	input := name + "-readings"
	topo, err := sensors(name, input)
	if err != nil {
		return err
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(input),
		// goka partitions by FNV-1a the way sarama does: producers must agree.
		kgo.RecordPartitioner(franz.Partitioner()))
	if err != nil {
		return fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 4, 1, nil, input); err != nil {
		return fmt.Errorf("create %s: %w", input, err)
	}
	start := time.Now().Add(-time.Duration(hours+2) * time.Hour).Truncate(time.Hour).UnixMilli()
	var recs []*kgo.Record
	for m := range hours * 60 {
		for d := range devices {
			r := Reading{Device: fmt.Sprintf("device-%d", d), TS: start + int64(m)*60_000, Temp: 20 + float64((m+7*d)%15)}
			v, _ := json.Marshal(r)
			recs = append(recs, &kgo.Record{Key: []byte(r.Device), Value: v})
		}
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return fmt.Errorf("produce readings: %w", err)
	}
	log.Info("produced readings", "topic", input, "records", len(recs))

	p, err := processors.New(topo, processors.Config{Brokers: brokers, Logger: log,
		StoragePath: filepath.Join(os.TempDir(), name), IdleTimeout: 5 * time.Second})
	if err != nil {
		return err
	}
	pctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- p.Run(pctx) }()

	// Every window closes: hourly ones as stream time passes, the rest when the stream goes idle.
	want := devices * (hours + 1) // hourly windows (readings may straddle one more hour)
	cons, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topo.TotalsTopic()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		cancel()
		return fmt.Errorf("totals consumer: %w", err)
	}
	defer cons.Close()
	idle := time.NewTimer(15 * time.Second) // no total for this long: we have them all
	defer idle.Stop()
	finals := 0
	for finals < want+devices*2 {
		fs := cons.PollRecords(pctx, 1000)
		if pctx.Err() != nil {
			break
		}
		fs.EachRecord(func(rec *kgo.Record) {
			r, err := totals.Decode(rec.Value)
			if err != nil || !r.Final {
				return
			}
			finals++
			idle.Reset(15 * time.Second)
			var vals []string
			for _, v := range r.Values {
				switch v.Kind {
				case totals.KindInt:
					vals = append(vals, fmt.Sprintf("%s=%d", v.Name, v.Int))
				case totals.KindFloat:
					vals = append(vals, fmt.Sprintf("%s=%.2f", v.Name, v.Float))
				case totals.KindQuantiles:
					for _, q := range v.Quantiles {
						vals = append(vals, fmt.Sprintf("%s(%.2f)=%.2f", v.Name, q.Q, q.Value))
					}
				}
			}
			fmt.Printf("%-13s %-9s %s  %s\n", r.Set, r.Entity, time.UnixMilli(r.Start).UTC().Format("2006-01-02T15:04"), strings.Join(vals, " "))
		})
		select {
		case <-idle.C:
			cancel()
		default:
		}
	}
	cancel()
	if err := <-done; err != nil {
		return err
	}
	log.Info("done", "final totals", finals)
	return nil
}
