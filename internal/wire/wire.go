// Package wire reads the compact binary encodings abacus writes (entity state, totals records,
// loop messages): varints, lengths and bytes in order, remembering the first error so that a
// decoder reads as the format it decodes.
//
// It is a leaf, with no abacus import, so the leaf packages (totals, state) can use it. A length
// is never trusted beyond the bytes left: corrupt input cannot make a decoder allocate without
// bound.
package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// Reader reads fields from the front of a buffer.
type Reader struct {
	b       []byte
	err     error
	corrupt error // wrapped by every error, e.g. totals.ErrCorrupt
}

// NewReader reads b; every error it reports wraps corrupt.
func NewReader(b []byte, corrupt error) *Reader { return &Reader{b: b, corrupt: corrupt} }

// Err is the first error met, or nil.
func (r *Reader) Err() error { return r.err }

// Len is the number of bytes not read yet.
func (r *Reader) Len() int { return len(r.b) }

// Next reads n bytes; the result aliases the buffer.
func (r *Reader) Next(n int) []byte {
	if n < 0 || len(r.b) < n {
		r.truncated("bytes")
		return make([]byte, max(n, 0))
	}
	v := r.b[:n:n]
	r.b = r.b[n:]
	return v
}

// Rest returns the bytes not read yet and consumes them.
func (r *Reader) Rest() []byte {
	v := r.b
	r.b = nil
	return v
}

// Fail records err (the first one wins) and stops reading.
func (r *Reader) Fail(err error) {
	if r.err == nil {
		r.err = err
	}
	r.b = nil
}

func (r *Reader) truncated(what string) {
	r.Fail(fmt.Errorf("%w: truncated %s", r.corrupt, what))
}

// Byte reads one byte.
func (r *Reader) Byte() byte {
	if len(r.b) < 1 {
		r.truncated("byte")
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

// Varint reads a zig-zag varint (binary.AppendVarint).
func (r *Reader) Varint() int64 {
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.truncated("varint")
		return 0
	}
	r.b = r.b[n:]
	return v
}

// Uvarint reads an unsigned varint (binary.AppendUvarint).
func (r *Reader) Uvarint() uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.truncated("uvarint")
		return 0
	}
	r.b = r.b[n:]
	return v
}

// Count reads a length or element count, refusing one larger than the bytes left.
func (r *Reader) Count() int {
	v := r.Uvarint()
	if v > uint64(len(r.b)) {
		r.truncated("length")
		return 0
	}
	return int(v)
}

// Bytes reads a length-prefixed byte string; the result aliases the buffer (capacity capped, so
// appending to it cannot overwrite what follows).
func (r *Reader) Bytes() []byte {
	n := r.Count()
	if r.err != nil {
		return nil
	}
	v := r.b[:n:n]
	r.b = r.b[n:]
	return v
}

// String reads a length-prefixed string.
func (r *Reader) String() string { return string(r.Bytes()) }

// Float reads an IEEE 754 float64, 8 bytes big-endian.
func (r *Reader) Float() float64 {
	if len(r.b) < 8 {
		r.truncated("float")
		return 0
	}
	v := math.Float64frombits(binary.BigEndian.Uint64(r.b))
	r.b = r.b[8:]
	return v
}

// Done reports the first error, or an error if bytes are left over.
func (r *Reader) Done() error {
	if r.err == nil && len(r.b) != 0 {
		r.err = fmt.Errorf("%w: %d trailing bytes", r.corrupt, len(r.b))
	}
	return r.err
}

// AppendString appends a length-prefixed string, as String reads it.
func AppendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// ErrCorrupt is the default error wrapped by a Reader made with a nil corrupt error.
var ErrCorrupt = errors.New("corrupt encoding")
