package main

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

const testBase = 1_700_000_040_000 // a minute boundary

// The producer's partitioner and the one the harness computes (sentinels, probes) must agree,
// or a sentinel would land on the wrong partition and leave windows open.
func TestPartitionOfMatchesProducer(t *testing.T) {
	part := kgo.StickyKeyPartitioner(kgo.SaramaCompatHasher(fnv32a)).ForTopic("t")
	for i := range 2000 {
		k := entityName(i)
		if got, want := partitionOf(k, partitions), part.Partition(&kgo.Record{Key: []byte(k)}, partitions); got != int32(want) {
			t.Fatalf("%s: partitionOf %d, producer %d", k, got, want)
		}
	}
	for p, k := range keysPerPartition(sentinelPrefix, partitions) {
		if got := partitionOf(k, partitions); got != int32(p) {
			t.Fatalf("sentinel %s for partition %d lands on %d", k, p, got)
		}
	}
}

func TestWorkloadShapes(t *testing.T) {
	for _, tc := range []struct {
		name                            string
		events                          int
		entities, windows, finals, perW int
	}{
		{"sparse", 1_000_000, 100_000, 10, 1_000_000, 1},
		{"dense", 1_000_000, 10_000, 2, 20_000, 0}, // 60 then 40 events per entity-window
		{"sparse", 24_000, 2_400, 10, 24_000, 1},
		{"restore", 5_000, 5_000, 1, 0, 0},
	} {
		w, err := newWorkload(tc.name, tc.events, 0)
		if err != nil {
			t.Fatal(err)
		}
		if w.entities != tc.entities || w.windows() != tc.windows || w.events() != tc.events {
			t.Fatalf("%s/%d: %d entities, %d windows, %d events", tc.name, tc.events, w.entities, w.windows(), w.events())
		}
		if !w.sentinels {
			continue
		}
		x := w.expect(testBase)
		if x.finals != tc.finals || x.count != int64(tc.events) {
			t.Fatalf("%s/%d: %d finals of %d events, want %d of %d", tc.name, tc.events, x.finals, x.count, tc.finals, tc.events)
		}
		if tc.perW > 0 {
			for i, a := range x.wins {
				if a.count != int64(tc.perW) {
					t.Fatalf("%s: window %d has %d events, want %d", tc.name, i, a.count, tc.perW)
				}
			}
		}
	}
}

// Every partition must see non-decreasing event times (nothing is late with grace 0), and its
// sentinel must close every real window.
func TestWorkloadOrderAndSentinels(t *testing.T) {
	for _, name := range []string{"sparse", "dense"} {
		w, _ := newWorkload(name, 60_000, 0)
		last := map[int32]int64{}
		var lastEnd int64
		var sum float64
		w.each(testBase, func(e event) {
			p := partitionOf(entityName(e.entity), partitions)
			if e.ts < last[p] {
				t.Fatalf("%s: partition %d goes back in time: %d after %d", name, p, e.ts, last[p])
			}
			last[p] = e.ts
			lastEnd = max(lastEnd, (e.ts/windowMs+1)*windowMs)
			sum += e.v
		})
		if st := w.sentinelTime(testBase); st < lastEnd || st/windowMs == (lastEnd-1)/windowMs {
			t.Fatalf("%s: sentinel at %d does not close the last window (end %d)", name, st, lastEnd)
		}
		if x := w.expect(testBase); x.sum != sum {
			t.Fatalf("%s: expected sums %g, events sum to %g", name, x.sum, sum)
		}
	}
}

func TestEventJSON(t *testing.T) {
	var r reading
	b := encodeEvent(nil, event{entity: 42, ts: testBase + 5, v: 17})
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	if r != (reading{Entity: "dev-0000042", TS: testBase + 5, V: 17}) {
		t.Fatalf("decoded %+v from %s", r, b)
	}
	if err := json.Unmarshal(sentinelRecord("~sentinel-3", testBase, 3).Value, &r); err != nil || r.Entity != "~sentinel-3" {
		t.Fatalf("sentinel decodes to %+v, %v", r, err)
	}
}

func streamsRecord(entity string, start int64, a winAgg) *kgo.Record {
	v := make([]byte, 32)
	binary.BigEndian.PutUint64(v[0:], uint64(start))
	binary.BigEndian.PutUint64(v[8:], uint64(a.count))
	binary.BigEndian.PutUint64(v[16:], math.Float64bits(a.sum))
	binary.BigEndian.PutUint64(v[24:], math.Float64bits(a.max))
	return &kgo.Record{Key: []byte(entity), Value: v}
}

// The finals check must catch every way a run can be wrong.
func TestOutputCheck(t *testing.T) {
	w, _ := newWorkload("sparse", 240, 0) // 24 entities, 10 windows
	x := w.expect(testBase)
	feed := func(mutate func(recs []*kgo.Record) []*kgo.Record) error {
		r := &outputReader{decode: decodeStreams, expect: x, seen: make([]bool, len(x.wins))}
		var recs []*kgo.Record
		for ent := range w.entities {
			for wi := range x.windows {
				recs = append(recs, streamsRecord(entityName(ent), testBase+int64(wi)*windowMs, x.wins[ent*x.windows+wi]))
			}
		}
		recs = append(recs, streamsRecord("~sentinel-1", testBase+99*windowMs, winAgg{count: 1}))
		for _, rec := range mutate(recs) {
			r.add(rec)
		}
		if r.err != nil {
			return r.err
		}
		return r.stats().check(x)
	}
	if err := feed(func(r []*kgo.Record) []*kgo.Record { return r }); err != nil {
		t.Fatalf("a correct run fails: %v", err)
	}
	for name, mutate := range map[string]func([]*kgo.Record) []*kgo.Record{
		"missing":   func(r []*kgo.Record) []*kgo.Record { return r[1:] },
		"duplicate": func(r []*kgo.Record) []*kgo.Record { return append(r, r[3]) },
		"wrong": func(r []*kgo.Record) []*kgo.Record {
			r[2] = streamsRecord(entityName(0), testBase+2*windowMs, winAgg{count: 1, sum: 1, max: 1})
			return r
		},
		"unknown": func(r []*kgo.Record) []*kgo.Record {
			return append(r[1:], streamsRecord(entityName(0), testBase+50*windowMs, x.wins[0]))
		},
		"corrupt": func(r []*kgo.Record) []*kgo.Record { return append(r, &kgo.Record{Value: []byte("x")}) },
	} {
		if err := feed(mutate); err == nil {
			t.Errorf("%s: the check passes", name)
		} else if name != "corrupt" && !strings.Contains(err.Error(), "FINALS DO NOT MATCH") {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// A late workload is its base's on-time events, untouched, plus late events: the asked fraction of
// all events, in bursts of one entity, each behind its partition's stream time by more than a
// window (so late for every window with grace 0), none before a partition's first on-time event.
func TestLateWorkloads(t *testing.T) {
	for _, name := range []string{"sparse-late10", "sparse-late50", "dense-late10"} {
		w, err := newWorkload(name, 60_000, 0)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := newWorkload(w.base, 60_000, 0)
		if w.onTime() != b.events() || w.entities != b.entities || w.topicName("p") == b.topicName("p") {
			t.Fatalf("%s: %d on-time events of %d entities, topic %s; base %d of %d, topic %s",
				name, w.onTime(), w.entities, w.topicName("p"), b.events(), b.entities, b.topicName("p"))
		}
		var onTime []event
		var late, bursts, lastBurst int
		wm := map[int32]int64{} // each partition's stream time: its largest on-time event time so far
		prev := event{entity: -1}
		h := fnv.New64a()
		w.each(testBase, func(e event) {
			fmt.Fprintf(h, "%d %d %g %v\n", e.entity, e.ts, e.v, e.late)
			p := partitionOf(entityName(e.entity), partitions)
			if !e.late {
				if e.ts < wm[p] {
					t.Fatalf("%s: partition %d goes back in time: on-time %d after %d", name, p, e.ts, wm[p])
				}
				wm[p] = e.ts
				onTime = append(onTime, e)
				prev = e
				return
			}
			late++
			st, ok := wm[p]
			if !ok {
				t.Fatalf("%s: a late event before partition %d's first on-time event", name, p)
			}
			// Late with grace 0: its window ends at or before the stream time.
			if end := (e.ts/windowMs + 1) * windowMs; end > st || st-e.ts < lateNewestMs || st-e.ts > lateMaxMs {
				t.Fatalf("%s: late event at %d is %d ms behind stream time %d (window end %d)", name, e.ts, st-e.ts, st, end)
			}
			if !prev.late || prev.entity != e.entity || e.ts < prev.ts || lastBurst == burstMax {
				if bursts > 0 && lastBurst < burstMin {
					t.Fatalf("%s: a burst of %d events", name, lastBurst)
				}
				bursts++
				lastBurst = 0
			}
			lastBurst++
			prev = e
		})
		total := len(onTime) + late
		if late != w.lateEvents() || total != w.events() {
			t.Fatalf("%s: %d late of %d events, want %d of %d", name, late, total, w.lateEvents(), w.events())
		}
		if got := float64(late) / float64(total); math.Abs(got-w.late) > 0.001 {
			t.Fatalf("%s: late fraction %.4f, want %.2f", name, got, w.late)
		}
		if avg := float64(late) / float64(bursts); avg < burstMin || avg > burstMax {
			t.Fatalf("%s: %d bursts of %.1f events on average", name, bursts, avg)
		}
		// The on-time events are the base's, in its order; the finals are the base's.
		i := 0
		b.each(testBase, func(e event) {
			if onTime[i] != e {
				t.Fatalf("%s: on-time event %d is %+v, the base's %+v", name, i, onTime[i], e)
			}
			i++
		})
		x, bx := w.expect(testBase), b.expect(testBase)
		if !slices.Equal(x.wins, bx.wins) || x.finals != bx.finals || x.sum != bx.sum || bx.lateCount != 0 {
			t.Fatalf("%s: the late events change the expected finals", name)
		}
		if x.lateCount != late {
			t.Fatalf("%s: %d late offsets, want %d", name, x.lateCount, late)
		}
		// The same input at every run (later runs reuse the topic).
		h2 := fnv.New64a()
		w.each(testBase, func(e event) { fmt.Fprintf(h2, "%d %d %g %v\n", e.entity, e.ts, e.v, e.late) })
		if h.Sum64() != h2.Sum64() {
			t.Fatalf("%s: two runs of the generator differ", name)
		}
	}
	for _, bad := range []string{"sparse-late0", "sparse-late95", "sparse-late07", "sparse-latex", "restore-late10", "nope-late10"} {
		if _, err := newWorkload(bad, 60_000, 0); err == nil {
			t.Errorf("%s: accepted", bad)
		}
	}
}

// The late offsets are the late events' positions in their partitions, as the producer writes them.
func TestLateOffsets(t *testing.T) {
	w, _ := newWorkload("sparse-late50", 2_400, 0)
	x := w.expect(testBase)
	var next [partitions]int64
	seen := make([]bool, x.lateCount)
	w.each(testBase, func(e event) {
		p := partitionOf(entityName(e.entity), partitions)
		i := x.lateIndex(p, next[p])
		if e.late != (i >= 0) || (e.late && seen[i]) {
			t.Fatalf("partition %d offset %d: late %v, index %d", p, next[p], e.late, i)
		}
		if e.late {
			seen[i] = true
		}
		next[p]++
	})
	if slices.Contains(seen, false) {
		t.Fatal("a late offset that no late event has")
	}
	if x.lateIndex(0, next[0]) >= 0 || x.lateIndex(-1, 0) >= 0 || x.lateIndex(partitions, 0) >= 0 {
		t.Fatal("lateIndex finds a late event where there is none")
	}
}

// A join workload is its rollup workload (same input, same finals) with a registry of its own
// entities.
func TestJoinWorkload(t *testing.T) {
	for _, name := range []string{"sparse", "dense"} {
		j, err := newWorkload(name+"-join", 60_000, 0)
		if err != nil {
			t.Fatal(err)
		}
		r, _ := newWorkload(name+"-rollup", 60_000, 0)
		if !j.join || !j.rollup || r.join || j.topicName("p") != r.topicName("p") || j.events() != r.events() {
			t.Fatalf("%s-join: %+v beside %+v", name, j, r)
		}
		if jx, rx := j.expect(testBase), r.expect(testBase); !slices.Equal(jx.wins, rx.wins) || jx.setFinals != rx.setFinals {
			t.Fatalf("%s-join: finals differ from the rollup workload's", name)
		}
		if j.registryName("p") == j.topicName("p") {
			t.Fatalf("%s-join: the registry is the input", name)
		}
	}
}

// A rollup workload reads its base's input (the same topic) and expects, beside its entities'
// finals, one per region and window and one per window for all events, each the merge of its
// entities' totals; the check catches a rollup final that is wrong, missing or in the wrong set.
func TestRollupWorkload(t *testing.T) {
	for _, name := range []string{"sparse", "dense"} {
		w, err := newWorkload(name+"-rollup", 60_000, 0)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := newWorkload(name, 60_000, 0)
		if !w.rollup || w.base != name || w.topicName("p") != b.topicName("p") || w.events() != b.events() {
			t.Fatalf("%s-rollup: base %q, topic %s (base's %s), %d events", name, w.base, w.topicName("p"), b.topicName("p"), w.events())
		}
		x, bx := w.expect(testBase), b.expect(testBase)
		n := bx.entities * bx.windows
		if !slices.Equal(x.wins[:n], bx.wins) || x.setFinals[0] != bx.finals {
			t.Fatalf("%s-rollup: the entity finals differ from the base's", name)
		}
		if x.setFinals[1] != regions*x.windows || x.setFinals[2] != x.windows || x.finals != bx.finals+(regions+1)*x.windows {
			t.Fatalf("%s-rollup: finals by set %v", name, x.setFinals)
		}
		// Each rollup total is the merge of its entities' totals.
		for wi := range x.windows {
			var g winAgg
			rs := make([]winAgg, regions)
			for ent := range x.entities {
				a := x.wins[ent*x.windows+wi]
				if a.count == 0 {
					continue
				}
				for _, m := range []*winAgg{&g, &rs[ent%regions]} {
					if m.count == 0 {
						m.max = a.max
					}
					m.count, m.sum, m.max = m.count+a.count, m.sum+a.sum, max(m.max, a.max)
				}
			}
			if want, _, ok := x.lookup(globalSet, globalKey, testBase+int64(wi)*windowMs); !ok || want != g {
				t.Fatalf("%s-rollup window %d: global %+v, entities merge to %+v", name, wi, want, g)
			}
			for r := range regions {
				if want, _, ok := x.lookup(regionSet, regionName(r), testBase+int64(wi)*windowMs); !ok || want != rs[r] {
					t.Fatalf("%s-rollup window %d region %d: %+v, entities merge to %+v", name, wi, r, want, rs[r])
				}
			}
		}
		if _, _, ok := bx.lookup(globalSet, globalKey, testBase); ok {
			t.Fatalf("%s: a workload without rollups expects a global final", name)
		}
	}
	if regionOf(entityName(1234)) != "region-34" || regionOf("~sentinel-3") != "" || regionOf(regionName(7)) != "" {
		t.Fatal("regionOf")
	}

	w, _ := newWorkload("sparse-rollup", 2_400, 0) // 240 entities, 10 windows
	x := w.expect(testBase)
	t0 := time.UnixMilli(testBase)
	feed := func(mutate func([]*kgo.Record) []*kgo.Record) (outputStats, error) {
		r := &outputReader{decode: decodeStreams, expect: x, seen: make([]bool, len(x.wins))}
		var recs []*kgo.Record
		for wi := range x.windows {
			at := t0.Add(time.Duration(wi) * time.Minute)
			start := testBase + int64(wi)*windowMs
			for ent := range w.entities {
				rec := streamsRecord(entityName(ent), start, x.wins[ent*x.windows+wi])
				rec.Timestamp = at
				recs = append(recs, rec)
			}
			for reg := range regions {
				recs = append(recs, streamsRecord(regionName(reg), start, x.wins[x.regionAt(reg, wi)]))
			}
			rec := streamsRecord(globalKey, start, x.wins[x.globalAt(wi)])
			rec.Timestamp = at.Add(time.Duration(wi) * time.Second)
			recs = append(recs, rec)
		}
		for _, rec := range mutate(recs) {
			r.add(rec)
		}
		if r.err != nil {
			return outputStats{}, r.err
		}
		return r.stats(), r.stats().check(x)
	}
	st, err := feed(func(r []*kgo.Record) []*kgo.Record { return r })
	if err != nil {
		t.Fatalf("a correct run fails: %v", err)
	}
	res := &result{out: st}
	if last, mx, _, ok := res.globalLag(); !ok || last != 9*time.Second || mx != 9*time.Second {
		t.Fatalf("global lag: last %v, max %v, %v", last, mx, ok)
	}
	perWindow := w.entities + regions + 1
	for name, mutate := range map[string]func([]*kgo.Record) []*kgo.Record{
		"global missing": func(r []*kgo.Record) []*kgo.Record { return r[:len(r)-1] },
		"region wrong": func(r []*kgo.Record) []*kgo.Record {
			r[w.entities] = streamsRecord(regionName(0), testBase, winAgg{count: 1, sum: 1, max: 1})
			return r
		},
		"region as global": func(r []*kgo.Record) []*kgo.Record {
			r[perWindow-1] = streamsRecord(regionName(0), testBase, x.wins[x.globalAt(0)])
			return r
		},
		"unknown region": func(r []*kgo.Record) []*kgo.Record {
			return append(r, streamsRecord(regionPrefix+"100", testBase, x.wins[x.globalAt(0)]))
		},
	} {
		if _, err := feed(mutate); err == nil || !strings.Contains(err.Error(), "FINALS DO NOT MATCH") {
			t.Errorf("%s: %v", name, err)
		}
	}
}
