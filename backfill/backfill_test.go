package backfill_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/abacus-stream/abacus/abacustest"
	"github.com/abacus-stream/abacus/backfill"
	"github.com/abacus-stream/abacus/examples/devices"
	"github.com/abacus-stream/abacus/partitioner"
	"github.com/abacus-stream/abacus/schema"
	"github.com/abacus-stream/abacus/sinks"
	"github.com/abacus-stream/abacus/state"
	"github.com/abacus-stream/abacus/store"
	"github.com/abacus-stream/abacus/store/cellstore"
	"github.com/abacus-stream/abacus/tables"
	"github.com/abacus-stream/abacus/topology"
	"github.com/abacus-stream/abacus/windows"
)

const (
	factsTable = "facts"
	family     = "d"
	buckets    = 4
)

// source is one record as the processor and the facts sink read it.
type source struct {
	partition int32
	offset    int64
	key       string
	value     []byte
	ts        time.Time
}

// readings makes n readings of 20 devices over span from start, in time order but for up to 3 s
// of jitter, some minutes late and some sent twice, and the records they are in.
func readings(rng *rand.Rand, start time.Time, span time.Duration, n int) []source {
	var out []source
	next := map[int32]int64{}
	for i := range n {
		now := start.Add(span * time.Duration(i) / time.Duration(n))
		ts := now.Add(-time.Duration(rng.Int64N(int64(3 * time.Second))))
		if rng.IntN(100) < 3 {
			ts = ts.Add(-time.Duration(rng.IntN(5)) * time.Minute) // late for some sets, not others
		}
		d := rng.IntN(20)
		kind := "reading"
		if rng.IntN(100) < 10 {
			kind = "alarm"
		}
		r := devices.Reading{Device: fmt.Sprintf("device-%03d", d), Sensor: fmt.Sprintf("s%d", rng.IntN(3)),
			Time: ts.UnixMilli(), Temp: float64(rng.IntN(4000)) / 100, Humidity: float64(rng.IntN(1000)) / 10, Kind: kind}
		v, _ := json.Marshal(r)
		copies := 1
		if rng.IntN(100) < 2 {
			copies = 2 // an at-least-once device: the same reading twice, at two offsets
		}
		for range copies {
			p := partitioner.Partition([]byte(r.Device), 4)
			out = append(out, source{partition: p, offset: next[p], key: r.Device, value: v, ts: now})
			next[p]++
		}
	}
	return out
}

// cells reads every cell of table, as "row qualifier ts = value" lines.
func cells(t *testing.T, st store.Reader, table string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := st.Scan(context.Background(), store.ScanSpec{Table: table, Family: family}, func(row []byte, cs []store.Cell) bool {
		if bytes.Equal(row, schema.EpochRow) {
			return true // the sets' epochs: new values at every move, compared by epochs()
		}
		for _, c := range cs {
			out[fmt.Sprintf("%x %s %d", row, c.Qualifier, c.Timestamp)] = fmt.Sprintf("%x", c.Value)
		}
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// epochs lists the sets whose epoch (schema.EpochRow) the key index table holds.
func epochs(t *testing.T, st store.Reader, table string) []string {
	t.Helper()
	var sets []string
	err := st.Scan(context.Background(), store.ScanSpec{Table: table, Family: family, Start: schema.EpochRow, Stop: append(bytes.Clone(schema.EpochRow), 0)},
		func(_ []byte, cs []store.Cell) bool {
			for _, c := range cs {
				sets = append(sets, string(c.Qualifier))
			}
			return true
		})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(sets)
	return sets
}

// topo is the example's per-device sets and one rollup; with later, two sets and two rollups
// more, which a running deployment adds.
func topo(t *testing.T, later bool) *topology.Topology {
	t.Helper()
	tp, err := buildTopo(later)
	if err != nil {
		t.Fatal(err)
	}
	return tp
}

// onReading, when set, is called for each reading the topology keys (a child process that is
// to be killed mid-run blocks in it).
var onReading func()

func buildTopo(later bool) (*topology.Topology, error) {
	b := topology.New("devices")
	src := topology.NewSource(b, devices.Topic, topology.JSON[devices.Reading](),
		func(r devices.Reading) string {
			if onReading != nil {
				onReading()
			}
			return r.Device
		},
		func(r devices.Reading) time.Time { return time.UnixMilli(r.Time) }).
		EventType(func(r devices.Reading) string { return r.Kind })
	minute := src.Aggregate("minute", windows.Tumbling(time.Minute)).Grace(10*time.Second).
		Emit(topology.EarlyEvery(5*time.Second)).
		Count("count").Mean("mean_temp", "Temp").Max("max_temp", "Temp").
		Quantiles("temp_quantiles", "Temp", 0.5, 0.99).Distinct("sensors", "Sensor")
	region := src.Aggregate("region-minute", windows.Tumbling(time.Minute)).Grace(10*time.Second).
		By("region", func(r devices.Reading) string { return devices.RegionOf(r.Device) }).Emit(topology.FinalOnly()).
		Count("count")
	if later {
		src.Aggregate("hour", windows.Tumbling(time.Hour)).Grace(time.Minute).
			Emit(topology.EarlyEvery(10*time.Second)).Count("count").Max("max_humidity", "Humidity")
		src.Aggregate("alarms-10m", windows.Hopping(10*time.Minute, time.Minute)).Grace(30*time.Second).
			Types("alarm").Count("alarms").Min("min_temp", "Temp")
		src.Aggregate("region-hour", windows.Tumbling(time.Hour)).Grace(time.Minute).
			By("region", func(r devices.Reading) string { return devices.RegionOf(r.Device) }).Emit(topology.FinalOnly()).
			Count("count").Max("max_temp", "Temp").Quantiles("temp_quantiles", "Temp", 0.5)
		src.Aggregate("fleet-10m", windows.Tumbling(10*time.Minute)).Grace(30*time.Second).Global().
			Emit(topology.FinalOnly()).Count("count").Distinct("devices", "Device")
		minute.Coarser("minute-10m", 10*time.Minute, "count", "max_temp")
		region.Coarser("region-10m", 10*time.Minute)
	}
	return b.Build()
}

// run sends recs through a driver of v1, switching to v2 before the record at index switchAt
// (never, when it is past the end), and writes every total through the aggregates sink's
// encoder to table (if any), as the sink would; it returns the driver.
func run(t *testing.T, st store.Writer, table string, v1, v2 *topology.Topology, recs []source, switchAt int, start time.Time) *abacustest.Driver {
	t.Helper()
	return runWith(t, st, table, v1, v2, recs, switchAt, start, nil)
}

// runWith is run with setup called on the driver before any record (to fill its tables).
func runWith(t *testing.T, st store.Writer, table string, v1, v2 *topology.Topology, recs []source, switchAt int, start time.Time, setup func(*abacustest.Driver)) *abacustest.Driver {
	t.Helper()
	d := abacustest.New(t, v1, abacustest.Options{Partitions: 4, Start: start})
	if setup != nil {
		setup(d)
	}
	for i, r := range recs {
		if i == switchAt {
			d.RestartWith(v2, false) // a rolling deployment that adds the sets
		}
		d.Send(devices.Topic, r.key, r.value, abacustest.At(r.ts))
	}
	d.Advance(10 * time.Minute) // the last windows close as an idle partition's do
	if table != "" {
		writeTotals(t, st, table, d, v1)
	}
	return d
}

// writeTotals writes every total d emitted to table (and its key index table_keys) through the
// aggregates sink's encoder, as the sink would.
func writeTotals(t *testing.T, st store.Writer, table string, d *abacustest.Driver, topo *topology.Topology) {
	t.Helper()
	enc := &sinks.AggregatesEncoder{Table: table, Family: family, SaltBuckets: buckets, KeyIndex: table + "_keys"}
	var out []store.Cell
	for _, m := range d.Messages(topo.TotalsTopic()) {
		var err error
		if out, err = enc.Encode(&kgo.Record{Value: m.Value}, out); err != nil {
			t.Fatal(err)
		}
	}
	write(t, st, out)
}

// TestBackfillCompletesAnAddedSet is the promise on the in-memory driver: a deployment
// adds two sets and two rollups (by region, and global) an hour and a quarter into three hours of
// readings (some late, some twice); the processor writes their windows from there on, and
// backfill, from the facts table alone, writes the windows before. The aggregates table then holds, cell for cell, what a deployment that had
// the sets from the start holds; the key index rows too. Run again, backfill writes the same.
func TestBackfillCompletesAnAddedSet(t *testing.T) {
	v1, v2 := topo(t, false), topo(t, true)
	start := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	recs := readings(rand.New(rand.NewPCG(1, 2)), start, 3*time.Hour, 30000)
	st, nFacts := withFacts(t, v2, recs)
	run(t, st, "full", v2, v2, recs, len(recs), start)
	d := run(t, st, "live", v1, v2, recs, len(recs)*5/12, start)
	live := records(d)
	opts := backfill.Options{Topology: v2, Sets: []string{"hour", "alarms-10m", "region-hour", "fleet-10m", "minute-10m", "region-10m"}, Live: live,
		Facts: st, FactsTable: factsTable, Family: family, Out: st,
		Encoder: &sinks.AggregatesEncoder{Table: "live", Family: family, SaltBuckets: buckets, KeyIndex: "live_keys"}}
	before := cells(t, st, "live")
	// The first run stops after some checkpoints; the next resumes from the last.
	if err := st.CreateTable("progress", map[string]int{backfill.CheckpointFamily: 1}); err != nil {
		t.Fatal(err)
	}
	opts.Checkpoints = &backfill.Checkpoints{Store: st, Table: "progress", Every: time.Nanosecond}
	stopped := interrupted(t, opts, 1500)
	if stopped.Checkpoints == 0 {
		t.Fatalf("the interrupted run saved no checkpoint before it stopped: %+v", stopped)
	}
	spilling := opts
	spilling.MemoryBytes, spilling.TempDir = 256<<10, t.TempDir() // most facts go through files
	spilling.Checkpoints = &backfill.Checkpoints{Store: st, Table: "progress", Every: time.Hour}
	sum, err := backfill.Run(context.Background(), spilling)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("stopped: %+v\nresumed: %+v", stopped, sum)
	if sum.ReadRanges != buckets {
		t.Errorf("the facts table's %d buckets were read in %d scans, want one each", buckets, sum.ReadRanges)
	}
	if sum.Windows == 0 || sum.NotClosed != 0 || sum.OnDisk < sum.Facts/2 {
		t.Errorf("backfill wrote %d windows, left %d not closed, and %d of %d facts went through files: want some, none, and most", sum.Windows, sum.NotClosed, sum.OnDisk, sum.Facts)
	}
	if sum.Resumed == 0 || sum.Resumed > stopped.Applied || sum.Applied != sum.Facts {
		t.Errorf("the run after the stop passed over %d facts of the %d the stopped run applied, and counts %d applied of %d read: want it to resume from the stopped run's last checkpoint",
			sum.Resumed, stopped.Applied, sum.Applied, sum.Facts)
	}
	if left, _ := os.ReadDir(spilling.TempDir); len(left) != 0 {
		t.Errorf("backfill left %d files in its temporary folder", len(left))
	}
	want, got := cells(t, st, "full"), cells(t, st, "live")
	if len(got) == len(before) {
		t.Fatal("backfill added no cell")
	}
	same(t, "a deployment that had the sets from the start", want, got)
	same(t, "its key index", cells(t, st, "full_keys"), cells(t, st, "live_keys"))
	// Every window it wrote is of the past: query caches of the sets it wrote must drop them.
	wrote := map[string]bool{}
	for k := range got {
		if _, ok := before[k]; ok {
			continue
		}
		var row []byte
		if _, err := fmt.Sscanf(k, "%x", &row); err != nil {
			t.Fatal(err)
		}
		if _, set, _, err := schema.ParseAggregateRow(row); err == nil {
			wrote[set] = true
		}
	}
	if moved := epochs(t, st, "live_keys"); fmt.Sprint(moved) != fmt.Sprint(slices.Sorted(maps.Keys(wrote))) {
		t.Errorf("backfill moved the epochs of %v, want those of the sets it wrote: %v", moved, slices.Sorted(maps.Keys(wrote)))
	}

	// A run that ended marked its checkpoint done: the next starts over.
	if again, err := backfill.Run(context.Background(), opts); err != nil {
		t.Fatal(err)
	} else if again.Resumed != 0 || again.Applied != again.Facts {
		t.Errorf("a run after one that ended resumed from %d facts: want it to start over", again.Resumed)
	}
	opts.Checkpoints = nil
	same(t, "the first backfill's table", got, cells(t, st, "live"))

	// Alone in a table of its own, backfill writes only windows the processor did not: each
	// started before its set's live start on its entity's partition.
	if err := st.CreateTable("back", map[string]int{family: 1}); err != nil {
		t.Fatal(err)
	}
	opts.Encoder = &sinks.AggregatesEncoder{Table: "back", Family: family, SaltBuckets: buckets}
	if _, err := backfill.Run(context.Background(), opts); err != nil {
		t.Fatal(err)
	}
	straddling := 0
	for k := range cells(t, st, "back") {
		var row []byte
		if _, err := fmt.Sscanf(k[:strings.IndexByte(k, ' ')], "%x", &row); err != nil {
			t.Fatal(err)
		}
		entity, set, wstart, err := schema.ParseAggregateRow(row)
		if err != nil {
			t.Fatal(err)
		}
		// An entity's windows are its partition's; a rollup's take every partition's share.
		info, _ := v2.Set(set)
		recs := live[partitioner.Partition([]byte(entity), 4) : partitioner.Partition([]byte(entity), 4)+1]
		if info.Rollup {
			recs = live
		}
		liveFrom := int64(math.MinInt64)
		for _, rec := range recs {
			for _, g := range rec.Graces {
				if g.Set == set {
					liveFrom = max(liveFrom, g.LiveFrom)
				}
			}
		}
		if wstart >= liveFrom {
			t.Errorf("backfill wrote window %s of %s at %s, after the set's live start %s", set, entity, time.UnixMilli(wstart).UTC(), time.UnixMilli(liveFrom).UTC())
		} else if wstart+info.Window.Size() > liveFrom {
			straddling++
		}
	}
	if straddling == 0 {
		t.Error("no window across the live start was backfilled: the test does not reach it")
	}

	// Entity sets only: one run takes the partitions side by side (nothing crosses them), and
	// writes what a run of one goroutine writes, though stopped after checkpoints and resumed;
	// two workers, each a share of the partitions, write it too.
	for _, tb := range []string{"serial", "single", "shared"} {
		if err := st.CreateTable(tb, map[string]int{family: 1}); err != nil {
			t.Fatal(err)
		}
	}
	opts.Sets = []string{"hour", "alarms-10m"}
	opts.Encoder = &sinks.AggregatesEncoder{Table: "serial", Family: family, SaltBuckets: buckets}
	serial := opts
	serial.Facts = struct{ store.Reader }{st} // a store that cannot say its buckets: one scan
	procs := runtime.GOMAXPROCS(1)            // one goroutine runs every partition
	one, err := backfill.Run(context.Background(), serial)
	runtime.GOMAXPROCS(procs)
	if err != nil {
		t.Fatal(err)
	}
	if one.ReadRanges != 1 {
		t.Errorf("a store that cannot say its buckets was read in %d scans, want one", one.ReadRanges)
	}
	if procs < 2 {
		t.Fatalf("GOMAXPROCS %d: the test needs two to run partitions side by side", procs)
	}
	opts.Encoder = &sinks.AggregatesEncoder{Table: "single", Family: family, SaltBuckets: buckets}
	opts.Checkpoints = &backfill.Checkpoints{Store: st, Table: "progress", Every: time.Millisecond}
	stopped = interrupted(t, opts, 2500)
	opts.Checkpoints.Every = time.Hour
	sum, err = backfill.Run(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("side by side: stopped %+v\nresumed %+v", stopped, sum)
	if !stopped.Parallel || !sum.Parallel {
		t.Errorf("entity sets on %d cores ran one partition at a time", procs)
	}
	if stopped.Checkpoints == 0 || sum.Resumed == 0 {
		t.Errorf("the run of partitions side by side saved %d checkpoints before it stopped, and the next resumed from %d facts: want some of each", stopped.Checkpoints, sum.Resumed)
	}
	opts.Checkpoints = nil
	same(t, "a run of one goroutine", cells(t, st, "serial"), cells(t, st, "single"))
	opts.Encoder = &sinks.AggregatesEncoder{Table: "shared", Family: family, SaltBuckets: buckets}
	var read int64
	for i := range 2 {
		opts.Share = backfill.Share{Index: i, Of: 2}
		sum, err := backfill.Run(context.Background(), opts)
		if err != nil {
			t.Fatal(err)
		}
		if sum.OtherShares == 0 || sum.Facts == 0 {
			t.Errorf("worker %d of 2 ran %d facts and left %d to the other: want some of each", i, sum.Facts, sum.OtherShares)
		}
		read += sum.Facts
	}
	single := cells(t, st, "single")
	if len(single) == 0 || read != int64(nFacts) {
		t.Fatalf("%d cells from one run; the workers ran %d facts of %d", len(single), read, nFacts)
	}
	same(t, "one run", single, cells(t, st, "shared"))
}

// TestBackfillRefuses: what backfill may not write is refused before anything is read, and the
// error says why.
func TestBackfillRefuses(t *testing.T) {
	v1, v2 := topo(t, false), topo(t, true)
	start := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	recs := readings(rand.New(rand.NewPCG(3, 4)), start, time.Hour, 2000)
	st, err := cellstore.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	added := records(run(t, st, "", v1, v2, recs, len(recs)/2, start))
	old := records(run(t, st, "", v1, v1, recs, len(recs), start))
	base := backfill.Options{Topology: v2, Facts: st, FactsTable: factsTable, Family: family, Out: st,
		Encoder: &sinks.AggregatesEncoder{Table: "z", Family: family, SaltBuckets: buckets}}
	rb := topology.New("devices")
	topology.NewSource(rb, devices.Topic, topology.JSON[devices.Reading](),
		func(r devices.Reading) string { return r.Sensor },
		func(r devices.Reading) time.Time { return time.UnixMilli(r.Time) }).Repartition().
		Aggregate("by-sensor", windows.Tumbling(time.Hour)).Grace(time.Minute).Count("count")
	rekeyed, err := rb.Build()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		edit func(*backfill.Options)
		want string
	}{
		{"re-keyed events shared", func(o *backfill.Options) {
			o.Topology, o.Sets, o.Live, o.Share = rekeyed, []string{"by-sensor"}, added, backfill.Share{Index: 0, Of: 2}
		}, `set "by-sensor" takes re-keyed events, which cross partitions: one run must do it all`},
		{"a set live from the start", func(o *backfill.Options) { o.Sets, o.Live = []string{"minute"}, added }, `set "minute" ran from the processor group's start on every partition`},
		{"a rollup live from the start", func(o *backfill.Options) { o.Sets, o.Live = []string{"region-minute"}, added }, `set "region-minute" ran from the processor group's start`},
		{"no set", func(o *backfill.Options) { o.Live = added }, "name the sets to backfill"},
		{"a rollup shared", func(o *backfill.Options) {
			o.Sets, o.Live, o.Share = []string{"region-hour"}, added, backfill.Share{Index: 1, Of: 2}
		}, `set "region-hour" is a rollup: it takes every partition's share, so one run must do it all`},
		{"a share out of range", func(o *backfill.Options) {
			o.Sets, o.Live, o.Share = []string{"hour"}, added, backfill.Share{Index: 2, Of: 2}
		}, "share 2 of 2: the index must be from 0 to 1"},
		{"an unknown set", func(o *backfill.Options) { o.Sets, o.Live = []string{"hours"}, added }, `no set "hours" (it has minute, region-minute, hour, alarms-10m, region-hour, fleet-10m, minute-10m, region-10m)`},
		{"a set not deployed", func(o *backfill.Options) { o.Sets, o.Live = []string{"hour"}, old }, `set "hour" does not run on partition 0 yet`},
		{"no records", func(o *backfill.Options) { o.Sets = []string{"hour"} }, "the processor's records of 0 partitions"},
		{"past the live start", func(o *backfill.Options) {
			o.Sets, o.Live, o.Until = []string{"hour"}, added, start.Add(3*time.Hour)
		}, `set "hour": later windows are the processor's (it runs the set from 2026-03-01T10:`},
		{"past the live start, the end", func(o *backfill.Options) {
			o.Sets, o.Live, o.Until = []string{"hour"}, added, start.Add(3*time.Hour)
		}, `backfill until 2026-03-01T11:00:00Z at the latest`},
		{"an empty range", func(o *backfill.Options) {
			o.Sets, o.Live, o.From, o.Until = []string{"hour"}, added, start, start
		}, "the range from 2026-03-01T10:00:00Z until 2026-03-01T10:00:00Z is empty"},
	} {
		o := base
		c.edit(&o)
		_, err := backfill.Run(context.Background(), o)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error saying %q", c.name, err, c.want)
		}
	}
}

// same fails for each cell of want that got lacks or holds otherwise, and each cell of got that
// want lacks.
func same(t *testing.T, what string, want, got map[string]string) {
	t.Helper()
	n := 0
	for k, v := range want {
		if g, ok := got[k]; !ok {
			t.Errorf("%s has cell %s = %s; the backfilled table has none", what, k, v)
			n++
		} else if g != v {
			t.Errorf("cell %s: %s has %s, the backfilled table %s", k, what, v, g)
			n++
		}
		if n > 10 {
			t.Fatal("and more")
		}
	}
	for k, v := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("the backfilled table has cell %s = %s, which %s has not", k, v, what)
			n++
		}
		if n > 10 {
			t.Fatal("and more")
		}
	}
}

func write(t *testing.T, st store.Writer, cs []store.Cell) {
	t.Helper()
	for len(cs) > 0 {
		n := min(len(cs), 5000)
		failed, err := st.Write(context.Background(), cs[:n])
		if err != nil {
			t.Fatalf("write: %v", err)
		}
		if len(failed) > 0 {
			t.Fatalf("write: %d cells failed, the first: %v", len(failed), failed[0].Err)
		}
		cs = cs[n:]
	}
}

// interrupted runs a backfill that stops (its context cancelled, as a SIGKILL would stop it)
// once it has written some cells, with more encoded and in flight: what it wrote is a part of
// what a whole run writes, and the run that follows must leave the table as if nothing had
// stopped.
func interrupted(t *testing.T, opts backfill.Options, after int) backfill.Summary {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	opts.BatchCells = 100 // several batches written before the stop
	w := &stopAfter{Writer: opts.Out, limit: after, cancel: cancel}
	opts.Out = w
	sum, err := backfill.Run(ctx, opts)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted backfill: %+v, %v; want it stopped", sum, err)
	}
	if w.written == 0 {
		t.Fatal("the interrupted backfill wrote nothing before it stopped")
	}
	return sum
}

// stopAfter writes until limit cells are written, then cancels and refuses. Backfill's writers
// call it at once.
type stopAfter struct {
	store.Writer
	mu             sync.Mutex
	limit, written int
	cancel         func()
}

func (s *stopAfter) Write(ctx context.Context, cells []store.Cell) ([]store.CellError, error) {
	s.mu.Lock()
	if s.written >= s.limit {
		s.mu.Unlock()
		s.cancel()
		return nil, context.Canceled
	}
	s.written += len(cells)
	s.mu.Unlock()
	return s.Writer.Write(ctx, cells)
}

// TestBackfillRekeyedSource: a source keyed by one thing (the device) and aggregated by another
// (the sensor) goes through the loop topic live, from the record's partition to the entity's;
// backfill sends it the same way, and a set added later again ends as if it had been there from
// the start.
func TestBackfillRekeyedSource(t *testing.T) {
	rekeyed := func(later bool) *topology.Topology {
		b := topology.New("devices")
		src := topology.NewSource(b, devices.Topic, topology.JSON[devices.Reading](),
			func(r devices.Reading) string { return r.Sensor },
			func(r devices.Reading) time.Time { return time.UnixMilli(r.Time) }).Repartition()
		src.Aggregate("sensor-minute", windows.Tumbling(time.Minute)).Grace(10 * time.Second).Count("count")
		if later {
			src.Aggregate("sensor-10m", windows.Tumbling(10*time.Minute)).Grace(30*time.Second).
				Count("count").Max("max_temp", "Temp").Distinct("devices", "Device")
		}
		tp, err := b.Build()
		if err != nil {
			t.Fatal(err)
		}
		return tp
	}
	v1, v2 := rekeyed(false), rekeyed(true)
	start := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	recs := readings(rand.New(rand.NewPCG(7, 8)), start, 2*time.Hour, 8000)
	st, _ := withFacts(t, v2, recs)
	run(t, st, "full", v2, v2, recs, len(recs), start)
	d := run(t, st, "live", v1, v2, recs, len(recs)/2, start)
	live := records(d)
	sum, err := backfill.Run(context.Background(), backfill.Options{Topology: v2, Sets: []string{"sensor-10m"}, Live: live,
		Facts: st, FactsTable: factsTable, Family: family, Out: st,
		Encoder: &sinks.AggregatesEncoder{Table: "live", Family: family, SaltBuckets: buckets, KeyIndex: "live_keys"}})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Windows == 0 {
		t.Fatalf("backfill wrote no window: %+v", sum)
	}
	same(t, "a deployment that had the set from the start", cells(t, st, "full"), cells(t, st, "live"))
	same(t, "its key index", cells(t, st, "full_keys"), cells(t, st, "live_keys"))
}

// withFacts is a cell store with the tables the tests write, its facts table holding recs as the
// facts sink of topo writes them; it returns how many facts it holds.
func withFacts(t *testing.T, topo *topology.Topology, recs []source) (*cellstore.Store, int) {
	t.Helper()
	st, err := cellstore.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	// The facts table as the facts sink makes it, salted: backfill scans its buckets side by side.
	if err := st.EnsureTable(context.Background(), schema.TableLayout{Name: factsTable, Family: family, SaltBuckets: buckets}); err != nil {
		t.Fatal(err)
	}
	for _, tb := range []string{"full", "full_keys", "live", "live_keys"} {
		if err := st.CreateTable(tb, map[string]int{family: 1}); err != nil {
			t.Fatal(err)
		}
	}
	facts := &sinks.FactsEncoder{Table: factsTable, Family: family, SaltBuckets: buckets, Extract: sinks.FactsOf(topo), LeaveRejectsToProcessor: true}
	var cs []store.Cell
	for _, r := range recs {
		if cs, err = facts.Encode(&kgo.Record{Topic: devices.Topic, Partition: r.partition, Offset: r.offset, Key: []byte(r.key), Value: r.value, Timestamp: r.ts}, cs); err != nil {
			t.Fatal(err)
		}
	}
	write(t, st, cs)
	return st, len(cs)
}

// records are the driver's partition records, nil for a partition that has none.
func records(d *abacustest.Driver) []*state.Partition {
	var out []*state.Partition
	for p := range int32(4) {
		rec, _ := d.PartitionRecord(p)
		out = append(out, rec)
	}
	return out
}

// TestBackfillCheckpointCutShort: a run stopped while saving its second checkpoint (its parts
// written, the cell naming them refused, as a kill between the two would leave it) resumes from
// the first, to the cells of a deployment that had the sets from the start; -restart starts over.
func TestBackfillCheckpointCutShort(t *testing.T) {
	v1, v2 := topo(t, false), topo(t, true)
	start := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	recs := readings(rand.New(rand.NewPCG(7, 8)), start, 2*time.Hour, 12000)
	st, _ := withFacts(t, v2, recs)
	run(t, st, "full", v2, v2, recs, len(recs), start)
	live := records(run(t, st, "live", v1, v2, recs, len(recs)/2, start))
	if err := st.CreateTable("progress", map[string]int{backfill.CheckpointFamily: 1}); err != nil {
		t.Fatal(err)
	}
	cut := &refuseMeta{Writer: st, at: 2}
	opts := backfill.Options{Topology: v2, Sets: []string{"hour", "alarms-10m", "region-hour", "fleet-10m", "minute-10m", "region-10m"}, Live: live,
		Facts: st, FactsTable: factsTable, Family: family, Out: st,
		Encoder: &sinks.AggregatesEncoder{Table: "live", Family: family, SaltBuckets: buckets, KeyIndex: "live_keys"},
		Checkpoints: &backfill.Checkpoints{Store: struct {
			store.Reader
			store.Writer
		}{st, cut}, Table: "progress", Every: time.Nanosecond}}
	sum, err := backfill.Run(context.Background(), opts)
	if err == nil || !strings.Contains(err.Error(), "save checkpoint") {
		t.Fatalf("a run whose second checkpoint was cut short: %+v, %v; want it stopped on the save", sum, err)
	}
	if sum.Checkpoints != 1 || cut.parts == 0 {
		t.Fatalf("%d checkpoints saved, %d parts of the one cut short written: want 1 and some", sum.Checkpoints, cut.parts)
	}
	opts.Checkpoints = &backfill.Checkpoints{Store: st, Table: "progress", Every: time.Hour}
	if sum, err = backfill.Run(context.Background(), opts); err != nil {
		t.Fatal(err)
	}
	if sum.Resumed != 1000 { // the serial run saves every 1000 facts
		t.Errorf("the run after resumed from %d facts: want the first checkpoint's 1000", sum.Resumed)
	}
	same(t, "a deployment that had the sets from the start", cells(t, st, "full"), cells(t, st, "live"))

	// Stopped again after a checkpoint, then started over with Restart.
	cut = &refuseMeta{Writer: st, at: 3}
	opts.Checkpoints = &backfill.Checkpoints{Store: struct {
		store.Reader
		store.Writer
	}{st, cut}, Table: "progress", Every: time.Nanosecond}
	if _, err := backfill.Run(context.Background(), opts); err == nil {
		t.Fatal("the run whose third checkpoint was cut short did not stop")
	}
	opts.Checkpoints = &backfill.Checkpoints{Store: st, Table: "progress", Restart: true}
	if sum, err = backfill.Run(context.Background(), opts); err != nil {
		t.Fatal(err)
	}
	if sum.Resumed != 0 || sum.Applied != sum.Facts {
		t.Errorf("with Restart the run passed over %d facts and ran %d of %d: want none passed over", sum.Resumed, sum.Applied, sum.Facts)
	}
	same(t, "a deployment that had the sets from the start", cells(t, st, "full"), cells(t, st, "live"))

	// A checkpoints table that does not exist is named.
	opts.Checkpoints = &backfill.Checkpoints{Store: st, Table: "nowhere"}
	if _, err := backfill.Run(context.Background(), opts); err == nil || !strings.Contains(err.Error(), "nowhere") {
		t.Errorf("a run with checkpoints in a missing table: %v; want an error naming it", err)
	}
}

// refuseMeta writes checkpoint cells, but refuses for good the at-th write of the cell that names
// a checkpoint's parts ("meta"), as a run killed between the two writes leaves it.
type refuseMeta struct {
	store.Writer
	at, metas, parts int
}

func (r *refuseMeta) Write(ctx context.Context, cells []store.Cell) ([]store.CellError, error) {
	if len(cells) == 1 && string(cells[0].Qualifier) == "meta" {
		r.metas++
		if r.metas == r.at {
			return []store.CellError{{Index: 0, Err: errors.New("refused: the run is killed here"), Permanent: true}}, nil
		}
	} else if r.metas == r.at-1 {
		r.parts += len(cells)
	}
	return r.Writer.Write(ctx, cells)
}

// TestBackfillLongRollupKeepsOwnerSmall: a global rollup backfilled over many windows, with the
// smallest MaxMessageBytes. The rollup owner drops its closed windows only once the partition
// records hold the progress that completed them, and the records are written at ticks: a run
// without ticks kept every window of the run in the owner's state, which passed the limit (a
// month of fleet minutes passed the default), so partials were dropped and dead-lettered. The
// cells equal a deployment's that had the set from the start, and nothing is refused.
func TestBackfillLongRollupKeepsOwnerSmall(t *testing.T) {
	fleet := func(later bool) *topology.Topology {
		b := topology.New("devices").MaxMessageBytes(16 << 10)
		src := topology.NewSource(b, devices.Topic, topology.JSON[devices.Reading](),
			func(r devices.Reading) string { return r.Device },
			func(r devices.Reading) time.Time { return time.UnixMilli(r.Time) })
		src.Aggregate("minute", windows.Tumbling(time.Minute)).Grace(10 * time.Second).Count("count")
		if later {
			src.Aggregate("fleet-minute", windows.Tumbling(time.Minute)).Grace(10*time.Second).Global().
				Emit(topology.FinalOnly()).Count("count").Max("max_temp", "Temp")
		}
		tp, err := b.Build()
		if err != nil {
			t.Fatal(err)
		}
		return tp
	}
	v1, v2 := fleet(false), fleet(true)
	start := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	recs := readings(rand.New(rand.NewPCG(9, 10)), start, 12*time.Hour, 8000) // 720 fleet minutes
	st, _ := withFacts(t, v2, recs)
	// The deployments' clocks move, a second every 50 records (every partition hears from its
	// devices many times a second: none is ever idle), so their owners drop closed windows as a
	// live processor's do.
	ticking := func(table string, v1 *topology.Topology, switchAt int) *abacustest.Driver {
		d := abacustest.New(t, v1, abacustest.Options{Partitions: 4, Start: start})
		for i, r := range recs {
			if i == switchAt {
				d.RestartWith(v2, false)
			}
			d.Send(devices.Topic, r.key, r.value, abacustest.At(r.ts))
			if i%50 == 49 {
				d.Advance(time.Second)
			}
		}
		d.Advance(10 * time.Minute)
		if dl := d.DeadLetters(); len(dl) != 0 {
			t.Fatalf("the deployment dead-lettered %d records, the first: %+v", len(dl), dl[0])
		}
		writeTotals(t, st, table, d, v1)
		return d
	}
	ticking("full", v2, len(recs))
	d := ticking("live", v1, len(recs)-50) // the set comes at the very end
	sum, err := backfill.Run(context.Background(), backfill.Options{Topology: v2, Sets: []string{"fleet-minute"}, Live: records(d),
		Facts: st, FactsTable: factsTable, Family: family, Out: st,
		Encoder: &sinks.AggregatesEncoder{Table: "live", Family: family, SaltBuckets: buckets}})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Windows < 700 || sum.DeadLetters != 0 {
		t.Fatalf("backfill wrote %d windows and refused %d facts or partials: want about 720 and none (%+v)", sum.Windows, sum.DeadLetters, sum)
	}
	same(t, "a deployment that had the set from the start", cells(t, st, "full"), cells(t, st, "live"))
}

// TestBackfillJoinsTablesByEventTime: a set that joins a table, backfilled with the versions the
// processor read (here the driver's, in production its group's versions topic), writes the cells
// of a deployment that had the set from the start, devices moving between regions midway
// included; without tables a run is refused.
func TestBackfillJoinsTablesByEventTime(t *testing.T) {
	type place struct{ Region string }
	joined := func(later bool) *topology.Topology {
		b := topology.New("devices")
		src := topology.NewSource(b, devices.Topic, topology.JSON[devices.Reading](),
			func(r devices.Reading) string { return r.Device },
			func(r devices.Reading) time.Time { return time.UnixMilli(r.Time) })
		places := topology.NewTable[place](b, "places", "places", topology.JSON[place]())
		topology.Join(src, places, func(r devices.Reading) string { return r.Device }, func(r devices.Reading, p place, found bool) (devices.Reading, error) {
			r.Sensor = "unknown"
			if found {
				r.Sensor = p.Region
			}
			return r, nil
		})
		src.Aggregate("region-minute", windows.Tumbling(time.Minute)).Grace(10*time.Second).
			By("region", func(r devices.Reading) string { return r.Sensor }).Count("count")
		if later {
			src.Aggregate("region-10m", windows.Tumbling(10*time.Minute)).Grace(30*time.Second).
				By("region", func(r devices.Reading) string { return r.Sensor }).Count("count").Max("max_temp", "Temp")
		}
		tp, err := b.Build()
		if err != nil {
			t.Fatal(err)
		}
		return tp
	}
	v1, v2 := joined(false), joined(true)
	start := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	recs := readings(rand.New(rand.NewPCG(9, 10)), start, 2*time.Hour, 6000)
	// Every device is in a region from the start; odd ones move half an hour in (in the range
	// backfilled: the live run switches to v2 an hour in); device-001 is
	// never registered.
	fill := func(put func(key string, v any, from time.Time)) {
		for i := range 40 {
			dev := fmt.Sprintf("device-%03d", i)
			if i == 1 {
				continue
			}
			put(dev, place{fmt.Sprint("r", i%3)}, start.Add(-time.Hour))
			if i%2 == 1 {
				put(dev, place{fmt.Sprint("moved", i%2)}, start.Add(30*time.Minute))
			}
		}
	}
	setup := func(d *abacustest.Driver) {
		fill(func(key string, v any, from time.Time) { d.PutTable("places", key, v, from) })
	}
	st, _ := withFacts(t, v2, recs)
	runWith(t, st, "full", v2, v2, recs, len(recs), start, setup)
	d := runWith(t, st, "live", v1, v2, recs, len(recs)/2, start, setup)
	opts := backfill.Options{Topology: v2, Sets: []string{"region-10m"}, Live: records(d),
		Facts: st, FactsTable: factsTable, Family: family, Out: st,
		Encoder: &sinks.AggregatesEncoder{Table: "live", Family: family, SaltBuckets: buckets, KeyIndex: "live_keys"}}
	if _, err := backfill.Run(context.Background(), opts); err == nil || !strings.Contains(err.Error(), "joins tables") {
		t.Fatalf("a run without tables: %v, want refused", err)
	}
	mem := tables.NewMemory(v2)
	fill(func(key string, v any, from time.Time) {
		if err := mem.Put("places", key, from, v); err != nil {
			t.Fatal(err)
		}
	})
	opts.Tables = mem
	sum, err := backfill.Run(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Windows == 0 {
		t.Fatalf("backfill wrote no window: %+v", sum)
	}
	full := cells(t, st, "full")
	names := func(region string) bool {
		return slices.ContainsFunc(slices.Collect(maps.Keys(full)), func(k string) bool { return strings.Contains(k, hex.EncodeToString([]byte(region))) })
	}
	if !names("moved1") || !names("unknown") || !names("r2") {
		t.Fatalf("the full run's cells name no moved or unknown region: the test proves nothing")
	}
	same(t, "a deployment that had the set from the start", full, cells(t, st, "live"))
	same(t, "its key index", cells(t, st, "full_keys"), cells(t, st, "live_keys"))
}
