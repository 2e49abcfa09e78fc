package hbase

import (
	"errors"
	"fmt"
	"math"
)

// ServerTimestamp, passed as a cell timestamp, asks the region server to stamp the cell with its own
// clock (HBase's LATEST_TIMESTAMP). It exists so that server time is only ever used by name:
// abacus's write paths always state the timestamp.
const ServerTimestamp int64 = math.MaxInt64

// Durability says how a mutation is persisted. The zero value uses the table's setting, which is
// SYNC_WAL unless the table says otherwise.
type Durability int32

// Durability values, as MutationProto numbers them.
const (
	DurabilityTableDefault Durability = 0
	SkipWAL                Durability = 1
	AsyncWAL               Durability = 2
	SyncWAL                Durability = 3
	FsyncWAL               Durability = 4
)

type mutCell struct {
	family    string // a string: most callers pass a constant, and converting would allocate per cell
	qualifier []byte
	ts        int64
	typ       byte
	value     []byte
}

// Mutation is a Put or a Delete of one row. Build one with NewPut or NewDelete and add cells; a
// Mutation is not safe for concurrent modification, but may be applied again (e.g. after a failure).
type Mutation struct {
	Table      string     // "table" or "ns:table"
	Row        []byte     // row key, 1..32767 bytes
	Durability Durability // zero: the table's durability
	isDelete   bool
	cells      []mutCell
	inline     [1]mutCell // backs cells for the common one-cell mutation: one allocation, not two
	err        error      // the first invalid cell added, reported by Apply
}

// NewPut starts a Put of row in table ("table" or "ns:table").
func NewPut(table string, row []byte) *Mutation {
	m := &Mutation{Table: table, Row: row}
	m.cells = m.inline[:0]
	return m
}

// ResetPut makes m a Put of row in table with no cells, as NewPut does, in m's own memory: a writer
// of many Puts can allocate them together (make([]Mutation, n)) instead of one by one. m must not
// be in use by an Apply.
func (m *Mutation) ResetPut(table string, row []byte) *Mutation {
	*m = Mutation{Table: table, Row: row}
	m.cells = m.inline[:0]
	return m
}

// NewDelete starts a Delete of row in table.
func NewDelete(table string, row []byte) *Mutation {
	m := &Mutation{Table: table, Row: row, isDelete: true}
	m.cells = m.inline[:0]
	return m
}

func (m *Mutation) check(what string, ts int64) bool {
	if m.err != nil {
		return false
	}
	if ts < 0 {
		m.err = fmt.Errorf("%s: negative timestamp %d", what, ts)
		return false
	}
	return true
}

// Add adds a cell version with timestamp ts (milliseconds by HBase convention; ServerTimestamp for
// the server's clock). Writing the same (row, family, qualifier, ts) again replaces the value and
// keeps one version.
func (m *Mutation) Add(family string, qualifier []byte, ts int64, value []byte) *Mutation {
	if m.isDelete {
		m.err = errors.New("add: cell values on a delete")
		return m
	}
	if m.check("add", ts) {
		if value == nil {
			value = []byte{} // a Put always carries a value, if only an empty one
		}
		m.cells = append(m.cells, mutCell{family, qualifier, ts, typePut, value})
	}
	return m
}

// DeleteVersion deletes exactly the version of family:qualifier at timestamp ts.
func (m *Mutation) DeleteVersion(family string, qualifier []byte, ts int64) *Mutation {
	return m.addDelete("delete version", family, qualifier, ts, typeDelete)
}

// DeleteColumn deletes every version of family:qualifier with a timestamp <= ts.
func (m *Mutation) DeleteColumn(family string, qualifier []byte, ts int64) *Mutation {
	return m.addDelete("delete column", family, qualifier, ts, typeDeleteColumn)
}

// DeleteFamily deletes every cell of family with a timestamp <= ts.
func (m *Mutation) DeleteFamily(family string, ts int64) *Mutation {
	return m.addDelete("delete family", family, nil, ts, typeDeleteFamily)
}

func (m *Mutation) addDelete(what, family string, qualifier []byte, ts int64, typ byte) *Mutation {
	if !m.isDelete {
		m.err = fmt.Errorf("%s on a put", what)
		return m
	}
	if m.check(what, ts) {
		m.cells = append(m.cells, mutCell{family, qualifier, ts, typ, nil})
	}
	return m
}

// validate reports why m cannot be sent, or nil.
func (m *Mutation) validate() error {
	switch {
	case m == nil:
		return errInvalid("apply", "nil mutation")
	case m.err != nil:
		return errInvalid("apply", "row %q: %v", m.Row, m.err)
	case m.Table == "":
		return errInvalid("apply", "row %q: no table", m.Row)
	case len(m.Row) == 0 || len(m.Row) > math.MaxInt16:
		return errInvalid("apply", "row of %d bytes", len(m.Row))
	case len(m.cells) == 0:
		return errInvalid("apply", "row %q: no cells", m.Row)
	}
	for _, c := range m.cells {
		if len(c.family) == 0 || len(c.family) > math.MaxInt8 {
			return errInvalid("apply", "row %q: family of %d bytes", m.Row, len(c.family))
		}
	}
	return nil
}

// size is the number of bytes m adds to a Multi request (cell block plus protobuf).
func (m *Mutation) size() int {
	n := 32 + len(m.Row)
	for _, c := range m.cells {
		n += keyValueSize(len(m.Row), len(c.family), len(c.qualifier), len(c.value))
	}
	return n
}

// BatchError reports the mutations of an Apply that did not land. Errs has one entry per mutation
// given to Apply, nil for those that were written.
type BatchError struct {
	Errs   []error // one per mutation, in Apply's order; nil when it landed
	Failed int     // number of non-nil Errs
}

// Error counts the failures and shows the first.
func (e *BatchError) Error() string {
	var first error
	for _, err := range e.Errs {
		if err != nil {
			first = err
			break
		}
	}
	return fmt.Sprintf("hbase: %d of %d mutations failed, first: %v", e.Failed, len(e.Errs), first)
}

// Unwrap returns the per-mutation errors, so errors.Is/As look into them.
func (e *BatchError) Unwrap() []error {
	var out []error
	for _, err := range e.Errs {
		if err != nil {
			out = append(out, err)
		}
	}
	return out
}
