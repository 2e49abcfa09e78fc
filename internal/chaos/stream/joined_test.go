package stream

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/abacus-stream/abacus/abacustest"
)

// TestJoinedTopologyMatches: the failure suite's joined topology, with the registry that
// RegistryRecords fills, emits exactly the finals of the topology that computes each region:
// every event of the generator's stream finds its place at its event time, never Missing.
func TestJoinedTopologyMatches(t *testing.T) {
	const events = 30_000
	g := &Generator{Seed: 3, Entities: 50}
	g.Start = 3 * RegionPeriod.Milliseconds() * 1000 // on a period boundary: the stream crosses several
	end := time.UnixMilli(g.Start + g.Span(events).Milliseconds())
	g.Now = func() time.Time { return end } // future-dated events: a day past the end
	var recs []Record
	for range events {
		recs = g.Next(recs)
	}
	run := func(joined bool) []string {
		topo, err := build(joined)
		if err != nil {
			t.Fatal(err)
		}
		d := abacustest.New(t, topo, abacustest.Options{Partitions: 4, Start: time.UnixMilli(g.Start), IdleTimeout: 6 * time.Hour})
		if joined {
			var place Place
			for _, r := range RegistryRecords(g.EntityCount(), g.Start-time.Hour.Milliseconds(), g.Start+g.Span(events).Milliseconds()) {
				if err := json.Unmarshal(r.Value, &place); err != nil {
					t.Fatal(err)
				}
				d.PutTable("regions", string(r.Key), place, time.UnixMilli(place.From))
			}
		}
		for _, r := range recs {
			d.Send(SourceTopic, string(r.Key), r.Value, abacustest.At(end)) // stamped at the end: none is from the future
		}
		for p, r := range FlushRecords(4, g.Start+2*24*time.Hour.Milliseconds()) {
			d.Send(SourceTopic, string(r.Key), r.Value, abacustest.ToPartition(int32(p)))
		}
		var out []string
		for _, f := range d.Finals() {
			if f.Set == SetRegion {
				if f.Entity == Missing {
					t.Fatalf("a final of region %q: an event did not find its place", Missing)
				}
				out = append(out, f.String())
			}
		}
		slices.Sort(out)
		return out
	}
	computed, joined := run(false), run(true)
	if len(computed) < 5*int(g.Span(events)/time.Minute) {
		t.Fatalf("%d region finals over %v: too few to prove anything", len(computed), g.Span(events))
	}
	if !slices.Equal(computed, joined) {
		t.Fatalf("joined topology: %d region finals, computed: %d; first difference at %v", len(joined), len(computed), firstDiff(computed, joined))
	}
}

func firstDiff(a, b []string) string {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return a[i] + " / " + b[i]
		}
	}
	return "the end of the shorter"
}
