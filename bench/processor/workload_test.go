package main

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"strings"
	"testing"

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
