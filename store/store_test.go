package store

import (
	"bytes"
	"testing"
)

func TestPrefixEnd(t *testing.T) {
	for _, c := range []struct{ prefix, want []byte }{
		{[]byte("ab"), []byte("ac")},
		{[]byte{'a', 0xff}, []byte("b")},
		{[]byte{0xff, 0xff}, nil},
		{nil, nil},
	} {
		got := PrefixEnd(c.prefix)
		if !bytes.Equal(got, c.want) || (c.want == nil) != (got == nil) {
			t.Errorf("PrefixEnd(%q) = %q, want %q", c.prefix, got, c.want)
		}
	}
	p := []byte("ab")
	PrefixEnd(p)
	if string(p) != "ab" {
		t.Errorf("PrefixEnd changed its argument to %q", p)
	}
}
