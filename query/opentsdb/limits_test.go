package opentsdb

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/abacus-stream/abacus/query/internal/querytest"
)

// TestLimits: each bound answers 400 naming itself, before the work it bounds.
func TestLimits(t *testing.T) {
	st, table := querytest.CellStore(t)
	querytest.SeedTSDB(t, st, table, 4)
	c := tsdbClient{t, tsdbServer(t, st, table, Limits{MaxEntities: 2, MaxWindows: 100, MaxPoints: 150, MaxSubQueries: 2, MaxEntityScan: 2}).URL}
	q := func(subs ...string) string {
		return fmt.Sprintf(`{"start":%d,"end":%d,"queries":[%s]}`, sec0, sec1, strings.Join(subs, ","))
	}
	all := `{"metric":"devices.minute.count","aggregator":"sum","tags":{"entity":"*"}}`
	two := `{"metric":"devices.minute.count","aggregator":"sum","tags":{"entity":"device-001|device-002"}}`
	one := `{"metric":"devices.minute.count","aggregator":"sum","tags":{"entity":"device-001"}}`
	c.fails("POST", "/api/query", q(all), 400, "examined 2 entities without finishing")
	c.fails("POST", "/api/query", q(`{"metric":"devices.minute.count","aggregator":"sum","tags":{"entity":"a|b|c"}}`), 400, "more than 2 entities")
	c.fails("POST", "/api/query", q(one, one, one), 400, "3 sub-queries, more than the limit of 2")
	c.fails("POST", "/api/query", q(two), 400, "reads more than 100 windows")
	// The two entities are read at once, and both reads stop when their total passes the limit:
	// at most one row past it each, not the 120 windows the two have.
	src := &querytest.CountingSource{Source: st}
	cs := tsdbClient{t, tsdbServer(t, src, table, Limits{MaxEntities: 2, MaxWindows: 100}).URL}
	cs.fails("POST", "/api/query", q(two), 400, "reads more than 100 windows")
	if n := src.Counts(); n.Rows > 102 {
		t.Fatalf("a request refused at 100 windows read %d rows", n.Rows)
	}
	c.fails("POST", "/api/query", q(`{"metric":"devices.minute.count","aggregator":"sum","downsample":"1s-avg-zero","tags":{"entity":"device-001"}}`), 400, "more than the limit of 150 points")
	// Within the bounds: one entity, its 60 windows read once for two metrics, 120 points.
	c2 := tsdbClient{t, tsdbServer(t, st, table, Limits{MaxEntities: 2, MaxWindows: 60, MaxPoints: 120}).URL}
	if res := c2.query("/api/query", q(one, `{"metric":"devices.minute.mean","aggregator":"sum","tags":{"entity":"device-001"}}`)); len(res) != 2 {
		t.Fatalf("two metrics of one entity within the limits: %s", tagsOf(res))
	}
	c2.fails("POST", "/api/query", q(one, `{"metric":"devices.minute.mean","aggregator":"sum","rate":false,"tags":{"entity":"device-001"}}`, `{"metric":"devices.minute.temp_q","aggregator":"sum","tags":{"entity":"device-001"}}`), 400, "more than 120 data points")
}

// TestTSDBReadsOnlyTheAskedAggregates: a sub-query reads the cells of its metric's aggregate and
// each window's meta cell, not every aggregate of the window, in forward scans; two metrics of
// one set share one read. The answer is the same as before: oldest first, every window.
func TestTSDBReadsOnlyTheAskedAggregates(t *testing.T) {
	for name, open := range querytest.Stores(t) {
		t.Run(name, func(t *testing.T) {
			st, table := open(t)
			querytest.SeedTSDB(t, st, table, 4)
			src := &querytest.CountingSource{Source: st}
			c := tsdbClient{t, tsdbServer(t, src, table, Limits{}).URL}
			q := func(metrics ...string) []tsdbSeries {
				var subs []string
				for _, m := range metrics {
					subs = append(subs, fmt.Sprintf(`{"metric":"devices.minute.%s","aggregator":"sum","tags":{"entity":"device-002"}}`, m))
				}
				src.Reset()
				return c.query("/api/query", fmt.Sprintf(`{"start":%d,"end":%d,"msResolution":true,"queries":[%s]}`, sec0, sec1, strings.Join(subs, ",")))
			}
			res := q("count")
			if len(res) != 1 {
				t.Fatalf("one series wanted: %s", tagsOf(res))
			}
			if !slices.IsSorted(res[0].ordered) || len(res[0].ordered) != 60 {
				t.Fatalf("want 60 points oldest first, got %v", res[0].ordered)
			}
			for i := range int64(60) {
				if got := res[0].at(t, t0.Add(time.Duration(i)*time.Minute).UnixMilli()); got != float64(100+i) {
					t.Fatalf("window %d: count %v, want %d", i, got, 100+i)
				}
			}
			// 60 windows, each its count and its meta cell: not the mean and the quantiles too.
			if n := src.Counts(); n.Cells != 120 || n.Rows != 60 || n.Reversed != 0 {
				t.Fatalf("one metric: %d cells in %d rows, %d reversed scans; want 120 cells in 60 rows, forward", n.Cells, n.Rows, n.Reversed)
			}
			if res := q("count", "mean"); len(res) != 2 || src.Counts().Cells != 180 || src.Counts().Rows != 60 {
				n := src.Counts()
				t.Fatalf("two metrics: %d series, %d cells in %d rows; want 2 series from one read of 180 cells in 60 rows", len(res), n.Cells, n.Rows)
			}
		})
	}
}
