package topology

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	gokacodec "github.com/lovoo/goka/codec"
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

// richEvent has a field of each kind events carry, for the comparison with encoding/json.
type richEvent struct {
	Device  string            `json:"device"`
	TS      int64             `json:"ts"`
	Temp    float64           `json:"temp"`
	Count   uint16            `json:"count"`
	OK      bool              `json:"ok"`
	Ptr     *int32            `json:"ptr"`
	Tags    []string          `json:"tags"`
	Labels  map[string]string `json:"labels"`
	Quoted  int64             `json:"quoted,string"`
	At      time.Time         `json:"at"`
	Raw     json.RawMessage   `json:"raw"`
	Any     any               `json:"any"`
	Skipped string            `json:"-"`
	Nested  struct {
		Name string `json:"name"`
	} `json:"nested"`
	NoTag string
}

// FuzzJSONDecode: whatever a producer sends, Decode does not panic; what it accepts is valid JSON
// within the limits; and it accepts exactly what encoding/json accepts within them, decoded to the
// same value (the codec's decoder is another implementation of encoding/json's semantics, so a
// producer's events mean what the standard library would make of them).
func FuzzJSONDecode(f *testing.F) {
	for _, s := range []string{`{"device":"d","extra":{"a":[1,2,{"b":null}]}}`, `{"device":"\"[{"}`, `[[[[`, `{"a":"\\"}`, ``,
		`{"device":"a","device":"b"}`, `{"DEVICE":"upper","Device":"mixed"}`, "{\"device\":\"\xff\xfe\"}", `{"device":null,"extra":null}`,
		`{"device":"\ud800"}`, `{"device":"\u0000x"}`, `{"extra":{"n":1e400}}`, `{"extra":{"n":-0}}`, ` {"device":"d"} `, `{"device":"d"}x`,
		`{"ts":9223372036854775808}`, `{"ts":1e3}`, `{"ts":"1"}`, `{"count":70000}`, `{"count":-1}`, `{"ok":1}`, `{"quoted":"12"}`, `{"quoted":12}`,
		`{"at":"2026-12-04T10:00:00Z"}`, `{"at":"yesterday"}`, `{"raw":{"x":[1]}}`, `{"any":[1,"a",null,{"b":true}]}`, `{"Skipped":"x","-":"y"}`,
		`{"device":"a\\\\\"[","extra":{"k":"\\\\"}}`, `{"device":"\\\\\\\\","extra":{"a:b":"}"}}`, `{"device":"x\\`, `"`,
		`{"nested":{"NAME":"n"}}`, `{"notag":"lower","NoTag":"exact"}`, `{"tags":["a",null]}`, `{"labels":{"a":"b","a":"c"}}`, `{"ptr":null}`, `{"ptr":5}`} {
		f.Add([]byte(s))
	}
	c := JSONCodec[limitEvent]{MaxBytes: 4096, MaxDepth: 6, MaxFields: 20}
	rich := JSONCodec[richEvent]{MaxBytes: 4096, MaxDepth: 6, MaxFields: 40}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, lc := range []JSONCodec[limitEvent]{c, {MaxBytes: 4096, MaxDepth: 2, MaxFields: 3}} {
			if got, want := lc.checkJSON(b), checkJSONByteByByte(lc, b); (got == nil) != (want == nil) || (got != nil && got.Error() != want.Error()) {
				t.Fatalf("checkJSON(%q) = %v, byte by byte %v", b, got, want)
			}
		}
		sameAsEncodingJSON(t, c, b)
		sameAsEncodingJSON(t, rich, b)
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

// checkJSONByteByByte is checkJSON as first written, one byte at a time with a flag for strings:
// the reference the faster scan is compared with.
func checkJSONByteByByte[E any](c JSONCodec[E], data []byte) error {
	if len(data) > c.MaxBytes {
		return &JSONLimitError{Limit: "MaxBytes", Max: c.MaxBytes, What: fmt.Sprintf("%d bytes", len(data))}
	}
	depth, fields := 0, 0
	inString, escaped := false, false
	for _, b := range data {
		if inString {
			switch {
			case escaped:
				escaped = false
			case b == '\\':
				escaped = true
			case b == '"':
				inString = false
			}
			continue
		}
		switch b {
		case '"':
			inString = true
		case '{', '[':
			if depth++; depth > c.MaxDepth {
				return &JSONLimitError{Limit: "MaxDepth", Max: c.MaxDepth, What: fmt.Sprintf("nesting deeper than %d", c.MaxDepth)}
			}
		case '}', ']':
			depth--
		case ':':
			if fields++; fields > c.MaxFields {
				return &JSONLimitError{Limit: "MaxFields", Max: c.MaxFields, What: fmt.Sprintf("more than %d object members", c.MaxFields)}
			}
		}
	}
	return nil
}

// sameAsEncodingJSON fails when c decodes b otherwise than encoding/json.Unmarshal does: one
// accepts what the other refuses (a refusal by c's limits aside), or the values differ.
func sameAsEncodingJSON[E any](t *testing.T, c JSONCodec[E], b []byte) {
	t.Helper()
	var ref E
	refErr := json.Unmarshal(b, &ref)
	v, err := c.Decode(b)
	var le *JSONLimitError
	switch {
	case errors.As(err, &le):
	case err != nil && refErr == nil:
		t.Fatalf("refused %q (%v), which encoding/json decodes as %+v", b, err, ref)
	case err == nil && refErr != nil:
		t.Fatalf("accepted %q as %+v, which encoding/json refuses: %v", b, v, refErr)
	case err == nil && !reflect.DeepEqual(v.(E), ref):
		t.Fatalf("decoded %q as %+v, encoding/json as %+v", b, v, ref)
	}
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

// BenchmarkJSONDecode decodes a device reading of examples/devices' shape (about 110 bytes) with
// the default limits: the decode every event pays in the processor and in the facts sink.
func BenchmarkJSONDecode(b *testing.B) {
	type reading struct {
		Device   string  `json:"device"`
		Sensor   string  `json:"sensor"`
		Time     int64   `json:"ts"`
		Temp     float64 `json:"temp"`
		Humidity float64 `json:"humidity"`
		Kind     string  `json:"kind"`
	}
	data := []byte(`{"device":"device-0042","ts":1796397842931,"temp":17.4,"humidity":48.5,"kind":"reading","sensor":"s1"}`)
	c := JSON[reading]()
	b.Run("limits", func(b *testing.B) {
		for b.Loop() {
			if err := c.checkJSON(data); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := c.Decode(data); err != nil {
				b.Fatal(err)
			}
		}
	})
}
