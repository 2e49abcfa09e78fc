package schema

import (
	"strings"
	"testing"
	"time"
)

// TestDrift: every family setting that differs from the layout is named, with both values; what
// HBase leaves out is its default; a table as the layout asks has none.
func TestDrift(t *testing.T) {
	l := TableLayout{Name: "t", Family: "d", SaltBuckets: 4, TTL: 24 * time.Hour, Compression: "SNAPPY"}
	if d := l.Drift(l.FamilySettings()); len(d) != 0 {
		t.Fatalf("the layout's own settings drift: %v", d)
	}
	// As HBase describes a table made by hand: defaults left out, TTL FOREVER.
	got := l.Drift(map[string]string{"TTL": "FOREVER", "VERSIONS": "1"})
	want := []string{
		"table t family d: TTL is forever, the configuration says 24h0m0s",
		"table t family d: COMPRESSION is NONE, the configuration says SNAPPY",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("drift:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	plain := TableLayout{Name: "t", Family: "d", SaltBuckets: 4}
	if d := plain.Drift(map[string]string{"TTL": "2147483647", "BLOOMFILTER": "row"}); len(d) != 0 {
		t.Fatalf("HBase's defaults drift from a layout that asks for them: %v", d)
	}
	if d := plain.Drift(map[string]string{"VERSIONS": "5", "BLOOMFILTER": "ROWCOL"}); len(d) != 2 {
		t.Fatalf("versions and bloom filter drift: %v", d)
	}
	bad := TableLayout{Name: "t", Family: "d", SaltBuckets: 4, Compression: "SNAPY"}
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), `compression "SNAPY"`) {
		t.Fatalf("unknown codec: %v", err)
	}
}
