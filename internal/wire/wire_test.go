package wire

import (
	"encoding/binary"
	"errors"
	"math"
	"testing"
)

var errTest = errors.New("test encoding")

func TestReadsInOrder(t *testing.T) {
	var b []byte
	b = append(b, 7)
	b = binary.AppendVarint(b, -42)
	b = binary.AppendUvarint(b, 300)
	b = AppendString(b, "héllo")
	b = binary.BigEndian.AppendUint64(b, math.Float64bits(2.5))
	r := NewReader(b, errTest)
	if r.Byte() != 7 || r.Varint() != -42 || r.Uvarint() != 300 || r.String() != "héllo" || r.Float() != 2.5 {
		t.Fatal("fields read back wrong")
	}
	if err := r.Done(); err != nil {
		t.Fatal(err)
	}
}

func TestTruncatedAndOversized(t *testing.T) {
	b := binary.AppendUvarint(nil, 1000) // a length far past the end
	r := NewReader(append(b, 'x'), errTest)
	if r.Bytes() != nil || !errors.Is(r.Err(), errTest) {
		t.Fatalf("oversized length: %v", r.Err())
	}
	r = NewReader([]byte{1, 2}, errTest)
	r.Float()
	if !errors.Is(r.Err(), errTest) {
		t.Fatal("short float accepted")
	}
	r = NewReader([]byte{1, 2}, errTest)
	r.Byte()
	if err := r.Done(); !errors.Is(err, errTest) {
		t.Fatalf("trailing byte: %v", err)
	}
}
