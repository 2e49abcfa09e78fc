package smallfile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRead(t *testing.T) {
	dir := t.TempDir()
	ok := filepath.Join(dir, "ok")
	if err := os.WriteFile(ok, []byte("12345"), 0o600); err != nil {
		t.Fatal(err)
	}
	if b, err := Read(ok, 5); err != nil || string(b) != "12345" {
		t.Fatalf("Read at the limit: %q %v", b, err)
	}
	var tl *TooLargeError
	if _, err := Read(ok, 4); !errors.As(err, &tl) || err.Error() != ok+" is over 4 bytes" {
		t.Fatalf("Read over the limit: %v", err)
	}
	if _, err := Read("/dev/zero", 1<<10); !errors.As(err, &tl) {
		t.Fatalf("Read of /dev/zero: %v", err)
	}
	if _, err := Read(dir, 10); err == nil || !strings.Contains(err.Error(), "is a folder") {
		t.Fatalf("Read of a folder: %v", err)
	}
	if _, err := Read(filepath.Join(dir, "missing"), 10); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Read of a missing file: %v", err)
	}
}
