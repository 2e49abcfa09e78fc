package sinks

import (
	"bytes"
	"encoding/binary"
	"hash/maphash"

	"github.com/abacus-stream/abacus/store"
	"github.com/twmb/franz-go/pkg/kgo"
)

// cellKey identifies the cell version that a Put replaces; two values with the same key in one
// batch must be coalesced to the newest.
func cellKey(c *store.Cell) string {
	b := make([]byte, 0, len(c.Table)+len(c.Row)+len(c.Family)+len(c.Qualifier)+8+12)
	b = appendLen(b, c.Table)
	b = appendLen(b, string(c.Row))
	b = appendLen(b, string(c.Family))
	b = appendLen(b, string(c.Qualifier))
	ts := uint64(c.Timestamp)
	b = append(b, byte(ts>>56), byte(ts>>48), byte(ts>>40), byte(ts>>32), byte(ts>>24), byte(ts>>16), byte(ts>>8), byte(ts))
	return string(b)
}

// cellHash is a hash of the cell's coordinates (what cellKey holds), without building the key.
func cellHash(c *store.Cell, seed maphash.Seed) uint64 {
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

// sameCell reports whether c and o have the same coordinates.
func sameCell(c, o *store.Cell) bool {
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
	Encode(rec *kgo.Record, dst []store.Cell) ([]store.Cell, error)
}

// landingEncoder is an Encoder that is told what became of its cells: AggregatesEncoder's key index
// writes a key again unless a batch holding its index cell landed.
type landingEncoder interface {
	batchLanded(cells []store.Cell)
	batchesDropped()
}

// EncoderFunc adapts a function to Encoder.
type EncoderFunc func(rec *kgo.Record, dst []store.Cell) ([]store.Cell, error)

// Encode calls f.
func (f EncoderFunc) Encode(rec *kgo.Record, dst []store.Cell) ([]store.Cell, error) {
	return f(rec, dst)
}
