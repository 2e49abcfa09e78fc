package hbase

import (
	"math"
	"strings"
)

// TableName is a namespace-qualified table name. The default namespace is "default".
type TableName struct {
	Namespace string // "default" for tables named without a namespace
	Qualifier string // the table's name within its namespace
}

// ParseTableName splits "ns:table"; a name without a colon is in the "default" namespace.
func ParseTableName(s string) TableName {
	if i := strings.IndexByte(s, ':'); i >= 0 {
		return TableName{Namespace: s[:i], Qualifier: s[i+1:]}
	}
	return TableName{Namespace: "default", Qualifier: s}
}

// String gives the name as hbase:meta row keys spell it: "table" in the default namespace, else "ns:table".
func (t TableName) String() string {
	if t.Namespace == "" || t.Namespace == "default" {
		return t.Qualifier
	}
	return t.Namespace + ":" + t.Qualifier
}

// CellType is the type byte of a cell: a value, or one of the delete markers a raw read returns.
type CellType byte

// Cell types as HBase stores them.
const (
	CellPut                 CellType = typePut
	CellDelete              CellType = typeDelete
	CellDeleteFamilyVersion CellType = typeDeleteFamilyVersion
	CellDeleteColumn        CellType = typeDeleteColumn
	CellDeleteFamily        CellType = typeDeleteFamily
)

// Cell is one versioned value (or, in raw reads, delete marker). Its slices alias the response buffer
// they were decoded from; they are never reused by the client, so callers may keep them.
type Cell struct {
	Row       []byte
	Family    []byte
	Qualifier []byte
	Timestamp int64    // milliseconds by HBase convention; what the writer stated
	Type      CellType // CellPut, or a delete marker in raw reads
	Value     []byte   // empty for delete markers
}

// Result holds the cells of one row.
type Result struct {
	Cells []Cell // sorted as the server sorts them: family, qualifier, newest version first
}

// Row returns the row key, or nil for an empty result.
func (r *Result) Row() []byte {
	if r == nil || len(r.Cells) == 0 {
		return nil
	}
	return r.Cells[0].Row
}

// Value returns the newest value of family:qualifier in the result, and whether there was one.
func (r *Result) Value(family, qualifier string) ([]byte, bool) {
	if r == nil {
		return nil, false
	}
	for _, c := range r.Cells {
		if string(c.Family) == family && string(c.Qualifier) == qualifier && c.Type == CellPut {
			return c.Value, true
		}
	}
	return nil, false
}

// Column selects a family, or one qualifier of a family when Qualifier is not nil.
type Column struct {
	Family    string
	Qualifier []byte // nil selects the whole family
}

// TimeRange selects cells with From <= timestamp < To. The zero value means all time.
type TimeRange struct {
	From int64 // inclusive
	To   int64 // exclusive; 0 means no upper bound
}

func (t TimeRange) isAll() bool { return t.From == 0 && (t.To == 0 || t.To == math.MaxInt64) }

func (t TimeRange) to() int64 {
	if t.To == 0 {
		return math.MaxInt64
	}
	return t.To
}

// AllVersions asks a read for every stored version.
const AllVersions = math.MaxInt32
