package backfill_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/abacus-stream/abacus/backfill"
	"github.com/abacus-stream/abacus/examples/devices"
	"github.com/abacus-stream/abacus/partitioner"
	"github.com/abacus-stream/abacus/sinks"
	"github.com/abacus-stream/abacus/state"
	"github.com/abacus-stream/abacus/store"
	"github.com/abacus-stream/abacus/store/cellstore"
	"github.com/abacus-stream/abacus/tables"
	"github.com/abacus-stream/abacus/topology"
)

// BenchmarkRun is backfill without servers: the example's entity sets, then with its two rollups, over 200 devices' readings
// (one every 30 s for 6 hours, 144,000 facts) from the embedded cell store, the cells counted and
// dropped. It shows what the engine and the ordering cost apart from HBase (bench/backfill measures them on HBase, beside
// its raw scan); b.N runs of all the facts, reported as facts/s.
func BenchmarkRun(b *testing.B) {
	st, err := cellstore.Open(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	for _, tb := range []string{factsTable, "agg"} {
		if err := st.CreateTable(tb, map[string]int{family: 1}); err != nil {
			b.Fatal(err)
		}
	}
	topo, err := devices.Topology()
	if err != nil {
		b.Fatal(err)
	}
	const devs, every, span = 200, 30 * time.Second, 6 * time.Hour
	start := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	facts := &sinks.FactsEncoder{Table: factsTable, Family: family, SaltBuckets: buckets, Extract: sinks.FactsOf(topo), LeaveRejectsToProcessor: true}
	rng := rand.New(rand.NewPCG(3, 4))
	next := map[int32]int64{}
	var cs []store.Cell
	n := 0
	for at := time.Duration(0); at < span; at += every {
		cs = cs[:0]
		for d := range devs {
			r := devices.Reading{Device: fmt.Sprintf("device-%04d", d), Sensor: fmt.Sprintf("s%d", rng.IntN(3)),
				Time: start.Add(at).UnixMilli() + rng.Int64N(3000), Temp: float64(rng.IntN(4000)) / 100, Humidity: float64(rng.IntN(1000)) / 10, Kind: "reading"}
			if rng.IntN(100) < 5 {
				r.Kind = "alarm"
			}
			v, _ := json.Marshal(r)
			p := partitioner.Partition([]byte(r.Device), 4)
			if cs, err = facts.Encode(&kgo.Record{Topic: devices.Topic, Partition: p, Offset: next[p], Key: []byte(r.Device), Value: v, Timestamp: time.UnixMilli(r.Time)}, cs); err != nil {
				b.Fatal(err)
			}
			next[p]++
			n++
		}
		if failed, err := st.Write(context.Background(), cs); err != nil || len(failed) > 0 {
			b.Fatal(err, failed)
		}
	}
	for _, c := range []struct {
		name string
		sets []string
	}{
		// Entity sets alone: partitions run side by side.
		{"entity-sets", []string{"minute", "hour", "alarms-10m"}},
		// With two rollups: one goroutine runs every partition.
		{"with-rollups", []string{"minute", "hour", "alarms-10m", "region-minute", "fleet-minute"}},
	} {
		b.Run(c.name, func(b *testing.B) {
			benchmarkRun(b, st, topo, registry(b, topo, devs, "device-%04d"), c.sets, start.Add(span).UnixMilli(), n)
		})
	}
}

// registry is the example's device registry for n devices named by format, each in its RegionOf
// since the epoch, as the demo's generator first fills it.
func registry(b *testing.B, topo *topology.Topology, n int, format string) *tables.Memory {
	reg := tables.NewMemory(topo)
	for d := range n {
		name := fmt.Sprintf(format, d)
		if err := reg.Put("devices", name, time.UnixMilli(0), devices.Device{Region: devices.RegionOf(name)}); err != nil {
			b.Fatal(err)
		}
	}
	return reg
}

func benchmarkRun(b *testing.B, st *cellstore.Store, topo *topology.Topology, reg *tables.Memory, sets []string, end int64, n int) {
	var live []*state.Partition
	for range 4 {
		rec := &state.Partition{StreamTime: end + time.Hour.Milliseconds()}
		for _, s := range sets {
			info, _ := topo.Set(s)
			rec.Graces = append(rec.Graces, state.SetGrace{Set: s, Grace: info.Grace.Milliseconds(), LiveFrom: end})
		}
		live = append(live, rec)
	}
	b.ResetTimer()
	for range b.N {
		sum, err := backfill.Run(context.Background(), backfill.Options{Topology: topo, Tables: reg, Sets: sets, Live: live, Partitions: 4,
			Facts: st, FactsTable: factsTable, Family: family, Out: discard{},
			Encoder: &sinks.AggregatesEncoder{Table: "agg", Family: family, SaltBuckets: buckets}})
		if err != nil {
			b.Fatal(err)
		}
		if sum.Applied != int64(n) || sum.Windows == 0 {
			b.Fatalf("ran %d facts of %d, wrote %d windows", sum.Applied, n, sum.Windows)
		}
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "facts/s")
}

// discard is a store.Writer that keeps nothing.
type discard struct{}

func (discard) Write(context.Context, []store.Cell) ([]store.CellError, error) { return nil, nil }
