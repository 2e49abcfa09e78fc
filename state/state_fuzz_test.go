package state

import (
	"bytes"
	"errors"
	"testing"
)

// FuzzDecode feeds arbitrary bytes to Decode, as a corrupt or hostile changelog record would: it
// must never panic, every error must wrap ErrCorrupt, and what it accepts must encode to bytes
// that decode to the same entity (encoding what was decoded is stable).
func FuzzDecode(f *testing.F) {
	f.Add(sample().Append(nil))
	f.Add((&Entity{}).Append(nil))
	f.Add([]byte{Version, 0, 0xff, 0xff, 0xff, 0xff, 0x0f}) // a huge fence count with no bytes behind it
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := Decode(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error does not wrap ErrCorrupt: %v", err)
			}
			return
		}
		once := e.Append(nil)
		again, err := Decode(once)
		if err != nil {
			t.Fatalf("re-encoding of %x does not decode: %v", b, err)
		}
		if twice := again.Append(nil); !bytes.Equal(once, twice) {
			t.Fatalf("unstable encoding of %x:\n%x\n%x", b, once, twice)
		}
	})
}
