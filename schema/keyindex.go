package schema

import (
	"bytes"
	"errors"
	"fmt"
	"time"
)

// The key index is a second, small table beside an aggregates table: one row per (aggregate set,
// key) that has windows, written by the aggregates sink the first time it writes a window of that
// key (and again about once a day of event time, so that a table TTL expires an index row only
// after the key's windows). Listing the keys of a set (a dashboard's entity picker, a wildcard, a
// rollup's regions) is then one short scan of it in key order, where the aggregates table alone
// can only be walked from one key's rows to the next, a few reads per key.
//
//	index row:  set | key      (both escaped and terminated as in row keys; no salt: one scan
//	                            lists a set in order, and the table takes a write per key per day)
//	qualifier:  KeyIndexQualifier, an empty value
//	timestamp:  KeyIndexTimestamp(window end): the same for every window of a day, so a replay
//	            rewrites identical cells and the newest is that of the key's newest window
//
//	every-set row: KeyIndexEverySet | key, the same cell, written with each set's row of the key
//
// The index is only trusted once it is complete: KeyIndexMarkerRow holds KeyIndexMarkerQualifier
// when every key of the aggregates table has its row, written when the index was made beside an
// empty aggregates table or by a rebuild (`abacus admin reindex`) that walked the whole table.
// Readers without the marker (or without the table) walk the aggregates table as before.

// KeyIndexTable is the key index table of an aggregates table.
func KeyIndexTable(aggregates string) string { return aggregates + "_keys" }

// KeyIndexQualifier is the qualifier of an index row's one cell.
const KeyIndexQualifier = "k"

// KeyIndexMarkerQualifier is the marker row's qualifier; its value is KeyIndexVersion.
const KeyIndexMarkerQualifier = "complete"

// KeyIndexVersion is the marker's value: the layout of index rows it vouches for. Version 1 has a
// row per set and key; version 2 adds a row per key under KeyIndexEverySet, so that listing the
// keys of every set (the OpenTSDB API's tag value suggestion) is one scan, not two per set.
// Readers take a version-1 index as complete for a set's keys.
const KeyIndexVersion = 2

// KeyIndexEverySet is the set name of the index rows that list every key of any set, one row per
// key (KeyIndexRow(KeyIndexEverySet, key)). It is not valid UTF-8, so no set has it (topology
// refuses such names), and its rows sort after every set's: a reader that lists set by set stops
// before them, and one that knows no version 2 takes them for one more set, whose keys are all
// keys anyway.
const KeyIndexEverySet = "\xff"

// KeyIndexMarkerTimestamp is the marker cell's timestamp. It must outlive any TTL the table has
// (a cell expires once its timestamp is a TTL in the past), so it is far in the future; it is a
// constant so that writing the marker again rewrites the same cell.
const KeyIndexMarkerTimestamp = int64(1) << 62

// KeyIndexMarkerRow is the marker's row: one 0x00 byte, which sorts before every index row (an
// escaped set name starts with a byte other than 0x00, or with 0x00 0xFF).
var KeyIndexMarkerRow = []byte{0}

// KeyIndexRefresh is how much event time passes before the sink writes a key's index row again:
// a day, or a quarter of the table's TTL when that is shorter, so that the row's timestamp
// (KeyIndexTimestamp) keeps ahead of the key's newest window and a TTL never expires the row
// before the windows it lists.
func KeyIndexRefresh(ttl time.Duration) int64 {
	r := int64(24 * time.Hour / time.Millisecond)
	if ttl > 0 {
		r = min(r, max(int64(ttl/time.Millisecond)/4, 1))
	}
	return r
}

// KeyIndexTimestamp is the timestamp of the index cell written for a window ending at end (ms):
// end rounded down to its refresh period (KeyIndexRefresh), plus two periods. It is at least a
// period later than end, so the row outlives the window under a TTL, and at most two periods
// later, so a key whose windows all expired leaves the index within two periods. Every window of
// one period gives the same timestamp: a replay rewrites the same cell.
func KeyIndexTimestamp(end int64, ttl time.Duration) int64 {
	r := KeyIndexRefresh(ttl)
	p := end / r
	if end < 0 && end%r != 0 {
		p--
	}
	return (p + 2) * r
}

// KeyIndexSetPrefix is the row prefix of every index row of set.
func KeyIndexSetPrefix(set string) []byte { return AppendComponent(nil, set) }

// KeyIndexRow is the index row of key in set.
func KeyIndexRow(set, key string) []byte { return AppendComponent(KeyIndexSetPrefix(set), key) }

// ParseKeyIndexRow reads set and key back from an index row.
func ParseKeyIndexRow(row []byte) (set, key string, err error) {
	if bytes.Equal(row, KeyIndexMarkerRow) {
		return "", "", errors.New("schema: the key index's marker row is not an index row")
	}
	set, rest, err := ReadComponent(row)
	if err != nil {
		return "", "", err
	}
	if key, rest, err = ReadComponent(rest); err != nil {
		return "", "", err
	}
	if set == "" || key == "" || len(rest) != 0 {
		return "", "", fmt.Errorf("schema: key index row %x is not set | key", row)
	}
	return set, key, nil
}

// KeyIndexLayout is the layout of the key index of the aggregates table laid out by agg: the
// same family, versions, TTL and compression, one region (KeyIndexTable's rows are not salted),
// and a row bloom filter.
func KeyIndexLayout(agg TableLayout) TableLayout {
	return TableLayout{Name: KeyIndexTable(agg.Name), Family: agg.Family, SaltBuckets: 1, Versions: agg.Versions,
		TTL: agg.TTL, BloomFilter: "ROW", Compression: agg.Compression}
}
