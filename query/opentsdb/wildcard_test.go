package opentsdb

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/abacus-stream/abacus/query"
	"github.com/abacus-stream/abacus/query/internal/querytest"
	"github.com/abacus-stream/abacus/totals"
)

// TestWildcardOverManyEntities: a wildcard over far more entities than one read holds (1,000,
// five times the old limit of 200, many chunks) is answered, summed, averaged, counted and its
// extremes taken across every entity, equal to the values written; grouped by entity it answers
// every entity. MaxEntities still refuses, naming itself, when set below the match.
func TestWildcardOverManyEntities(t *testing.T) {
	st, table := querytest.CellStore(t)
	const entities, minutes = 1000, 5
	seedFleet(t, st, table, entities, minutes, false)
	c := tsdbClient{t, tsdbServer(t, st, table, Limits{}).URL}
	q := func(agg, filter string) []tsdbSeries {
		return c.query("/api/query", fmt.Sprintf(`{"start":%d,"end":%d,"queries":[{"metric":"devices.minute.count","aggregator":%q,"filters":[{"type":"wildcard","tagk":"entity","filter":%q}]}]}`,
			sec0, sec1, agg, filter))
	}
	for agg, want := range map[string]func(i int) float64{
		"sum":   func(i int) float64 { return float64(entities*(entities-1)/2 + entities*i) },
		"count": func(int) float64 { return entities },
		"min":   func(i int) float64 { return float64(i) },
		"max":   func(i int) float64 { return float64(entities - 1 + i) },
		"avg":   func(i int) float64 { return float64(entities-1)/2 + float64(i) },
		"p50":   func(i int) float64 { return float64(entities-1)/2 + float64(i) },
	} {
		res := q(agg, "*")
		if len(res) != 1 {
			t.Fatalf("%s over every entity: %d series, want 1", agg, len(res))
		}
		for i := range minutes {
			ts := t0.Add(time.Duration(i) * time.Minute).Unix()
			if got := res[0].at(t, ts); got != want(i) {
				t.Errorf("%s over %d entities at minute %d: %v, want %v", agg, entities, i, got, want(i))
			}
		}
	}
	if res := q("sum", "dev-0*"); len(res) != 1 || res[0].at(t, sec0) != float64(entities*(entities-1)/2) {
		t.Errorf("a wildcard with a prefix over every entity: %d series", len(res))
	}
	grouped := c.query("/api/query", fmt.Sprintf(`{"start":%d,"end":%d,"queries":[{"metric":"devices.minute.count","aggregator":"sum","filters":[{"type":"wildcard","tagk":"entity","filter":"*","groupBy":true}]}]}`, sec0, sec1))
	if len(grouped) != entities {
		t.Fatalf("grouped by entity: %d series, want %d", len(grouped), entities)
	}
	if got := grouped[7].at(t, sec0); got != 7 || grouped[7].Tags["entity"] != "dev-0007" {
		t.Errorf("grouped by entity, the 8th series: %s = %v, want dev-0007 = 7", grouped[7].Tags["entity"], got)
	}
	small := tsdbClient{t, tsdbServer(t, st, table, Limits{MaxEntities: 999}).URL}
	small.fails("POST", "/api/query", fmt.Sprintf(`{"start":%d,"end":%d,"queries":[{"metric":"devices.minute.count","aggregator":"sum","tags":{"entity":"*"}}]}`, sec0, sec1),
		400, "more than 999 entities")
	fewWindows := tsdbClient{t, tsdbServer(t, st, table, Limits{MaxWindows: entities*minutes - 1}).URL}
	fewWindows.fails("POST", "/api/query", fmt.Sprintf(`{"start":%d,"end":%d,"queries":[{"metric":"devices.minute.count","aggregator":"sum","tags":{"entity":"*"}}]}`, sec0, sec1),
		400, fmt.Sprintf("reads more than %d windows", entities*minutes-1))
}

// seedFleet writes entities dev-0000... with a final minute window each for minutes minutes from
// t0, whose count is the entity's number plus the minute's, in a table of 4 salt buckets (and its
// key index, when indexed).
func seedFleet(t *testing.T, st querytest.Store, table string, entities, minutes int, indexed bool) {
	t.Helper()
	var recs []totals.Record
	for n := range entities {
		for i := range minutes {
			start := t0.Add(time.Duration(i) * time.Minute).UnixMilli()
			recs = append(recs, totals.Record{Topology: "devices", Set: "minute", Entity: fmt.Sprintf("dev-%04d", n),
				Start: start, End: start + minute, Final: true, Revision: 1,
				Values: []totals.Value{{Name: "count", Kind: totals.KindInt, Int: int64(n + i)}}})
		}
	}
	if indexed {
		querytest.Encoded(t, st, querytest.KeyIndexed(t, st, table), recs)
		return
	}
	querytest.WriteTotals(t, st, table, 4, recs)
}

// TestWildcardChunksByWindows: entities are read in chunks sized by the windows each can have in
// the range, not 64 at a time: over an hour of minute windows the 1,000 entities are one chunk,
// each salt bucket one scan, where chunks of 64 take 16 times as many; the answers are the same.
func TestWildcardChunksByWindows(t *testing.T) {
	st, table := querytest.CellStore(t)
	const entities = 1000
	seedFleet(t, st, table, entities, 5, true)
	src := &querytest.CountingSource{Source: st, Only: table} // not the key index's
	scans := map[time.Duration]int{}
	var answers []float64
	for _, size := range []time.Duration{0, time.Minute} { // 0: a set of no fixed size, chunks of 64
		srv := serveTSDB(t, &API{
			Topologies: []query.Served{{Name: "devices", Reader: newReader(t, src, table), Sets: []query.ServedSet{
				{Name: "minute", Window: "tumbling 1m0s", Aggregates: []string{"count"}, Size: size}}}},
			Now: func() time.Time { return t0.Add(time.Hour) },
		})
		c := tsdbClient{t, srv.URL}
		body := fmt.Sprintf(`{"start":%d,"end":%d,"queries":[{"metric":"devices.minute.count","aggregator":"sum","filters":[{"type":"wildcard","tagk":"entity","filter":"*"}]}]}`, sec0, sec1)
		c.query("/api/query", body) // the key index and the aggregates' kinds, learned once
		src.Reset()
		res := c.query("/api/query", body)
		scans[size] = src.Counts().Scans
		if len(res) != 1 {
			t.Fatalf("window size %v: %d series, want 1", size, len(res))
		}
		answers = append(answers, res[0].at(t, sec0))
	}
	if want := float64(entities * (entities - 1) / 2); answers[0] != want || answers[1] != want {
		t.Errorf("the fleet's first minute summed: %v in chunks of 64, %v in chunks by windows; want %v", answers[0], answers[1], want)
	}
	if scans[time.Minute] > 8 || scans[0] < 4*scans[time.Minute] {
		t.Errorf("scans of the fleet's hour: %d in chunks by windows (want at most 8: 4 salt buckets), %d in chunks of 64", scans[time.Minute], scans[0])
	}
}

// TestChunkSize: a chunk holds as many entities as keep it within chunkWindows, between minChunk
// and maxChunk; a coarser form counts its windows and the finer ones at its edges.
func TestChunkSize(t *testing.T) {
	day, week := 24*time.Hour, 7*24*time.Hour
	hourly := &query.Coarse{Set: "hour", Size: time.Hour}
	for _, c := range []struct {
		size   time.Duration
		coarse *query.Coarse
		span   time.Duration
		aggs   int
		want   int
	}{
		{0, nil, day, 1, minChunk},                              // no fixed size
		{time.Minute, nil, week, 1, minChunk},                   // a week of minutes: the old 64
		{time.Minute, nil, 2 * week, 1, minChunk},               // never fewer
		{time.Minute, nil, day, 1, chunkWindows / 1441},         // 447
		{time.Minute, nil, day, 3, chunkWindows / (3 * 1441)},   // each aggregate a column
		{time.Minute, hourly, week, 1, chunkWindows / 289},      // 168 hours + 1, and 2 hours of minutes
		{time.Minute, nil, time.Hour, 1, maxChunk},              // 61 windows: capped
		{time.Minute, hourly, day, 3, chunkWindows / (3 * 145)}, // 24 hours + 1, and 2 hours of minutes
	} {
		if got := chunkSize(c.size, c.coarse, c.span, c.aggs); got != c.want {
			t.Errorf("chunkSize(%v, %v, %v, %d) = %d, want %d", c.size, c.coarse, c.span, c.aggs, got, c.want)
		}
	}
}

// TestSuggestReadsWhatItAnswers: the entity picker's suggestion (max 5 of 600 entities) answers
// the first five in order, and lists a few entities for them, not every entity up to MaxLookup.
func TestSuggestReadsWhatItAnswers(t *testing.T) {
	st, table := querytest.CellStore(t)
	var recs []totals.Record
	for n := range 600 {
		recs = append(recs, totals.Record{Topology: "devices", Set: "minute", Entity: fmt.Sprintf("dev-%04d", n),
			Start: t0.UnixMilli(), End: t0.UnixMilli() + minute, Final: true, Revision: 1,
			Values: []totals.Value{{Name: "count", Kind: totals.KindInt, Int: 1}}})
	}
	querytest.WriteTotals(t, st, table, 4, recs)
	src := &querytest.CountingSource{Source: st}
	c := tsdbClient{t, tsdbServer(t, src, table, Limits{}).URL}
	c.do("GET", "/api/suggest?type=tagv&q=dev-&max=5", "") // learns the sets' quantiles once
	src.Reset()
	code, body := c.do("GET", "/api/suggest?type=tagv&q=dev-01&max=5", "")
	if want := `["dev-0100","dev-0101","dev-0102","dev-0103","dev-0104"]`; code != 200 || strings.TrimSpace(string(body)) != want {
		t.Fatalf("suggest dev-01, max 5: %d %s, want %s", code, body, want)
	}
	if n := src.Counts(); n.Rows > 50 {
		t.Errorf("a suggestion of 5 entities read %d rows (%+v)", n.Rows, n)
	}
}
