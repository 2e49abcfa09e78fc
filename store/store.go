// Package store is the narrow interface between abacus and where its cells live: the cell model
// (table, row, family, qualifier, timestamp, value), writes that report each failed cell, range
// reads, and the creation and checking of tables. The sinks write through it and the queries read
// through it; hbasestore implements it on HBase with the native client, cellstore on an embedded
// LevelDB with HBase's cell semantics.
//
// It must never hide a failed write (a cell is written or reported), and it is a leaf: it knows
// nothing of Kafka or of the processors, and nothing of how rows are keyed; of package schema it
// takes only the table layout (schema.TableLayout) that it creates and checks tables by.
package store

import (
	"bytes"
	"context"
	"errors"
	"slices"

	"github.com/abacus-stream/abacus/schema"
)

// PrefixEnd is the smallest row greater than every row that starts with prefix, or nil when there
// is none (the prefix is all 0xFF bytes): the exclusive end of a prefix scan. (Package hbase,
// which imports nothing of abacus, keeps a copy of its own.)
func PrefixEnd(prefix []byte) []byte {
	end := bytes.Clone(prefix)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

// Cell is one HBase cell: every coordinate and the timestamp come from the data.
type Cell struct {
	Table     string
	Row       []byte
	Family    []byte
	Qualifier []byte
	Timestamp int64 // ms since the epoch; from the event or the window end, never a clock
	Value     []byte
}

// Size is the cell's approximate encoded size, which batches are bounded by.
func (c *Cell) Size() int {
	return len(c.Table) + len(c.Row) + len(c.Family) + len(c.Qualifier) + 8 + len(c.Value)
}

// CellError reports one cell of a Write that failed.
type CellError struct {
	Index     int   // index into the cells given to Write
	Err       error // names the cause
	Permanent bool  // resending can never succeed (no such family, cell too large, ...)
}

// Writer is where cells land.
type Writer interface {
	// Write puts cells and returns the cells that failed. A non-nil error means the whole write
	// failed (e.g. the store is unreachable) and every cell may be resent. A store that retries
	// (the HBase client's rounds) reports a cell failed for a retriable cause only after its own
	// retries and their backoff, so callers resend such cells without backing off much longer. Write must not return
	// before every cell it reports as written is durable to the store's standard. It only reads
	// cells, and keeps no reference to them once it returns: callers write their own buffers.
	Write(ctx context.Context, cells []Cell) ([]CellError, error)
}

// ScanSpec is a range read of a table: rows in [Start, Stop) or every row with Prefix, newest
// version first within a column, up to MaxVersions versions (1 when zero). Reversed reads rows from
// the end of the range backwards.
type ScanSpec struct {
	Table       string
	Prefix      []byte
	Start, Stop []byte
	Reversed    bool
	Family      string // only this family when set
	// Qualifiers, with Family, reads only these columns of it: a query that wants one aggregate
	// of a window then gets two cells back rather than every aggregate's.
	Qualifiers  [][]byte
	MaxVersions int
	Limit       int // rows; 0 for all
	// Ranges, when set, keep only the rows in one of them (within Start and Stop): a scan that
	// reads several entities' rows of a salt bucket in one round trip. Forward scans only.
	Ranges []RowRange
}

// RowRange is a range of rows: Start inclusive, Stop exclusive (nil: unbounded).
type RowRange struct{ Start, Stop []byte }

// InRanges reports whether row is in one of ranges (sorted by Start, apart), or ranges is empty.
func InRanges(row []byte, ranges []RowRange) bool {
	if len(ranges) == 0 {
		return true
	}
	i, _ := slices.BinarySearchFunc(ranges, row, func(r RowRange, row []byte) int { return bytes.Compare(r.Start, row) })
	// ranges[i-1] is the last range starting at or before row (i, when one starts exactly at it).
	if i < len(ranges) && bytes.Equal(ranges[i].Start, row) {
		return true
	}
	if i == 0 {
		return false
	}
	r := ranges[i-1]
	return r.Stop == nil || bytes.Compare(row, r.Stop) < 0
}

// Reader reads cells back. fn gets each row's cells in HBase order (by column, newest version
// first) and returns false to stop.
type Reader interface {
	Scan(ctx context.Context, spec ScanSpec, fn func(row []byte, cells []Cell) bool) error
}

// Tables creates and checks abacus tables.
type Tables interface {
	// EnsureTable creates the table if it is missing, pre-split on the salt buckets and with the
	// layout's attributes; an existing table must match the layout (schema.TableLayout.CheckExisting).
	EnsureTable(ctx context.Context, l schema.TableLayout) error
	// VerifyTable checks that the table exists and matches the layout, creating nothing.
	VerifyTable(ctx context.Context, l schema.TableLayout) error
	// SaltBuckets reads the salt bucket count the table was created with; ErrNoSuchTable wraps the
	// error for a table that does not exist.
	SaltBuckets(ctx context.Context, table string) (int, error)
	// FamilySettings reads the settings of a family of the table as HBase names them (VERSIONS,
	// TTL, BLOOMFILTER, COMPRESSION; schema.TableLayout.Drift compares them); ErrNoSuchTable wraps
	// the error for a table that does not exist.
	FamilySettings(ctx context.Context, table, family string) (map[string]string, error)
}

// Store is a writer, a reader and a table administrator over one cluster (or embedded folder).
type Store interface {
	Writer
	Reader
	Tables
}

// ErrNoSuchTable is wrapped by errors about a table that does not exist.
var ErrNoSuchTable = errors.New("no such table")
