package opentsdb

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/abacus-stream/abacus/abacustest"
	"github.com/abacus-stream/abacus/query"
	"github.com/abacus-stream/abacus/query/internal/querytest"
	"github.com/abacus-stream/abacus/topology"
	"github.com/abacus-stream/abacus/totals"
	"github.com/abacus-stream/abacus/windows"
)

// reading is an event of the coarser sets' test.
type reading struct {
	Device string  `json:"device"`
	TS     int64   `json:"ts"`
	Temp   float64 `json:"temp"`
}

// coarseTopology has minute windows with coarser forms of 10 minutes (emitting early totals
// while open) and an hour, and a region rollup with an hourly coarser form. Version 0 leaves
// the hourly sets out, as a topology before they were added; version 2 adds an aggregation,
// "peak", to the minute set and so to its coarser forms.
func coarseTopology(t *testing.T, version int) *topology.Topology {
	t.Helper()
	b := topology.New("devices")
	src := topology.NewSource(b, "readings", topology.JSON[reading](),
		func(r reading) string { return r.Device }, func(r reading) time.Time { return time.UnixMilli(r.TS) })
	minute := src.Aggregate("minute", windows.Tumbling(time.Minute)).Grace(10*time.Second).
		Count("count").Sum("sum", "Temp").Min("min", "Temp").Max("max", "Temp").Last("last", "Temp").Mean("mean", "Temp")
	if version >= 2 {
		minute.Max("peak", "Temp")
	}
	ten := minute.Coarser("ten", 10*time.Minute).Emit(topology.EarlyEvery(time.Minute))
	region := src.Aggregate("region", windows.Tumbling(time.Minute)).Grace(10*time.Second).
		By("region", func(r reading) string { return "r" + r.Device[len(r.Device)-1:] }).Count("count").Max("max", "Temp")
	if version >= 1 {
		ten.Coarser("hour", time.Hour)
		region.Coarser("region-hour", time.Hour, "max") // region.count 1h-sum reads the minutes
	}
	topo, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	return topo
}

// coarseServed describes topo's sets as the query server does (app's servedSets).
func coarseServed(topo *topology.Topology, r *query.Reader) query.Served {
	s := query.Served{Name: "devices", Reader: r}
	for _, si := range topo.Sets() {
		ss := query.ServedSet{Name: si.Name, Window: si.Window.String(), Aggregates: si.Aggregations, Rollup: si.Rollup,
			Dimension: si.Dimension, Coarsens: si.Coarsens, Kinds: si.Kinds, Size: time.Duration(si.Window.Size()) * time.Millisecond}
		s.Sets = append(s.Sets, ss)
	}
	return s
}

// TestCoarserSetsAnswerAsTheirFinerSet: the processor (the test driver) runs four hours of
// events, some late, the hourly sets added after the first 90 minutes (their first hour has no
// total, and earlier hours nothing), an aggregation added to the minute set later (the hour open
// then has none of it), the last windows left open; its totals are written as the sink writes
// them. Then every one of many random /api/query requests (metrics of the minute and
// region sets, every downsampling aggregator, intervals from a minute to all, ranges on and off
// the hour, a filter on final) answers byte for byte what it answers when every window is read
// from the set the metric names (API.NoCoarser); and the requests a coarser set can answer read
// fewer rows. On the embedded store and the real HBase.
func TestCoarserSetsAnswerAsTheirFinerSet(t *testing.T) {
	start := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	d := abacustest.New(t, coarseTopology(t, 0), abacustest.Options{Start: start, Partitions: 2, IdleTimeout: time.Minute})
	rng := rand.New(rand.NewPCG(1, 2))
	clock := start.UnixMilli()
	for i := range 6000 {
		switch i {
		case 2200:
			d.RestartWith(coarseTopology(t, 1), false) // the hourly sets added
		case 4000:
			d.RestartWith(coarseTopology(t, 2), false) // peak added: the open hour has none
		}
		dev := fmt.Sprintf("dev-%d", rng.IntN(6))
		clock += int64(rng.IntN(4800))
		ts := clock - int64(rng.IntN(25_000))
		d.Pipe("readings", dev, reading{Device: dev, TS: ts, Temp: float64(rng.IntN(40))})
		if lag := time.Duration(clock-d.Now().UnixMilli()) * time.Millisecond; lag > 0 {
			d.Advance(lag)
		}
	}
	var recs []totals.Record
	for _, m := range d.Messages("devices-totals") {
		r, err := totals.Decode(m.Value)
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, *r)
	}
	if len(recs) == 0 {
		t.Fatal("the driver emitted no totals")
	}
	topo := coarseTopology(t, 2)
	span := time.Duration(clock-start.UnixMilli()) * time.Millisecond
	for name, open := range querytest.Stores(t) {
		t.Run(name, func(t *testing.T) {
			st, table := open(t)
			querytest.WriteTotals(t, st, table, 4, recs)
			counting := &querytest.CountingSource{Source: st}
			r, err := query.NewReader(context.Background(), counting, table, "d")
			if err != nil {
				t.Fatal(err)
			}
			served := coarseServed(topo, r)
			now := func() time.Time { return start.Add(span) }
			coarse := tsdbClient{t, serveTSDB(t, &API{Topologies: []query.Served{served}, Now: now}).URL}
			fine := tsdbClient{t, serveTSDB(t, &API{Topologies: []query.Served{served}, Now: now, NoCoarser: true}).URL}
			metrics := []string{"minute.count", "minute.sum", "minute.min", "minute.max", "minute.last", "minute.mean", "minute.peak", "region.count", "region.max"}
			dss := []string{"sum", "min", "max", "last", "avg", "count", "zimsum", "mimmax"}
			intervals := []string{"1m", "5m", "10m", "20m", "30m", "1h", "2h", "3h", "0all"}
			var fewer, coarsened int
			qr := rand.New(rand.NewPCG(3, 4))
			for i := range 300 {
				met := metrics[qr.IntN(len(metrics))]
				from := start.Add(time.Duration(qr.Int64N(int64(span))))
				if qr.IntN(3) == 0 {
					from = from.Truncate(time.Hour)
				}
				to := from.Add(time.Duration(qr.Int64N(int64(span))))
				tags := `"tags":{"entity":"*"}`
				if strings.HasPrefix(met, "region") {
					tags = `"tags":{"region":"*"}`
				}
				switch qr.IntN(4) {
				case 0:
					tags = `"tags":{}`
				case 1:
					tags = `"filters":[{"type":"literal_or","tagk":"final","filter":"true","groupBy":false}]`
				}
				ds := intervals[qr.IntN(len(intervals))] + "-" + dss[qr.IntN(len(dss))]
				if i == 0 || qr.IntN(2) == 0 { // one a coarser set can answer
					merges := map[string]string{"count": "sum", "sum": "zimsum", "min": "mimmin", "max": "max", "last": "last", "peak": "mimmax"}
					agg := merges[met[strings.IndexByte(met, '.')+1:]]
					if i == 0 {
						met, agg, from, to = "minute.peak", "max", start, start.Add(span)
					}
					if agg != "" {
						ds = []string{"10m", "30m", "1h", "2h", "0all"}[qr.IntN(5)] + "-" + agg
					}
				}
				body := fmt.Sprintf(`{"start":%d,"end":%d,"msResolution":true,"queries":[{"metric":"devices.%s","aggregator":"sum","downsample":%q,%s}]}`,
					from.UnixMilli(), to.UnixMilli(), met, ds, tags)
				counting.Reset()
				cc, cb := coarse.do("POST", "/api/query", body)
				rowsCoarse := counting.Counts().Rows
				counting.Reset()
				fc, fb := fine.do("POST", "/api/query", body)
				rowsFine := counting.Counts().Rows
				if cc != fc || string(cb) != string(fb) {
					t.Fatalf("request %d %s:\n through coarser sets %d %s\n  from the set itself %d %s", i, body, cc, cb, fc, fb)
				}
				if rowsCoarse < rowsFine {
					fewer++
				}
				if rowsCoarse != rowsFine {
					coarsened++
				}
			}
			if fewer < 60 {
				t.Errorf("%d of 300 requests read fewer rows through a coarser set, want at least 60", fewer)
			}
			t.Logf("%d requests read through a coarser set, %d of them fewer rows", coarsened, fewer)
			// One entity's four hours summed by the hour: the two whole hours after the hour set
			// was added are a row each; the minutes before and those of the open hour are read.
			body := fmt.Sprintf(`{"start":%d,"end":%d,"queries":[{"metric":"devices.minute.count","aggregator":"sum","downsample":"1h-sum","tags":{"entity":"dev-1"}}]}`,
				start.UnixMilli(), start.Add(span).UnixMilli())
			counting.Reset()
			coarse.query("/api/query", body)
			viaCoarse := counting.Counts().Rows
			counting.Reset()
			fine.query("/api/query", body)
			if viaFine := counting.Counts().Rows; viaCoarse*3 > viaFine*2 {
				t.Errorf("one entity by the hour read %d rows through the coarser sets, %d from the minutes: want at most two thirds", viaCoarse, viaFine)
			}
		})
	}
}
