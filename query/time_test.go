package query

import (
	"strconv"
	"testing"
	"time"
)

// FuzzParseTime: the time parameters of /api/v1 and the CLI never panic, and a plain number is
// milliseconds. (The OpenTSDB API's own time forms have their fuzz target in query/opentsdb.)
func FuzzParseTime(f *testing.F) {
	for _, s := range []string{"", "-6h", "1700000000000", "2026-11-30T12:00:00Z", "2026-11-30T12:00:00.5+02:00", "1h-ago",
		"9223372036854775807y-ago", "1364410924.250", "2026/11/30-12:00:00", "2026/11/30 12:00", "now", "-9223372036854775808ns", "1e9"} {
		f.Add(s)
	}
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, v string) {
		got, err := ParseTime(v, now)
		if ms, perr := strconv.ParseInt(v, 10, 64); perr == nil && (err != nil || got.UnixMilli() != ms) {
			t.Fatalf("ParseTime(%q) = %v, %v; want %d ms", v, got, err, ms)
		}
	})
}
