package opentsdb

import (
	"bytes"
	"encoding/json"
	"strconv"

	"github.com/abacus-stream/abacus/query/internal/jsonnum"
)

// encodeResults writes the answer: an array of {metric, tags, aggregateTags, [query], dps}, with
// dps an object of timestamp to value (or [[t, v], ...] with arrays) in time order.
func encodeResults(req *tsdbRequest, results []tsdbResult) []byte {
	var b bytes.Buffer
	n := 0
	for _, res := range results {
		n += len(res.pts)
	}
	b.Grow(256*len(results) + 24*n) // a point is 20-odd bytes: growing by doubling copied them twice over
	var num [32]byte
	b.WriteByte('[')
	for i, res := range results {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"metric":`)
		writeJSONValue(&b, res.metric)
		b.WriteString(`,"tags":`)
		writeJSONValue(&b, res.tags)
		b.WriteString(`,"aggregateTags":`)
		writeJSONValue(&b, res.aggTags)
		if req.showQuery {
			b.WriteString(`,"query":`)
			writeJSONValue(&b, res.query.echo())
		}
		b.WriteString(`,"dps":`)
		if req.arrays {
			b.WriteByte('[')
		} else {
			b.WriteByte('{')
		}
		for j, p := range res.pts {
			if j > 0 {
				b.WriteByte(',')
			}
			ts := p.t
			if !req.ms {
				ts /= 1000
			}
			// strconv, not fmt: a fleet panel writes 144,000 points.
			if req.arrays {
				b.WriteByte('[')
				b.Write(strconv.AppendInt(num[:0], ts, 10))
				b.WriteByte(',')
			} else {
				b.WriteByte('"')
				b.Write(strconv.AppendInt(num[:0], ts, 10))
				b.WriteString(`":`)
			}
			b.Write(jsonnum.Append(num[:0], p.v))
			if req.arrays {
				b.WriteByte(']')
			}
		}
		if req.arrays {
			b.WriteByte(']')
		} else {
			b.WriteByte('}')
		}
		b.WriteByte('}')
	}
	b.WriteString("]\n")
	return b.Bytes()
}

func writeJSONValue(b *bytes.Buffer, v any) {
	out, err := json.Marshal(v)
	if err != nil { // maps of strings and slices of strings always marshal
		out = []byte("null")
	}
	b.Write(out)
}

// echo is the sub-query as the answer repeats it with showQuery.
func (sq *subQuery) echo() map[string]any {
	filters := sq.filters
	if filters == nil {
		filters = []tagFilter{}
	}
	return map[string]any{"index": sq.index, "metric": sq.metric, "aggregator": sq.aggregator,
		"downsample": nullable(sq.dsText), "rate": sq.rate, "rateOptions": sq.rateOptions,
		"tags": sq.tags, "filters": filters, "explicitTags": sq.explicitTags}
}

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}
