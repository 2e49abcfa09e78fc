package querybench

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/abacus-stream/abacus/internal/testenv"
	"github.com/abacus-stream/abacus/query"
	"github.com/abacus-stream/abacus/schema"
	"github.com/abacus-stream/abacus/store/hbasestore"
)

// TestLoadSmall loads a small dataset with the benchmark's own loader (eight writers, as for the
// fleet) into the real HBase and reads windows back through the query reader: each is the one the
// loader meant. Then it asks every panel of the dashboards benchmark over it, as
// BenchmarkPanels does (one round). The main stage runs it under -race: the loader once shared one sink encoder
// among its writers, which raced and wrote windows the reader refused ("window of entity ... is
// not valid") on a fresh table.
func TestLoadSmall(t *testing.T) {
	c := testenv.HBaseClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s := size{entities: 24, days: 1}
	for _, tbl := range []string{s.loadedTable(), s.table(), schema.KeyIndexTable(s.table())} {
		_ = c.Admin().DisableTable(ctx, tbl) // a load of an earlier run: load this one afresh
		_ = c.Admin().DeleteTable(ctx, tbl)
		testenv.DropTableAtEnd(t, c, tbl)
	}
	stats, loaded, err := load(ctx, c, s, func(p string) { t.Log(p) })
	if err != nil || !loaded {
		t.Fatalf("load: %v (loaded %v)", err, loaded)
	}
	if want := int64(s.entities * s.minutes() * 67 / 60); stats.rows < want {
		t.Fatalf("loaded %d rows, want at least %d (every entity's minutes, 10 minutes and hours)", stats.rows, want)
	}
	st, err := hbasestore.New(c, hbasestore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := query.NewReader(ctx, st, s.table(), family)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range []int{0, 7, s.entities - 1} {
		ws, err := r.Windows(ctx, setMinute, entityName(e), query.Options{Limit: 30, NoLive: true})
		if err != nil {
			t.Fatalf("entity %d: %v", e, err)
		}
		if len(ws) != 30 {
			t.Fatalf("entity %d: %d windows, want the newest 30", e, len(ws))
		}
		for _, w := range ws {
			m := int((w.Start.UnixMilli() - s.start()) / 60_000)
			if want := windowAt(e, m); w.Values["count"].Int != want.count || w.Values["sum_temp"].Float != want.sum {
				t.Fatalf("entity %d minute %d: count %d sum %v, the loader wrote %d and %v", e, m,
					w.Values["count"].Int, w.Values["sum_temp"].Float, want.count, want.sum)
			}
		}
		// The coarser sets hold the merge of the minutes inside each of their windows.
		for set, width := range map[string]int{setTen: 10, setHour: 60} {
			ws, err := r.Windows(ctx, set, entityName(e), query.Options{Limit: 3, NoLive: true})
			if err != nil || len(ws) != 3 {
				t.Fatalf("entity %d: %d windows of %s (%v), want the newest 3", e, len(ws), set, err)
			}
			for _, w := range ws {
				m := int((w.Start.UnixMilli() - s.start()) / 60_000)
				if mx := maxOver(e, m, width); !w.Final || w.Values["max_temp"].Float != mx {
					t.Fatalf("entity %d %s at minute %d: %+v, want final with max_temp %v", e, set, m, w, mx)
				}
			}
		}
	}

	// The dashboards benchmark over it, one round from 1 and from 16 dashboards: the harness that
	// measures abacus beside OpenTSDB keeps working, and every answer of every panel is right.
	t.Setenv("ABACUS_BENCH_ROUNDS", "1")
	pb := newPanelBench(t, s)
	defer pb.close()
	lat, timeouts, _, err := measure(t, func(pick int) []panel { return pb.ex.panels(pick) }, pb.fetch, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pb.ex.panels(0) {
		if n, to := len(lat[1][p.name])+len(lat[16][p.name]), timeouts[1][p.name]+timeouts[16][p.name]; n != 17 || to > 0 {
			t.Fatalf("panel %q: %d answers timed, %d timed out; want 17 and none", p.name, n, to)
		}
	}
}

// TestDataPointsReadAsJSONReadsThem: the checks' reader of "dps" objects gives what encoding/json
// gives, in the order written, and falls back to it for what it does not read itself.
func TestDataPointsReadAsJSONReadsThem(t *testing.T) {
	for _, in := range []string{`{}`, `{"1700000000":1.5,"1700000060":null,"1700000120":-3e-7}`,
		`{ "1700000000" : 2 , "1700000060":4}`, `{"1":1,"2":2}`} {
		var got dataPoints
		if err := json.Unmarshal([]byte(in), &got); err != nil {
			t.Fatalf("%s: %v", in, err)
		}
		var want map[string]float64
		if err := json.Unmarshal([]byte(in), &want); err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) {
			t.Fatalf("%s: %v, want %v", in, got, want)
		}
		for i, p := range got {
			if v, ok := want[strconv.FormatInt(p.sec, 10)]; !ok || v != p.v || (i > 0 && got[i-1].sec >= p.sec) {
				t.Fatalf("%s: %v, want %v in order", in, got, want)
			}
		}
	}
	var bad dataPoints
	if err := json.Unmarshal([]byte(`{"x":1}`), &bad); err == nil {
		t.Fatalf("a key that is not a time read as %v", bad)
	}
}
