package topology

import (
	"encoding/json"
	"errors"
	gokacodec "github.com/lovoo/goka/codec"
	"strings"
	"testing"
)

type limitEvent struct {
	Device string         `json:"device"`
	Extra  map[string]any `json:"extra"`
}

// TestJSONCodecLimits: a value past a limit is refused before parsing, with an error naming the
// limit; one at the limit is decoded.
func TestJSONCodecLimits(t *testing.T) {
	nested := func(n int) string {
		return `{"device":"d","extra":{"x":` + strings.Repeat("[", n-2) + strings.Repeat("]", n-2) + `}}`
	}
	members := func(n int) string {
		var b strings.Builder
		b.WriteString(`{"device":"d","extra":{`)
		for i := range n - 2 {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(`"k` + strings.Repeat("x", i%7) + `":` + "1")
		}
		b.WriteString("}}")
		return b.String()
	}
	c := JSONCodec[limitEvent]{MaxBytes: 200, MaxDepth: 5, MaxFields: 6}
	for _, tc := range []struct {
		name, in, want string
	}{
		{"at the depth limit", nested(5), ""},
		{"one level deeper", nested(6), "nesting deeper than 5, over the limit of 5 (topology.JSONCodec.MaxDepth)"},
		{"brackets in strings do not count", `{"device":"[[[[[[[[{{{{{{\"[[[[[[[","extra":{}}`, ""},
		{"at the member limit", members(6), ""},
		{"one member more", members(7), "more than 6 object members, over the limit of 6 (topology.JSONCodec.MaxFields)"},
		{"colons in strings do not count", `{"device":"a:b:c:d:e:f:g:h","extra":{}}`, ""},
		{"too long", `{"device":"` + strings.Repeat("x", 200) + `"}`, "213 bytes, over the limit of 200 (topology.JSONCodec.MaxBytes)"},
		{"not JSON", `{"device":`, "json decode topology.limitEvent: unexpected end of JSON input"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, err := c.Decode([]byte(tc.in))
			if tc.want == "" {
				if err != nil || v.(limitEvent).Device == "" {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
			var le *JSONLimitError
			if strings.Contains(tc.want, "topology.JSONCodec.") != errors.As(err, &le) {
				t.Fatalf("JSONLimitError %v for %v", le, err)
			}
		})
	}
	// The defaults apply to the zero codec: a 1 MiB value passes, one byte more does not; 32
	// levels pass, 33 do not.
	d := JSON[limitEvent]()
	ok := `{"device":"` + strings.Repeat("x", DefaultJSONMaxBytes-13) + `"}`
	if _, err := d.Decode([]byte(ok)); err != nil {
		t.Fatalf("%d bytes: %v", len(ok), err)
	}
	if _, err := d.Decode([]byte(ok + " ")); err == nil || !strings.Contains(err.Error(), "MaxBytes") {
		t.Fatalf("%d bytes: %v", len(ok)+1, err)
	}
	if _, err := d.Decode([]byte(nested(DefaultJSONMaxDepth))); err != nil {
		t.Fatalf("depth %d: %v", DefaultJSONMaxDepth, err)
	}
	if _, err := d.Decode([]byte(nested(DefaultJSONMaxDepth + 1))); err == nil || !strings.Contains(err.Error(), "MaxDepth") {
		t.Fatalf("depth %d: %v", DefaultJSONMaxDepth+1, err)
	}
}

// FuzzJSONDecode: whatever a producer sends, Decode does not panic, and what it accepts is valid
// JSON within the limits.
func FuzzJSONDecode(f *testing.F) {
	for _, s := range []string{`{"device":"d","extra":{"a":[1,2,{"b":null}]}}`, `{"device":"\"[{"}`, `[[[[`, `{"a":"\\"}`, ``} {
		f.Add([]byte(s))
	}
	c := JSONCodec[limitEvent]{MaxBytes: 4096, MaxDepth: 6, MaxFields: 20}
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := c.Decode(b)
		if err != nil {
			return
		}
		if !json.Valid(b) {
			t.Fatalf("accepted invalid JSON %q as %+v", b, v)
		}
		if depth := jsonDepth(t, b); depth > 6 {
			t.Fatalf("accepted depth %d: %q", depth, b)
		}
	})
}

// jsonDepth measures nesting with the standard library's tokenizer, independently of checkJSON.
func jsonDepth(t *testing.T, b []byte) int {
	dec := json.NewDecoder(strings.NewReader(string(b)))
	depth, most := 0, 0
	for {
		tok, err := dec.Token()
		if err != nil {
			return most
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			depth++
			most = max(most, depth)
		case json.Delim('}'), json.Delim(']'):
			depth--
		}
	}
}

// goka's codecs are topology Codecs as they are: a source may be declared with one.
var _ Codec = new(gokacodec.Bytes)
var _ Codec = new(gokacodec.String)
