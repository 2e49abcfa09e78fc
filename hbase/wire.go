package hbase

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"google.golang.org/protobuf/encoding/protowire"
)

// This file holds the hand-written protobuf helpers: appenders for the few messages the client sends
// and the decoding helpers shared by the response parsers. Field numbers come from HBase's .proto files.

func appendBytesField(b []byte, num protowire.Number, v []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, v)
}

func appendStringField(b []byte, num protowire.Number, v string) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, v)
}

func appendVarintField(b []byte, num protowire.Number, v uint64) []byte {
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

func appendBoolField(b []byte, num protowire.Number, v bool) []byte {
	x := uint64(0)
	if v {
		x = 1
	}
	return appendVarintField(b, num, x)
}

// appendMessage appends field num holding the message that fn appends. It reserves one byte for the
// length and moves the body only when the body is 128 bytes or longer, so small nested messages (the
// common case: region specifiers, columns, mutations) are written in place.
func appendMessage(b []byte, num protowire.Number, fn func([]byte) []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	start := len(b)
	b = append(b, 0)
	b = fn(b)
	n := len(b) - start - 1
	sz := protowire.SizeVarint(uint64(n))
	if sz == 1 {
		b[start] = byte(n)
		return b
	}
	for range sz - 1 {
		b = append(b, 0)
	}
	copy(b[start+sz:], b[start+1:start+1+n])
	protowire.AppendVarint(b[start:start], uint64(n))
	return b
}

// appendRegionSpecifier appends RegionSpecifier{type=REGION_NAME, value=name} as field num.
func appendRegionSpecifier(b []byte, num protowire.Number, name []byte) []byte {
	return appendMessage(b, num, func(b []byte) []byte {
		b = appendVarintField(b, 1, 1)
		return appendBytesField(b, 2, name)
	})
}

// appendTableName appends TableName{namespace=1, qualifier=2} as field num.
func appendTableName(b []byte, num protowire.Number, t TableName) []byte {
	return appendMessage(b, num, func(b []byte) []byte {
		b = appendStringField(b, 1, t.Namespace)
		return appendStringField(b, 2, t.Qualifier)
	})
}

// appendTimeRange appends TimeRange{from=1, to=2} as field num when the range is not "all time".
func appendTimeRange(b []byte, num protowire.Number, tr TimeRange) []byte {
	if tr.isAll() {
		return b
	}
	return appendMessage(b, num, func(b []byte) []byte {
		b = appendVarintField(b, 1, uint64(tr.From))
		return appendVarintField(b, 2, uint64(tr.to()))
	})
}

// appendColumns appends repeated Column{family=1, qualifier=2...} as field num.
func appendColumns(b []byte, num protowire.Number, cols []Column) []byte {
	// Group qualifiers of the same family into one Column, as the server expects one entry per family.
	for i, c := range cols {
		dup := false
		for _, p := range cols[:i] {
			if p.Family == c.Family {
				dup = true
				break
			}
		}
		if dup {
			continue
		}
		b = appendMessage(b, num, func(b []byte) []byte {
			b = appendStringField(b, 1, c.Family)
			for _, o := range cols[i:] {
				if o.Family == c.Family && o.Qualifier != nil {
					b = appendBytesField(b, 2, o.Qualifier)
				}
			}
			return b
		})
	}
	return b
}

// appendNameBytesPair appends NameBytesPair{name=1, value=2} as field num.
func appendNameBytesPair(b []byte, num protowire.Number, name string, value []byte) []byte {
	return appendMessage(b, num, func(b []byte) []byte {
		b = appendStringField(b, 1, name)
		return appendBytesField(b, 2, value)
	})
}

var errShortCellBlock = errors.New("hbase: truncated cell block")

// KeyValue cell types as the server writes them in cell blocks.
const (
	typePut                 = 4
	typeDelete              = 8
	typeDeleteFamilyVersion = 10
	typeDeleteColumn        = 12
	typeDeleteFamily        = 14
)

// appendKeyValue appends one cell in KeyValueCodec form: int32 length of what follows, then the
// KeyValue (int32 key length, int32 value length, key, value), the key being int16 row length, row,
// int8 family length, family, qualifier, int64 timestamp, int8 type.
func appendKeyValue(b []byte, row []byte, family string, qualifier []byte, ts int64, typ byte, value []byte) []byte {
	keyLen := 2 + len(row) + 1 + len(family) + len(qualifier) + 8 + 1
	b = binary.BigEndian.AppendUint32(b, uint32(8+keyLen+len(value)))
	b = binary.BigEndian.AppendUint32(b, uint32(keyLen))
	b = binary.BigEndian.AppendUint32(b, uint32(len(value)))
	b = binary.BigEndian.AppendUint16(b, uint16(len(row)))
	b = append(b, row...)
	b = append(b, byte(len(family)))
	b = append(b, family...)
	b = append(b, qualifier...)
	b = binary.BigEndian.AppendUint64(b, uint64(ts))
	b = append(b, typ)
	return append(b, value...)
}

// keyValueSize is the number of bytes appendKeyValue writes.
func keyValueSize(row, family, qualifier, value int) int {
	return 4 + 8 + 2 + row + 1 + family + qualifier + 8 + 1 + value
}

// cellReader decodes KeyValueCodec cells from a cell block. Decoded cells alias the block.
type cellReader struct{ b []byte }

func (r *cellReader) next() (Cell, error) {
	var c Cell
	b := r.b
	if len(b) < 12 {
		return c, errShortCellBlock
	}
	total := int(binary.BigEndian.Uint32(b))
	keyLen := int(binary.BigEndian.Uint32(b[4:]))
	valLen := int(binary.BigEndian.Uint32(b[8:]))
	if total < 8 || total > len(b)-4 || keyLen < 12 || valLen < 0 || keyLen > total-8 || valLen > total-8-keyLen {
		return c, fmt.Errorf("%w: cell lengths total=%d key=%d value=%d in %d bytes", errShortCellBlock, total, keyLen, valLen, len(b))
	}
	key := b[12 : 12+keyLen]
	rowLen := int(binary.BigEndian.Uint16(key))
	if 2+rowLen+1 > keyLen-9 {
		return c, fmt.Errorf("%w: row length %d in key of %d", errShortCellBlock, rowLen, keyLen)
	}
	c.Row = key[2 : 2+rowLen : 2+rowLen]
	famLen := int(key[2+rowLen])
	famStart := 3 + rowLen
	if famStart+famLen > keyLen-9 {
		return c, fmt.Errorf("%w: family length %d in key of %d", errShortCellBlock, famLen, keyLen)
	}
	c.Family = key[famStart : famStart+famLen : famStart+famLen]
	c.Qualifier = key[famStart+famLen : keyLen-9 : keyLen-9]
	c.Timestamp = int64(binary.BigEndian.Uint64(key[keyLen-9:]))
	c.Type = CellType(key[keyLen-1])
	vs := 12 + keyLen
	c.Value = b[vs : vs+valLen : vs+valLen]
	// Tags, if a codec ever sends them, sit after the value inside total: skip them.
	r.b = b[4+total:]
	return c, nil
}

// bufPool recycles request buffers on the write path: encoded Multi requests are the biggest
// allocation per batch and are dead once written to the socket.
var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 64<<10); return &b }}

func getBuf() *[]byte { return bufPool.Get().(*[]byte) }

func putBuf(b *[]byte) {
	if b == nil || cap(*b) > 16<<20 {
		return
	}
	*b = (*b)[:0]
	bufPool.Put(b)
}
