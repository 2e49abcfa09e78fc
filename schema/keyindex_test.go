package schema

import (
	"bytes"
	"sort"
	"testing"
	"time"
)

func TestKeyIndexRows(t *testing.T) {
	keys := []string{"a", "a\x00", "a\x01", "ab", "b", "\x00x", "device-00001", "région"}
	var rows [][]byte
	for _, k := range keys {
		row := KeyIndexRow("minute", k)
		set, key, err := ParseKeyIndexRow(row)
		if err != nil || set != "minute" || key != k {
			t.Fatalf("ParseKeyIndexRow(KeyIndexRow(minute, %q)) = %q, %q, %v", k, set, key, err)
		}
		if !bytes.HasPrefix(row, KeyIndexSetPrefix("minute")) || bytes.HasPrefix(row, KeyIndexSetPrefix("min")) {
			t.Fatalf("row %x of %q: set prefixes do not separate sets", row, k)
		}
		if bytes.Compare(row, KeyIndexMarkerRow) <= 0 {
			t.Fatalf("row %x sorts before the marker row", row)
		}
		rows = append(rows, row)
	}
	// Rows sort as their keys do, so a scan lists a set's keys in order.
	sort.Slice(rows, func(i, j int) bool { return bytes.Compare(rows[i], rows[j]) < 0 })
	sorted := append([]string(nil), keys...)
	sort.Strings(sorted)
	for i, row := range rows {
		if _, key, _ := ParseKeyIndexRow(row); key != sorted[i] {
			t.Fatalf("row %d in byte order holds %q, want %q (keys in order %q)", i, key, sorted[i], sorted)
		}
	}
	for _, bad := range [][]byte{KeyIndexMarkerRow, AppendComponent(nil, "minute"), append(KeyIndexRow("m", "k"), 7), AppendComponent(AppendComponent(nil, ""), "k")} {
		if _, _, err := ParseKeyIndexRow(bad); err == nil {
			t.Errorf("ParseKeyIndexRow(%x) accepted a row that is not set | key", bad)
		}
	}
}

// TestKeyIndexTimestamp: every window of one refresh period gives the same timestamp, at least a
// period and at most two after the window end, and later windows never give an earlier one.
func TestKeyIndexTimestamp(t *testing.T) {
	day := int64(24 * time.Hour / time.Millisecond)
	for _, ttl := range []time.Duration{0, 30 * 24 * time.Hour, 2 * time.Hour, time.Millisecond} {
		r := KeyIndexRefresh(ttl)
		if want := day; ttl == 0 && r != want {
			t.Fatalf("refresh without TTL %d, want a day %d", r, want)
		}
		if ttl > 0 && ttl < 4*24*time.Hour && r != max(int64(ttl/time.Millisecond)/4, 1) {
			t.Fatalf("TTL %v: refresh %d, want a quarter of the TTL", ttl, r)
		}
		prev := int64(-1 << 62)
		ends := []int64{-3 * r, -r - 1, -1, 0, 1, r - 1, r, r + 1, 5*r + r/2, 1796351598324}
		sort.Slice(ends, func(i, j int) bool { return ends[i] < ends[j] })
		for _, end := range ends {
			ts := KeyIndexTimestamp(end, ttl)
			if ts < end+r || ts > end+2*r {
				t.Fatalf("TTL %v: timestamp of window end %d is %d, want within [end+%d, end+%d]", ttl, end, ts, r, 2*r)
			}
			if ts < prev {
				t.Fatalf("TTL %v: window end %d gives %d, earlier than %d of an earlier end", ttl, end, ts, prev)
			}
			prev = ts
			if p := end - ((end%r)+r)%r; KeyIndexTimestamp(p, ttl) != ts || KeyIndexTimestamp(p+r-1, ttl) != ts {
				t.Fatalf("TTL %v: windows of the period of %d give different timestamps", ttl, end)
			}
		}
	}
	if KeyIndexMarkerTimestamp <= KeyIndexTimestamp(1<<50, 0) {
		t.Fatal("the marker's timestamp is not beyond any window's")
	}
}
