package sinks

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Cell is one HBase cell to put: every coordinate and the timestamp come from the data.
type Cell struct {
	Table     string
	Row       []byte
	Family    []byte
	Qualifier []byte
	Timestamp int64 // ms since the epoch; from the event or the window end, never a clock
	Value     []byte
}

func (c *Cell) size() int {
	return len(c.Table) + len(c.Row) + len(c.Family) + len(c.Qualifier) + 8 + len(c.Value)
}

// key identifies the cell version that a Put replaces; two values with the same key in one batch
// must be coalesced to the newest.
func (c *Cell) key() string {
	b := make([]byte, 0, len(c.Table)+len(c.Row)+len(c.Family)+len(c.Qualifier)+8+12)
	b = appendLen(b, c.Table)
	b = appendLen(b, string(c.Row))
	b = appendLen(b, string(c.Family))
	b = appendLen(b, string(c.Qualifier))
	ts := uint64(c.Timestamp)
	b = append(b, byte(ts>>56), byte(ts>>48), byte(ts>>40), byte(ts>>32), byte(ts>>24), byte(ts>>16), byte(ts>>8), byte(ts))
	return string(b)
}

// hash is a hash of the cell's coordinates (what key holds), without building the key.
func (c *Cell) hash(seed maphash.Seed) uint64 {
	var h maphash.Hash
	h.SetSeed(seed)
	h.WriteString(c.Table)
	h.WriteByte(0)
	h.Write(c.Row)
	h.WriteByte(0)
	h.Write(c.Family)
	h.WriteByte(0)
	h.Write(c.Qualifier)
	var ts [8]byte
	binary.BigEndian.PutUint64(ts[:], uint64(c.Timestamp))
	h.Write(ts[:])
	return h.Sum64()
}

// sameCell reports whether o has the same coordinates as c.
func (c *Cell) sameCell(o *Cell) bool {
	return c.Timestamp == o.Timestamp && c.Table == o.Table && bytes.Equal(c.Row, o.Row) &&
		bytes.Equal(c.Family, o.Family) && bytes.Equal(c.Qualifier, o.Qualifier)
}

func appendLen(b []byte, s string) []byte {
	n := len(s)
	return append(append(b, byte(n>>16), byte(n>>8), byte(n)), s...)
}

// Encoder turns one consumed record into the cells it stands for, appending them to dst. An error
// means the record can never be written (undecodable, from the future, ...): it goes to the
// dead-letter topic with the error as its reason, before any write of its batch.
type Encoder interface {
	Encode(rec *kgo.Record, dst []Cell) ([]Cell, error)
}

// EncoderFunc adapts a function to Encoder.
type EncoderFunc func(rec *kgo.Record, dst []Cell) ([]Cell, error)

// Encode calls f.
func (f EncoderFunc) Encode(rec *kgo.Record, dst []Cell) ([]Cell, error) { return f(rec, dst) }

// CellError reports one cell of a Store.Write that failed.
type CellError struct {
	Index     int   // index into the cells given to Write
	Err       error // names the cause
	Permanent bool  // resending can never succeed (no such family, cell too large, ...)
}

// Store is where cells land: HBase through the native client, or the embedded cell store.
type Store interface {
	// Write puts cells and returns the cells that failed. A non-nil error means the whole write
	// failed (e.g. the store is unreachable) and every cell may be resent. Write must not return
	// before every cell it reports as written is durable to the store's standard.
	Write(ctx context.Context, cells []Cell) ([]CellError, error)
}

// ErrPermanent marks an encoding error as one that no retry can mend; encoders may wrap it, but
// every Encode error sends its record to the dead-letter topic anyway.
var ErrPermanent = errors.New("permanent")

// DecodeError is an Encode failure: what was wrong with which record.
type DecodeError struct {
	Topic     string
	Partition int32
	Offset    int64
	Err       error
}

func (e *DecodeError) Error() string {
	return fmt.Sprintf("decode %s/%d@%d: %v", e.Topic, e.Partition, e.Offset, e.Err)
}

func (e *DecodeError) Unwrap() error { return e.Err }

// ScanSpec is a range read of a table: rows in [Start, Stop) or every row with Prefix, newest
// version first within a column, up to MaxVersions versions (1 when zero). Reversed reads rows from
// the end of the range backwards.
type ScanSpec struct {
	Table       string
	Prefix      []byte
	Start, Stop []byte
	Reversed    bool
	Family      string // only this family when set
	MaxVersions int
	Limit       int // rows; 0 for all
}

// Reader reads cells back: HBase through the native client, or the embedded cell store. fn gets
// each row's cells in HBase order (by column, newest version first) and returns false to stop.
type Reader interface {
	Scan(ctx context.Context, spec ScanSpec, fn func(row []byte, cells []Cell) bool) error
}
