package schema

import (
	"bytes"
	"encoding/hex"
	"sort"
	"testing"
)

func TestEntityPrefixDoesNotMatchLongerEntity(t *testing.T) {
	for _, n := range []int{1, 16} {
		// Same bucket is forced with n=1; with 16 the salt may differ as well.
		a := EntityPrefix("ab1", n)
		row := FactRow("ab12", 1000, n)
		if bytes.HasPrefix(row, a) {
			t.Fatalf("buckets=%d: fact row of ab12 %x has the prefix of ab1 %x", n, row, a)
		}
		agg := AggregateRow("ab12", "hourly", 0, n)
		if bytes.HasPrefix(agg, AggregatePrefix("ab1", "hourly", n)) || bytes.HasPrefix(agg, a) {
			t.Fatalf("buckets=%d: aggregate row of ab12 matches ab1", n)
		}
		if !bytes.HasPrefix(FactRow("ab1", 5, n), a) {
			t.Fatal("fact row of ab1 lacks its own prefix")
		}
	}
}

func TestRowsRoundTripAndSortNewestFirst(t *testing.T) {
	entities := []string{"", "a", "a\x00b", "\x00", "dev-17", "ünï"}
	for _, e := range entities {
		var rows [][]byte
		for _, ts := range []int64{0, 1, 60_000, 1_700_000_000_000} {
			row := AggregateRow(e, "set\x00x", ts, 16)
			ge, gs, gt, err := ParseAggregateRow(row)
			if err != nil || ge != e || gs != "set\x00x" || gt != ts {
				t.Fatalf("aggregate row %x parsed as %q %q %d %v", row, ge, gs, gt, err)
			}
			fe, ft, err := ParseFactRow(FactRow(e, ts, 16))
			if err != nil || fe != e || ft != ts {
				t.Fatalf("fact row parsed as %q %d %v", fe, ft, err)
			}
			rows = append(rows, row)
		}
		sorted := append([][]byte(nil), rows...)
		sort.Slice(sorted, func(i, j int) bool { return bytes.Compare(sorted[i], sorted[j]) < 0 })
		for i := range rows {
			if !bytes.Equal(sorted[i], rows[len(rows)-1-i]) {
				t.Fatalf("entity %q: rows do not sort newest first", e)
			}
		}
	}
}

func TestSaltSpreadsAndSplits(t *testing.T) {
	const n = 16
	seen := map[byte]int{}
	for i := range 1000 {
		s := Salt("device-"+string(rune('a'+i%26))+string(rune('0'+i/26%10))+string(rune('0'+i/260)), n)
		if s >= n {
			t.Fatalf("salt %d out of range", s)
		}
		seen[s]++
	}
	if len(seen) != n {
		t.Fatalf("1000 entities hit %d of %d buckets", len(seen), n)
	}
	keys := SaltSplitKeys(n)
	if len(keys) != n-1 || keys[0][0] != 1 || keys[n-2][0] != n-1 {
		t.Fatalf("split keys %x", keys)
	}
}

func FuzzParseAggregateRow(f *testing.F) {
	f.Add(AggregateRow("dev", "hourly", 123, 16))
	f.Add([]byte{0, 0, 1, 0, 1, 1, 2, 3, 4, 5, 6, 7, 8})
	f.Fuzz(func(t *testing.T, row []byte) {
		e, s, ts, err := ParseAggregateRow(row)
		if err != nil {
			return
		}
		if again := AggregateRow(e, s, ts, 1); !bytes.Equal(again[1:], row[1:]) {
			t.Fatalf("row %x parsed to %q %q %d which encodes to %x", row, e, s, ts, again)
		}
	})
}

// TestSaltIsStable pins salt values: tables written by earlier versions keep their rows only if
// an entity's bucket never changes, whatever murmur3 implementation computes it.
// TestFactRowIsStable: fact and window rows already written must be found again, byte for byte
// (rows written before the Append forms existed), and stay within their Max...Len bounds.
func TestFactRowIsStable(t *testing.T) {
	for _, c := range []struct {
		entity string
		ts     int64
		want   string
	}{{"a\x00b", 1, "066100ff6200017ffffffffffffffe"}, {"device-0042", 1796397842931, "026465766963652d3030343200017ffffe5dbe583e0c"}} {
		row := FactRow(c.entity, c.ts, 16)
		if got := hex.EncodeToString(row); got != c.want {
			t.Errorf("FactRow(%q, %d) = %s, tables hold %s", c.entity, c.ts, got, c.want)
		}
		if got := AppendFactRow([]byte("x"), c.entity, c.ts, 16); string(got[1:]) != string(row) {
			t.Errorf("AppendFactRow(%q) = %x, want x then %x", c.entity, got, row)
		}
	}
	for _, e := range []string{"", "\x00\x00\x00", "ab", "ünï"} {
		if n := len(FactRow(e, 5, 16)); n > MaxFactRowLen(e) {
			t.Errorf("FactRow(%q) has %d bytes, MaxFactRowLen says %d", e, n, MaxFactRowLen(e))
		}
		if n := len(AggregateRow(e, e+"\x00s", 5, 16)); n > MaxAggregateRowLen(e, e+"\x00s") {
			t.Errorf("AggregateRow(%q) has %d bytes, MaxAggregateRowLen says %d", e, n, MaxAggregateRowLen(e, e+"\x00s"))
		}
	}
	for _, c := range []struct {
		entity, set string
		start       int64
		want        string
	}{{"a\x00b", "set", 60000, "066100ff62000173657400017fffffffffff159f"},
		{"device-0042", "minute", 1796397840000, "026465766963652d3030343200016d696e75746500017ffffe5dbe58497f"}} {
		if got := hex.EncodeToString(AggregateRow(c.entity, c.set, c.start, 16)); got != c.want {
			t.Errorf("AggregateRow(%q, %q, %d) = %s, tables hold %s", c.entity, c.set, c.start, got, c.want)
		}
	}
}

func TestSaltIsStable(t *testing.T) {
	for _, c := range []struct {
		entity    string
		of16, of7 byte
	}{{"device-1", 13, 6}, {"sensor-42", 9, 1}, {"", 0, 0}, {"ünïcode", 12, 5}} {
		if got16, got7 := Salt(c.entity, 16), Salt(c.entity, 7); got16 != c.of16 || got7 != c.of7 {
			t.Errorf("Salt(%q) = %d of 16, %d of 7; tables hold %d and %d", c.entity, got16, got7, c.of16, c.of7)
		}
	}
}

// TestFactQualifierRoundTrip: backfill reads each fact's source position back from its qualifier,
// whatever its type holds, and refuses what a facts sink never wrote.
func TestFactQualifierRoundTrip(t *testing.T) {
	for _, c := range []struct {
		typ       string
		partition int32
		offset    int64
	}{{"", 0, 0}, {"reading", 3, 1162}, {"a:b:1:2", 2147483647, 9223372036854775807}} {
		typ, p, o, err := ParseFactQualifier(AppendFactQualifier(nil, c.typ, c.partition, c.offset))
		if err != nil || typ != c.typ || p != c.partition || o != c.offset {
			t.Errorf("ParseFactQualifier(AppendFactQualifier(%q, %d, %d)) = %q, %d, %d, %v", c.typ, c.partition, c.offset, typ, p, o, err)
		}
	}
	for _, q := range []string{"", "x", "x:1", ":1", "t:-1:2", "t:1:x", "t:1:-2", "t:2147483648:1"} {
		if _, _, _, err := ParseFactQualifier([]byte(q)); err == nil {
			t.Errorf("ParseFactQualifier(%q) took it", q)
		}
	}
}
