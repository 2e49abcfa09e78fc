// Package golden pins encodings in files under a package's testdata/golden/, so that a change of
// a stored or sent format (window state, partition records, loop messages, totals, dead letters,
// cells) is a diff a reviewer sees, not a surprise a running deployment meets. Tests call Check
// with the bytes an encoder makes; `go test ./pkg -run Golden -update-golden` writes the files
// anew after a deliberate change (which then needs a new format version and a reader of the old).
//
// It is for tests only, and imports nothing of abacus.
package golden

import (
	"bytes"
	"encoding/hex"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update-golden", false, "write testdata/golden/ files anew from what the encoders make")

// Check compares b with testdata/golden/name.hex: what describes the encoding (a line of #
// comment) and its bytes in hex, 32 a line. With -update-golden it writes the file instead.
func Check(t testing.TB, name, what string, b []byte) {
	t.Helper()
	check(t, filepath.Join("testdata", "golden", name+".hex"), what, format(what, b))
}

// CheckText is Check for an encoding written as text (headers, lines of hex), kept as it is in
// testdata/golden/name.txt after the # line that says what it is.
func CheckText(t testing.TB, name, what, text string) {
	t.Helper()
	check(t, filepath.Join("testdata", "golden", name+".txt"), what, []byte("# "+what+"\n"+text))
}

func check(t testing.TB, path, what string, want []byte) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, want, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update-golden to write it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("the encoding of %s changed: %s holds\n%s\nthe encoder now makes\n%s\na stored or sent format changed: give it a new version, keep a reader of the old, and write the file anew (-update-golden)",
			what, path, got, want)
	}
}

// Read returns the bytes of testdata/golden/name.hex, for tests that decode what an earlier
// version wrote.
func Read(t testing.TB, name string) []byte {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "golden", name+".hex"))
	if err != nil {
		t.Fatal(err)
	}
	var hexed strings.Builder
	for _, line := range strings.Split(string(raw), "\n") {
		if !strings.HasPrefix(line, "#") {
			hexed.WriteString(strings.TrimSpace(line))
		}
	}
	b, err := hex.DecodeString(hexed.String())
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return b
}

func format(what string, b []byte) []byte {
	var out bytes.Buffer
	out.WriteString("# " + what + "\n")
	for len(b) > 0 {
		n := min(32, len(b))
		out.WriteString(hex.EncodeToString(b[:n]) + "\n")
		b = b[n:]
	}
	return out.Bytes()
}
