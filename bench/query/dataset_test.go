package querybench

import (
	"context"
	"fmt"
	"math"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/abacus-stream/abacus/examples/devices"
	"github.com/abacus-stream/abacus/hbase"
	"github.com/abacus-stream/abacus/keyindex"
	"github.com/abacus-stream/abacus/query"
	"github.com/abacus-stream/abacus/schema"
	"github.com/abacus-stream/abacus/sinks"
	"github.com/abacus-stream/abacus/store"
	"github.com/abacus-stream/abacus/store/hbasestore"
	"github.com/abacus-stream/abacus/topology"
	"github.com/abacus-stream/abacus/totals"
	"github.com/abacus-stream/abacus/windows"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The dataset's sets, as the topology below declares them.
const (
	topoName   = "fleet"
	setMinute  = "minute"
	setTen     = "minute-10m"
	setHour    = "hour"
	setRegion  = "region-minute"
	setFleet   = "fleet-minute"
	family     = "d"
	buckets    = 16
	quantileQ1 = 0.5
	quantileQ2 = 0.95
	quantileQ3 = 0.99
)

// end is the exclusive end of the loaded history, fixed rather than taken from the clock so that a
// loaded table can be reused by later runs and the server's clock (Server.Now) can be set to it:
// "1h-ago" then means the same windows in every run.
var end = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

// size is the dataset: ABACUS_BENCH_ENTITIES entities (default 5,000) with ABACUS_BENCH_DAYS days
// (default 7) of history each. The default is the fleet; run.sh says what it used.
type size struct{ entities, days int }

func datasetSize() size {
	s := size{entities: 5000, days: 7}
	if n, err := strconv.Atoi(os.Getenv("ABACUS_BENCH_ENTITIES")); err == nil && n > 0 {
		s.entities = n
	}
	if n, err := strconv.Atoi(os.Getenv("ABACUS_BENCH_DAYS")); err == nil && n > 0 {
		s.days = n
	}
	return s
}

func (s size) minutes() int { return s.days * 24 * 60 }
func (s size) start() int64 { return end.Add(-time.Duration(s.days) * 24 * time.Hour).UnixMilli() }

// table is the aggregate table of the size; v2 has the minutes' 10-minute coarser set.
func (s size) table() string { return fmt.Sprintf("bench_query_v2_e%d_d%d", s.entities, s.days) }

// loadedTable marks a complete load: it is created only after every cell of table was
// acknowledged, so a load cut short is done again rather than measured.
func (s size) loadedTable() string { return s.table() + "_loaded" }

func entityName(i int) string { return fmt.Sprintf("device-%05d", i) }

// fleetTopology declares what the dataset holds, as a user would: the query server is given the
// sets this topology describes, exactly as `abacus serve` does.
func fleetTopology() (*topology.Topology, error) {
	b := topology.New(topoName)
	src := topology.NewSource(b, devices.Topic, topology.JSON[devices.Reading](),
		func(r devices.Reading) string { return r.Device },
		func(r devices.Reading) time.Time { return time.UnixMilli(r.Time) })
	minute := src.Aggregate(setMinute, windows.Tumbling(time.Minute)).Grace(10*time.Second).
		Count("count").Sum("sum_temp", "Temp").Max("max_temp", "Temp").
		Quantiles("temp_quantiles", "Temp", quantileQ1, quantileQ2, quantileQ3)
	// Coarser forms of the minutes: panels downsampled by 10 minutes or hours read them.
	minute.Coarser(setTen, 10*time.Minute, "count", "sum_temp", "max_temp").
		Coarser(setHour, time.Hour)
	src.Aggregate(setRegion, windows.Tumbling(time.Minute)).Grace(10*time.Second).
		By("region", func(r devices.Reading) string { return devices.RegionOf(r.Device) }).Emit(topology.FinalOnly()).
		Count("count").Sum("sum_temp", "Temp").Max("max_temp", "Temp")
	src.Aggregate(setFleet, windows.Tumbling(time.Minute)).Grace(10*time.Second).
		Global().Emit(topology.FinalOnly()).
		Count("count").Sum("sum_temp", "Temp").Max("max_temp", "Temp")
	return b.Build()
}

// minuteOf is entity e's window at minute m of the history: a count of 1 to 12 readings and
// temperatures on a quarter-degree grid, so that every sum the panels compute is exact in float64
// and a panel can be checked for equality, not closeness.
type minuteOf struct {
	count    int64
	sum, max float64
	q        [3]float64
}

func mix(e, m int) uint64 {
	x := uint64(e)*0x9E3779B97F4A7C15 ^ uint64(m)*0xC2B2AE3D27D4EB4F
	x ^= x >> 29
	x *= 0xBF58476D1CE4E5B9
	return x ^ x>>32
}

func quarter(f float64) float64 { return math.Round(f*4) / 4 }

func windowAt(e, m int) minuteOf {
	h := mix(e, m)
	n := int64(1 + h%12)
	temp := quarter(18 + float64(e%7)*2.5 + 3*math.Sin(float64(m)/60+float64(e)))
	mx := temp + float64(h>>8%8)/4
	return minuteOf{count: n, sum: float64(n) * temp, max: mx, q: [3]float64{temp, temp + 0.5, mx}}
}

// totalsRecord is the record the processor emits for a window: the set's aggregations in
// declaration order (as engine.valuesOf builds them), each of the kind its aggregation returns,
// final, with the revision the count of events applied.
func totalsRecord(set, key string, start, width int64, w minuteOf, quantiles bool) *totals.Record {
	vs := []totals.Value{
		{Name: "count", Kind: totals.KindInt, Int: w.count},
		{Name: "sum_temp", Kind: totals.KindFloat, Float: w.sum},
		{Name: "max_temp", Kind: totals.KindFloat, Float: w.max},
	}
	if quantiles {
		vs = append(vs, totals.Value{Name: "temp_quantiles", Kind: totals.KindQuantiles, Quantiles: []totals.Quantile{
			{Q: quantileQ1, Value: w.q[0]}, {Q: quantileQ2, Value: w.q[1]}, {Q: quantileQ3, Value: w.q[2]}}})
	}
	return &totals.Record{Topology: topoName, Set: set, Entity: key, Start: start, End: start + width,
		Final: true, Revision: uint64(w.count), Values: vs}
}

// rollup adds windows up as the processor's rollups do: counts and sums added, maxima taken.
type rollup struct {
	count    []int64
	sum, max []float64
}

func newRollup(n int) *rollup {
	r := &rollup{count: make([]int64, n), sum: make([]float64, n), max: make([]float64, n)}
	for i := range r.max {
		r.max[i] = math.Inf(-1)
	}
	return r
}

func (r *rollup) add(m int, w minuteOf) {
	r.count[m] += w.count
	r.sum[m] += w.sum
	r.max[m] = math.Max(r.max[m], w.max)
}

func (r *rollup) merge(o *rollup) {
	for m := range r.count {
		r.count[m] += o.count[m]
		r.sum[m] += o.sum[m]
		r.max[m] = math.Max(r.max[m], o.max[m])
	}
}

func (r *rollup) at(m int) minuteOf { return minuteOf{count: r.count[m], sum: r.sum[m], max: r.max[m]} }

// writer puts totals records into the table through the aggregates sink's encoder and the HBase
// store, so the cells are byte for byte what the sink writes for the same records: the same row
// keys (schema.AggregateRow with the table's salt buckets), qualifiers, values and timestamps (the
// window end). Only the Kafka hop in between is skipped.
type writer struct {
	enc   *sinks.AggregatesEncoder
	st    *hbasestore.Store
	cells []store.Cell
	rows  int
	total *atomic.Int64
}

const batchRows = 1000

func (w *writer) put(ctx context.Context, r *totals.Record) error {
	var err error
	if w.cells, err = w.enc.Encode(&kgo.Record{Key: []byte(r.Entity), Value: r.Encode()}, w.cells); err != nil {
		return err
	}
	if w.rows++; w.rows >= batchRows {
		return w.flush(ctx)
	}
	return nil
}

func (w *writer) flush(ctx context.Context) error {
	if len(w.cells) == 0 {
		return nil
	}
	failed, err := w.st.Write(ctx, w.cells)
	if err == nil && len(failed) > 0 {
		err = fmt.Errorf("%d cells not written, first: %v", len(failed), failed[0].Err)
	}
	if err != nil {
		return err
	}
	w.total.Add(int64(w.rows))
	w.cells, w.rows = w.cells[:0], 0
	return nil
}

// loadStats say how long a load took and how many window rows it wrote.
type loadStats struct {
	rows    int64
	elapsed time.Duration
}

// load writes the dataset into a new table, or does nothing when a complete load of the same size
// is there already (loadedTable).
func load(ctx context.Context, c *hbase.Client, s size, progress func(string)) (loadStats, bool, error) {
	if _, err := c.Admin().DescribeTable(ctx, s.loadedTable()); err == nil {
		return loadStats{}, false, nil
	} else if !hbase.IsTableNotFound(err) {
		// An HBase still starting answers otherwise: that is no reason to drop a loaded table
		// (a run right after a restart did, then failed on the marker that was there).
		return loadStats{}, false, fmt.Errorf("is %s loaded? %w", s.table(), err)
	}
	st, err := hbasestore.New(c, hbasestore.Config{})
	if err != nil {
		return loadStats{}, false, err
	}
	// A table left by a load cut short goes: its windows would be rewritten anyway, and the run
	// must not measure a table with older cells in it.
	agg := schema.TableLayout{Name: s.table(), Family: family, SaltBuckets: buckets}
	for _, t := range []string{s.table(), schema.KeyIndexTable(s.table())} {
		_ = c.Admin().DisableTable(ctx, t)
		_ = c.Admin().DeleteTable(ctx, t)
	}
	for _, l := range []schema.TableLayout{agg, schema.KeyIndexLayout(agg)} {
		if err := st.EnsureTable(ctx, l); err != nil {
			return loadStats{}, false, err
		}
	}
	// The sink's encoder with its key index, as a deployment made by `abacus admin create` has:
	// one per writer, as a sink has one per consumer (Encode is not safe for concurrent use;
	// eight writers sharing one raced on its buffers and wrote windows that did not decode).
	newEncoder := func() (*sinks.AggregatesEncoder, error) {
		enc := &sinks.AggregatesEncoder{Table: s.table(), Family: family, SaltBuckets: buckets, KeyIndex: schema.KeyIndexTable(s.table())}
		return enc, enc.Check()
	}
	if _, err := newEncoder(); err != nil {
		return loadStats{}, false, err
	}
	t0 := time.Now()
	var total atomic.Int64
	workers := 8
	next := atomic.Int64{}
	regions := map[string]*rollup{}
	fleet := newRollup(s.minutes())
	var mu sync.Mutex
	errs := make(chan error, workers)
	stop := make(chan struct{})
	go func() {
		tick := time.NewTicker(10 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				n := total.Load()
				progress(fmt.Sprintf("%d rows, %.0f rows/s", n, float64(n)/time.Since(t0).Seconds()))
			}
		}
	}()
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			enc, _ := newEncoder() // checked above
			w := &writer{enc: enc, st: st, total: &total}
			mine := map[string]*rollup{}
			all := newRollup(s.minutes())
			for {
				e := int(next.Add(1) - 1)
				if e >= s.entities {
					break
				}
				name := entityName(e)
				reg := mine[devices.RegionOf(name)]
				if reg == nil {
					reg = newRollup(s.minutes())
					mine[devices.RegionOf(name)] = reg
				}
				hour, ten := newRollup(1), newRollup(1)
				for m := range s.minutes() {
					win := windowAt(e, m)
					reg.add(m, win)
					all.add(m, win)
					hour.add(0, win)
					ten.add(0, win)
					start := s.start() + int64(m)*60_000
					if err := w.put(ctx, totalsRecord(setMinute, name, start, 60_000, win, true)); err != nil {
						errs <- err
						return
					}
					if m%10 == 9 {
						if err := w.put(ctx, totalsRecord(setTen, name, start-9*60_000, 600_000, ten.at(0), false)); err != nil {
							errs <- err
							return
						}
						ten = newRollup(1)
					}
					if m%60 == 59 {
						if err := w.put(ctx, totalsRecord(setHour, name, start-59*60_000, 3_600_000, hour.at(0), false)); err != nil {
							errs <- err
							return
						}
						hour = newRollup(1)
					}
				}
			}
			if err := w.flush(ctx); err != nil {
				errs <- err
				return
			}
			mu.Lock()
			defer mu.Unlock()
			fleet.merge(all)
			for k, r := range mine {
				if regions[k] == nil {
					regions[k] = newRollup(s.minutes())
				}
				regions[k].merge(r)
			}
		})
	}
	wg.Wait()
	close(stop)
	select {
	case err := <-errs:
		return loadStats{}, false, err
	default:
	}
	enc, _ := newEncoder()
	w := &writer{enc: enc, st: st, total: &total}
	for m := range s.minutes() {
		start := s.start() + int64(m)*60_000
		for k, r := range regions {
			if err := w.put(ctx, totalsRecord(setRegion, k, start, 60_000, r.at(m), false)); err != nil {
				return loadStats{}, false, err
			}
		}
		if err := w.put(ctx, totalsRecord(setFleet, query.GlobalKey, start, 60_000, fleet.at(m), false)); err != nil {
			return loadStats{}, false, err
		}
	}
	if err := w.flush(ctx); err != nil {
		return loadStats{}, false, err
	}
	if err := keyindex.MarkComplete(ctx, st, agg); err != nil {
		return loadStats{}, false, err
	}
	elapsed := time.Since(t0)
	if err := c.Admin().CreateTable(ctx, hbase.TableSpec{Name: s.loadedTable(), Families: []hbase.FamilySpec{{Name: family}}}); err != nil {
		return loadStats{}, false, err
	}
	return loadStats{rows: total.Load(), elapsed: elapsed}, true, nil
}
