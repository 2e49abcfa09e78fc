// Package schema is the layout of abacus's HBase tables: the row keys, qualifiers and cell values
// that the sinks write and the queries read, and the table layout (salt buckets, family) a
// deployment creates. It is the one place both sides agree on bytes.
//
// It is a leaf: it imports no abacus package but totals (the values it encodes), never talks to a
// store, and a change to any encoding here must stay readable by queries of cells already written.
//
// # Row keys
//
// Row keys spread entities over N salt buckets (one leading byte), so that writes for many entities
// hit every region of a table pre-split on the bucket boundaries, while all rows of one entity stay
// contiguous and can be read with one prefix scan.
//
//	aggregate row: salt | entity | aggregate set | reversed window start
//	fact row:      salt | entity | reversed event time
//
// salt = murmur3_32(entity) mod N. Entity and set are written escaped and terminated (0x00 becomes
// 0x00 0xFF, the end is 0x00 0x01), so a prefix for entity "ab1" never matches "ab12" and the
// components can be read back unambiguously. Reversed time is MaxInt64 - ms as 8 big-endian bytes:
// the newest window or event of an entity sorts first.
//
// # Cells
//
// Aggregate cells. A window row holds one cell per aggregate, qualified by the aggregate's name,
// plus MetaQualifier; every cell's timestamp is the window end (exclusive, ms), so every firing of
// a window rewrites the same cells. Values have fixed widths after a kind byte, readable by HBase's
// Java Bytes.toLong / toDouble:
//
//	kind 1 int:       1 byte 0x01, 8 bytes int64 big-endian
//	kind 2 float:     1 byte 0x02, 8 bytes IEEE 754 float64 big-endian
//	kind 3 quantiles: 1 byte 0x03, then per quantile 8 bytes q and 8 bytes value (float64 BE)
//	kind 4 bytes:     1 byte 0x04, the bytes
//
// MetaQualifier holds 1 byte of flags (bit 0: final) and 8 bytes of revision (uint64 BE).
package schema

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/twmb/murmur3"
)

// MaxSaltBuckets is the most buckets a one-byte salt allows.
const MaxSaltBuckets = 256

// Salt returns the bucket of an entity among n. n below 1 counts as one bucket, so a zero layout
// gives bucket 0 rather than a division by zero.
func Salt(entity string, n int) byte {
	if n <= 1 {
		return 0
	}
	return byte(murmur3.Sum32([]byte(entity)) % uint32(n))
}

// SaltSplitKeys returns the n-1 split keys that pre-split a table into one region per bucket.
func SaltSplitKeys(n int) [][]byte {
	keys := make([][]byte, 0, n-1)
	for i := 1; i < n; i++ {
		keys = append(keys, []byte{byte(i)})
	}
	return keys
}

// AppendComponent appends s escaped and terminated.
func AppendComponent(dst []byte, s string) []byte {
	if strings.IndexByte(s, 0) < 0 { // nothing to escape, as in nearly every key
		return append(append(dst, s...), 0, 1)
	}
	for i := 0; i < len(s); i++ {
		if s[i] == 0 {
			dst = append(dst, 0, 0xFF)
		} else {
			dst = append(dst, s[i])
		}
	}
	return append(dst, 0, 1)
}

// ReadComponent reads one component written by AppendComponent from the front of b and returns
// it with the rest of b.
func ReadComponent(b []byte) (string, []byte, error) {
	// Nearly every component has nothing escaped: one string, no buffer.
	if i := bytes.IndexByte(b, 0); i >= 0 && i+1 < len(b) && b[i+1] == 1 {
		return string(b[:i]), b[i+2:], nil
	}
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); i++ {
		if b[i] != 0 {
			out = append(out, b[i])
			continue
		}
		if i+1 >= len(b) {
			break
		}
		switch b[i+1] {
		case 0xFF:
			out = append(out, 0)
			i++
		case 1:
			return string(out), b[i+2:], nil
		default:
			return "", nil, fmt.Errorf("schema: bad escape 0x00 0x%02x in row key", b[i+1])
		}
	}
	return "", nil, errors.New("schema: unterminated row key component")
}

// ReverseTime maps ms so that later times sort first.
func ReverseTime(ms int64) uint64 { return uint64(math.MaxInt64 - ms) }

// EntityPrefix is the row prefix of every fact row of an entity.
func EntityPrefix(entity string, buckets int) []byte {
	return AppendComponent([]byte{Salt(entity, buckets)}, entity)
}

// AggregatePrefix is the row prefix of every window of one aggregate set of an entity.
func AggregatePrefix(entity, set string, buckets int) []byte {
	return AppendComponent(EntityPrefix(entity, buckets), set)
}

// AggregateRow is the row of one window of an aggregate set of an entity.
func AggregateRow(entity, set string, windowStart int64, buckets int) []byte {
	return AppendAggregateRow(make([]byte, 0, MaxAggregateRowLen(entity, set)), entity, set, windowStart, buckets)
}

// AppendAggregateRow appends AggregateRow(entity, set, windowStart, buckets) to dst, at most
// MaxAggregateRowLen(entity, set) bytes.
func AppendAggregateRow(dst []byte, entity, set string, windowStart int64, buckets int) []byte {
	dst = AppendComponent(AppendComponent(append(dst, Salt(entity, buckets)), entity), set)
	return binary.BigEndian.AppendUint64(dst, ReverseTime(windowStart))
}

// MaxAggregateRowLen bounds the length of the rows of an entity's windows of set: salt, both
// names with every byte escaped and terminated, and the time.
func MaxAggregateRowLen(entity, set string) int { return 1 + 2*len(entity) + 2 + 2*len(set) + 2 + 8 }

// FactRow is the row of an entity's events at one event time.
func FactRow(entity string, eventTime int64, buckets int) []byte {
	return AppendFactRow(make([]byte, 0, MaxFactRowLen(entity)), entity, eventTime, buckets)
}

// AppendFactRow appends FactRow(entity, eventTime, buckets) to dst, at most MaxFactRowLen(entity)
// bytes: a writer of many rows can build them in memory of its own.
func AppendFactRow(dst []byte, entity string, eventTime int64, buckets int) []byte {
	dst = AppendComponent(append(dst, Salt(entity, buckets)), entity)
	return binary.BigEndian.AppendUint64(dst, ReverseTime(eventTime))
}

// MaxFactRowLen bounds the length of an entity's fact rows: salt, the entity with every byte
// escaped, terminator and time.
func MaxFactRowLen(entity string) int { return 1 + 2*len(entity) + 2 + 8 }

// ParseAggregateRow reads entity, set and window start back from an aggregate row.
func ParseAggregateRow(row []byte) (entity, set string, windowStart int64, err error) {
	if len(row) < 1+2+2+8 {
		return "", "", 0, fmt.Errorf("schema: aggregate row of %d bytes is too short", len(row))
	}
	rest := row[1:]
	if entity, rest, err = ReadComponent(rest); err != nil {
		return "", "", 0, err
	}
	if set, rest, err = ReadComponent(rest); err != nil {
		return "", "", 0, err
	}
	if len(rest) != 8 {
		return "", "", 0, fmt.Errorf("schema: aggregate row ends with %d bytes, want 8", len(rest))
	}
	return entity, set, math.MaxInt64 - int64(binary.BigEndian.Uint64(rest)), nil
}

// ParseFactRow reads entity and event time back from a fact row.
func ParseFactRow(row []byte) (entity string, eventTime int64, err error) {
	if len(row) < 1+2+8 {
		return "", 0, fmt.Errorf("schema: fact row of %d bytes is too short", len(row))
	}
	entity, rest, err := ReadComponent(row[1:])
	if err != nil {
		return "", 0, err
	}
	if len(rest) != 8 {
		return "", 0, fmt.Errorf("schema: fact row ends with %d bytes, want 8", len(rest))
	}
	return entity, math.MaxInt64 - int64(binary.BigEndian.Uint64(rest)), nil
}
