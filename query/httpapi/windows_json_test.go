package httpapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/abacus-stream/abacus/query"
	"github.com/abacus-stream/abacus/totals"
)

// windowJSONOf is a window as encoding/json would write the API's window through windowJSON:
// what appendWindowsJSON must write, byte for byte.
func windowJSONOf(w query.Window) windowJSON {
	out := windowJSON{Start: w.Start.UnixMilli(), End: w.End.UnixMilli(), StartTime: w.Start.UTC().Format(time.RFC3339),
		Final: w.Final, Live: w.Live, Revision: w.Revision, Values: map[string]any{}}
	for name, v := range w.Values {
		switch v.Kind {
		case totals.KindInt:
			out.Values[name] = v.Int
		case totals.KindFloat:
			out.Values[name] = nullable(v.Float)
		case totals.KindQuantiles:
			m := map[string]any{}
			for _, q := range v.Quantiles {
				m[strconv.FormatFloat(q.Q, 'f', -1, 64)] = nullable(q.Value)
			}
			out.Values[name] = m
		default:
			out.Values[name] = v.Bytes
		}
	}
	return out
}

func nullable(x float64) any {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return nil
	}
	return x
}

// TestWindowsJSONIsWhatEncodingJSONWrites: windows of every kind of value (NaN and infinities,
// quantiles, custom bytes, nil ones, names JSON must escape), newest and oldest first, written by
// hand as encoding/json's Encoder writes them through windowJSON.
func TestWindowsJSONIsWhatEncodingJSONWrites(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 4))
	floats := []float64{0, math.Copysign(0, -1), 1.5, 1e-9, 3e21, 42, math.NaN(), math.Inf(1), math.Inf(-1)}
	for round := range 100 {
		var ws []query.Window
		start := time.UnixMilli(1_700_000_000_000 + rng.Int64N(1e9))
		for range rng.IntN(12) {
			start = start.Add(time.Duration(1+rng.IntN(5)) * time.Minute)
			w := query.Window{Entity: "e<&>", Set: "s", Start: start, End: start.Add(time.Minute), Final: rng.IntN(2) == 0,
				Live: rng.IntN(3) == 0, Revision: rng.Uint64(), Values: map[string]totals.Value{}}
			if rng.IntN(4) > 0 {
				w.Values["count"] = totals.Value{Name: "count", Kind: totals.KindInt, Int: rng.Int64() - rng.Int64()}
			}
			if rng.IntN(4) > 0 {
				f := rng.NormFloat64() * math.Pow(10, float64(rng.IntN(30)-15))
				if rng.IntN(3) == 0 {
					f = floats[rng.IntN(len(floats))]
				}
				w.Values["max <temp> & \"more\""] = totals.Value{Name: "max <temp> & \"more\"", Kind: totals.KindFloat, Float: f}
			}
			if rng.IntN(3) == 0 {
				// Mostly one list of quantiles (the writer remembers a column's keys), sometimes
				// another, shorter, or with a quantile twice (a map keeps the last).
				qs := []totals.Quantile{{Q: 0.99, Value: floats[rng.IntN(len(floats))]}, {Q: 0.5, Value: rng.Float64()}, {Q: 0.999, Value: rng.Float64()}}
				switch rng.IntN(6) {
				case 0:
					qs = qs[1:]
				case 1:
					qs = append(qs, totals.Quantile{Q: 0.5, Value: rng.Float64()})
				case 2:
					qs[0].Q = 0.9
				}
				w.Values["p"] = totals.Value{Name: "p", Kind: totals.KindQuantiles, Quantiles: qs}
			}
			if rng.IntN(3) == 0 {
				var b []byte
				if rng.IntN(3) > 0 {
					b = make([]byte, rng.IntN(5))
					for i := range b {
						b[i] = byte(rng.IntN(256))
					}
				}
				w.Values["custom"] = totals.Value{Name: "custom", Kind: totals.KindBytes, Bytes: b}
			}
			ws = append(ws, w)
		}
		c := query.ColumnsOf("e<&>", "s", ws)
		for _, oldestFirst := range []bool{true, false} {
			want := []windowJSON{}
			for _, w := range c.Windows(oldestFirst) {
				want = append(want, windowJSONOf(w))
			}
			var enc bytes.Buffer
			if err := json.NewEncoder(&enc).Encode(want); err != nil {
				t.Fatal(err)
			}
			got := append(appendWindowsJSON(nil, c, oldestFirst), '\n')
			if !bytes.Equal(got, enc.Bytes()) {
				t.Fatalf("round %d, oldest first %v:\n got %s\nwant %s", round, oldestFirst, got, enc.Bytes())
			}
			// And as a raw message inside the answer, the Encoder leaves it as it is.
			var raw bytes.Buffer
			if err := json.NewEncoder(&raw).Encode(json.RawMessage(got[:len(got)-1])); err != nil || !bytes.Equal(raw.Bytes(), got) {
				t.Fatalf("round %d: the encoder changed the raw windows (%v):\n%s\n%s", round, err, raw.Bytes(), got)
			}
		}
	}
}

// TestPageJSONIsWhatEncodingJSONWrites: the windows API's answer, written by hand, is byte for
// byte what encoding/json's Encoder writes of windowsJSON: names JSON must escape, no entities or
// none at all, next pages with a from, a to or both, truncated or not.
func TestPageJSONIsWhatEncodingJSONWrites(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	names := []string{"", "a", "dev-0001", "eu<&>west", "ünï\u2028", `q"b\`}
	for round := range 200 {
		w := windowsJSON{Topology: names[rng.IntN(len(names))], Set: names[rng.IntN(len(names))],
			Dimension: names[rng.IntN(len(names))], Truncated: rng.IntN(2) == 0}
		if rng.IntN(5) > 0 {
			w.Entities = map[string]json.RawMessage{}
			for range rng.IntN(4) {
				w.Entities[names[rng.IntN(len(names))]] = json.RawMessage(fmt.Sprintf(`[{"start":%d}]`, rng.Int64N(1e13)))
			}
		}
		for range rng.IntN(3) {
			if w.Next == nil {
				w.Next = map[string]map[string]int64{}
			}
			page := map[string]int64{}
			if rng.IntN(3) > 0 {
				page["from"] = rng.Int64N(1e13)
			}
			if rng.IntN(3) > 0 {
				page["to"] = -rng.Int64N(1e13)
			}
			w.Next[names[rng.IntN(len(names))]] = page
		}
		var enc bytes.Buffer
		if err := json.NewEncoder(&enc).Encode(w); err != nil {
			t.Fatal(err)
		}
		if got := append(w.appendJSON(nil), '\n'); !bytes.Equal(got, enc.Bytes()) {
			t.Fatalf("round %d:\n got %s\nwant %s", round, got, enc.Bytes())
		}
	}
}
