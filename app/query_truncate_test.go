package app

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/abacus-stream/abacus/query"
	"github.com/abacus-stream/abacus/schema"
	"github.com/abacus-stream/abacus/sinks"
	"github.com/abacus-stream/abacus/store"
	"github.com/abacus-stream/abacus/store/cellstore"
	"github.com/abacus-stream/abacus/totals"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestQuerySaysWhenTruncated: abacus query prints which entities -limit cut (from the page
// query.Reader.Page reads) and the flag that pages on by window start, a flag it reads back.
func TestQuerySaysWhenTruncated(t *testing.T) {
	ctx := context.Background()
	st, err := cellstore.Open("")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.EnsureTable(ctx, schema.TableLayout{Name: "agg", Family: "d", SaltBuckets: 2}); err != nil {
		t.Fatal(err)
	}
	at := func(min int) time.Time { return time.Date(2026, 11, 30, 10, min, 0, 0, time.UTC) }
	enc := &sinks.AggregatesEncoder{Table: "agg", Family: "d", SaltBuckets: 2}
	var cells []store.Cell
	for e, mins := range map[string][]int{"a": {1, 2, 3}, "b": {2, 3}} { // a: limit 2 + 1, b: exactly the limit
		for _, m := range mins {
			rec := totals.Record{Topology: "t", Set: "minute", Entity: e, Start: at(m).UnixMilli(), End: at(m + 1).UnixMilli(), Final: true,
				Values: []totals.Value{{Name: "count", Kind: totals.KindInt, Int: int64(m)}}}
			if cells, err = enc.Encode(&kgo.Record{Value: rec.Encode()}, cells); err != nil {
				t.Fatal(err)
			}
		}
	}
	if failed, err := st.Write(ctx, cells); err != nil || len(failed) > 0 {
		t.Fatalf("seed: %v %v", failed, err)
	}
	r, err := query.NewReader(ctx, st, "agg", "d")
	if err != nil {
		t.Fatal(err)
	}
	printed := func(o query.Options) string {
		t.Helper()
		p, err := r.Page(ctx, "minute", []string{"a", "b"}, o)
		if err != nil {
			t.Fatal(err)
		}
		if o.Limit > 0 && (len(p.Windows["a"]) != o.Limit || len(p.Windows["b"]) != 2) {
			t.Fatalf("%+v: %d and %d windows", o, len(p.Windows["a"]), len(p.Windows["b"]))
		}
		var out bytes.Buffer
		printTruncated(&out, p)
		return out.String()
	}
	if got, want := printed(query.Options{Limit: 2}), "a: truncated at -limit 2 windows; for the next ones repeat with -to 2026-11-30T10:02:00Z (or -limit 0 for all)\n"; got != want {
		t.Fatalf("printed %q, want %q", got, want)
	}
	if got, want := printed(query.Options{Limit: 2, OldestFirst: true}), "a: truncated at -limit 2 windows; for the next ones repeat with -from 2026-11-30T10:02:00.001Z (or -limit 0 for all)\n"; got != want {
		t.Fatalf("oldest first: printed %q, want %q", got, want)
	}
	// The flag it prints is one the command reads back.
	if got, err := parseTime("2026-11-30T10:02:00.001Z"); err != nil || got.UnixMilli() != at(2).UnixMilli()+1 {
		t.Fatalf("-from as printed: %v %v", got, err)
	}
	if got := printed(query.Options{}); got != "" {
		t.Fatalf("-limit 0 printed %q", got)
	}
}
