package opentsdb

import (
	"fmt"
	"strings"
	"testing"
	"time"

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
	var recs []totals.Record
	for n := range entities {
		for i := range minutes {
			start := t0.Add(time.Duration(i) * time.Minute).UnixMilli()
			recs = append(recs, totals.Record{Topology: "devices", Set: "minute", Entity: fmt.Sprintf("dev-%04d", n),
				Start: start, End: start + minute, Final: true, Revision: 1,
				Values: []totals.Value{{Name: "count", Kind: totals.KindInt, Int: int64(n + i)}}})
		}
	}
	querytest.WriteTotals(t, st, table, 4, recs)
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
