package backfillbench

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/abacus-stream/abacus/backfill"
	"github.com/abacus-stream/abacus/examples/devices"
	"github.com/abacus-stream/abacus/hbase"
	"github.com/abacus-stream/abacus/partitioner"
	"github.com/abacus-stream/abacus/schema"
	"github.com/abacus-stream/abacus/sinks"
	"github.com/abacus-stream/abacus/state"
	"github.com/abacus-stream/abacus/store"
	"github.com/abacus-stream/abacus/store/hbasestore"
	"github.com/abacus-stream/abacus/tables"
)

const (
	family     = "d"
	buckets    = 16
	partitions = 4
)

// env reads an integer setting with its default.
func env(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// fleet is the benchmark's fleet: ABACUS_BENCH_DEVICES devices (default 1,000), each sending a
// reading every ABACUS_BENCH_EVERY_S seconds (default 60) over ABACUS_BENCH_HOURS hours (default
// 24): 1.44 million facts by default.
type fleet struct {
	devices int
	every   time.Duration
	span    time.Duration
	start   time.Time
}

func (f fleet) facts() int { return f.devices * int(f.span/f.every) }

func (f fleet) table() string {
	return fmt.Sprintf("bench_backfill_%d_%d_%d_facts", f.devices, int(f.every.Seconds()), int(f.span.Hours()))
}

func connect(b *testing.B) *hbase.Client {
	q := os.Getenv("ABACUS_HBASE_ZK")
	if q == "" {
		q = "127.0.0.1:2181"
	}
	if c, err := net.DialTimeout("tcp", strings.Split(q, ",")[0], 2*time.Second); err != nil {
		msg := fmt.Sprintf("HBase not reachable at %s: %v; start testenv/services.sh", q, err)
		if os.Getenv("ABACUS_REQUIRE_SERVICES") == "1" {
			b.Fatal(msg)
		}
		b.Skip(msg)
	} else {
		c.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := hbase.NewClient(ctx, hbase.Config{ZooKeeper: q})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return c
}

// load writes the fleet's facts unless an earlier run did (a marker table says it finished).
func load(b *testing.B, st *hbasestore.Store, f fleet) {
	ctx := context.Background()
	table := f.table()
	done := false
	_ = st.Scan(ctx, store.ScanSpec{Table: table + "_done", Limit: 1}, func([]byte, []store.Cell) bool { done = true; return false })
	if done {
		b.Logf("facts table %s already loaded", table)
		return
	}
	for _, t := range []string{table, table + "_done"} {
		if err := st.EnsureTable(ctx, schema.TableLayout{Name: t, Family: family, SaltBuckets: buckets}); err != nil {
			b.Fatal(err)
		}
	}
	topo, err := devices.Topology()
	if err != nil {
		b.Fatal(err)
	}
	t0 := time.Now()
	type rec struct {
		part   int32
		offset int64
		dev    string
		value  []byte
		ts     time.Time
	}
	// Readings in time order, each device at its own phase, offsets per partition as a
	// producer would get them.
	recs := make(chan []rec, 8)
	go func() {
		defer close(recs)
		rng := rand.New(rand.NewPCG(1, 2))
		next := make([]int64, partitions)
		var batch []rec
		steps := int(f.span / f.every)
		for i := range steps {
			for d := range f.devices {
				dev := fmt.Sprintf("device-%05d", d)
				ts := f.start.Add(time.Duration(i)*f.every + time.Duration(d)*f.every/time.Duration(f.devices))
				kind := "reading"
				if rng.IntN(100) < 5 {
					kind = "alarm"
				}
				v, _ := json.Marshal(devices.Reading{Device: dev, Sensor: fmt.Sprintf("s%d", rng.IntN(3)), Time: ts.UnixMilli(),
					Temp: float64(rng.IntN(4000)) / 100, Humidity: float64(rng.IntN(1000)) / 10, Kind: kind})
				p := partitioner.Partition([]byte(dev), partitions)
				batch = append(batch, rec{p, next[p], dev, v, ts})
				next[p]++
				if len(batch) == 5000 {
					recs <- batch
					batch = nil
				}
			}
		}
		recs <- batch
	}()
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			enc := &sinks.FactsEncoder{Table: table, Family: family, SaltBuckets: buckets, Extract: sinks.FactsOf(topo), LeaveRejectsToProcessor: true}
			for batch := range recs {
				var cells []store.Cell
				for _, r := range batch {
					var err error
					cells, err = enc.Encode(&kgo.Record{Topic: devices.Topic, Partition: r.part, Offset: r.offset, Key: []byte(r.dev), Value: r.value, Timestamp: r.ts}, cells)
					if err != nil {
						errs <- err
						return
					}
				}
				if failed, err := st.Write(ctx, cells); err != nil || len(failed) > 0 {
					errs <- fmt.Errorf("write: %v, %d cells failed", err, len(failed))
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
	if failed, err := st.Write(ctx, []store.Cell{{Table: table + "_done", Row: []byte("done"), Family: []byte(family), Qualifier: []byte("n"),
		Timestamp: 1, Value: []byte(strconv.Itoa(f.facts()))}}); err != nil || len(failed) > 0 {
		b.Fatalf("mark loaded: %v %v", err, failed)
	}
	b.Logf("loaded %d facts into %s in %s", f.facts(), table, time.Since(t0).Round(time.Second))
}

// BenchmarkBackfill loads the fleet once, then, in one run, scans its facts table raw and
// backfills the example's sets from it, reporting both rates and their ratio.
func BenchmarkBackfill(b *testing.B) {
	hc := connect(b)
	st, err := hbasestore.New(hc, hbasestore.Config{})
	if err != nil {
		b.Fatal(err)
	}
	f := fleet{devices: env("ABACUS_BENCH_DEVICES", 1000), every: time.Duration(env("ABACUS_BENCH_EVERY_S", 60)) * time.Second,
		span: time.Duration(env("ABACUS_BENCH_HOURS", 24)) * time.Hour}
	f.start = time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	load(b, st, f)
	ctx := context.Background()

	b.Run("scan", func(b *testing.B) {
		for range b.N {
			t0 := time.Now()
			n := 0
			err := st.Scan(ctx, store.ScanSpec{Table: f.table(), Family: family}, func(_ []byte, cells []store.Cell) bool {
				n += len(cells)
				return true
			})
			if err != nil {
				b.Fatal(err)
			}
			if n != f.facts() {
				b.Fatalf("scanned %d facts, loaded %d", n, f.facts())
			}
			b.ReportMetric(float64(n)/time.Since(t0).Seconds(), "facts/s")
		}
	})

	for _, c := range []struct {
		name string
		sets []string
	}{
		{"backfill", []string{"minute", "hour", "alarms-10m", "region-minute", "fleet-minute"}},
		// Entity sets alone run their partitions side by side.
		{"backfill-entity-sets", []string{"minute", "hour", "alarms-10m"}},
	} {
		b.Run(c.name, func(b *testing.B) { backfillRun(b, st, f, c.sets) })
	}
	// What HBase takes of such cells alone: a million of those backfill wrote, read back and
	// written again as backfill writes them (batches of 2,000, four at once), no engine.
	b.Run("rewrite", func(b *testing.B) {
		out := f.table() + "_agg"
		var cells []store.Cell
		err := st.Scan(ctx, store.ScanSpec{Table: out, Family: family}, func(row []byte, cs []store.Cell) bool {
			for _, c := range cs {
				c.Row, c.Table, c.Family = row, out, []byte(family)
				cells = append(cells, c)
			}
			return len(cells) < 1_000_000
		})
		if err != nil {
			b.Fatal(err)
		}
		if len(cells) == 0 {
			b.Fatal("no cell to write: run the backfill sub-benchmarks first")
		}
		for range b.N {
			t0 := time.Now()
			batches := make(chan []store.Cell)
			var wg sync.WaitGroup
			for range 4 {
				wg.Go(func() {
					for batch := range batches {
						if failed, err := st.Write(ctx, batch); err != nil || len(failed) > 0 {
							b.Errorf("write: %v %v", err, failed)
						}
					}
				})
			}
			for i := 0; i < len(cells); i += 2000 {
				batches <- cells[i:min(i+2000, len(cells))]
			}
			close(batches)
			wg.Wait()
			b.ReportMetric(float64(len(cells))/time.Since(t0).Seconds(), "cells/s")
		}
	})
}

// backfillRun backfills sets of the example from the fleet's facts table, every window
// backfill's (as if the sets went live at the end of the history).
func backfillRun(b *testing.B, st *hbasestore.Store, f fleet, sets []string) {
	ctx := context.Background()
	{
		topo, err := devices.Topology()
		if err != nil {
			b.Fatal(err)
		}
		// The device registry as the demo's generator first fills it: every device in its RegionOf.
		reg := tables.NewMemory(topo)
		for d := range f.devices {
			dev := fmt.Sprintf("device-%05d", d)
			if err := reg.Put("devices", dev, time.UnixMilli(0), devices.Device{Region: devices.RegionOf(dev)}); err != nil {
				b.Fatal(err)
			}
		}
		// Every set went live at the end of the history: all of it is backfill's.
		end := f.start.Add(f.span).UnixMilli()
		var live []*state.Partition
		for range partitions {
			rec := &state.Partition{StreamTime: end + time.Hour.Milliseconds()}
			for _, s := range sets {
				info, _ := topo.Set(s)
				rec.Graces = append(rec.Graces, state.SetGrace{Set: s, Grace: info.Grace.Milliseconds(), LiveFrom: end})
			}
			live = append(live, rec)
		}
		out := f.table() + "_agg"
		if err := st.EnsureTable(ctx, schema.TableLayout{Name: out, Family: family, SaltBuckets: buckets}); err != nil {
			b.Fatal(err)
		}
		for range b.N {
			var peak uint64
			stop := make(chan struct{})
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				var ms runtime.MemStats
				for {
					runtime.ReadMemStats(&ms)
					peak = max(peak, ms.HeapInuse)
					select {
					case <-stop:
						return
					case <-time.After(200 * time.Millisecond):
					}
				}
			}()
			t0 := time.Now()
			var read time.Duration
			sum, err := backfill.Run(ctx, backfill.Options{Topology: topo, Tables: reg, Sets: sets, Live: live, Partitions: partitions,
				Facts: st, FactsTable: f.table(), Family: family, Out: st,
				Encoder: &sinks.AggregatesEncoder{Table: out, Family: family, SaltBuckets: buckets},
				Progress: func(p backfill.Progress) {
					if p.Stage == "read" {
						read = time.Since(t0) // the last one ends the read
					}
				}})
			took := time.Since(t0)
			close(stop)
			wg.Wait()
			if err != nil {
				b.Fatal(err)
			}
			if sum.Facts != int64(f.facts()) || sum.Windows == 0 {
				b.Fatalf("backfill read %d facts (loaded %d), wrote %d windows", sum.Facts, f.facts(), sum.Windows)
			}
			b.ReportMetric(float64(sum.Facts)/took.Seconds(), "facts/s")
			b.ReportMetric(float64(sum.Windows)/took.Seconds(), "windows/s")
			b.ReportMetric(float64(sum.Cells)/took.Seconds(), "cells/s")
			b.ReportMetric(read.Seconds(), "read-s")
			b.ReportMetric(took.Seconds(), "total-s")
			b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
		}
	}
}
