// Package smallfile reads the small files a process is pointed at by its settings (certificates,
// keys, passwords, credentials lists) with a bound on their size: a path set by mistake to a log
// or a device such as /dev/zero is an error naming the file, never read to the end or cut short.
package smallfile

import (
	"fmt"
	"io"
	"os"
)

// TooLargeError is the error of Read for a file over its limit.
type TooLargeError struct {
	Path  string
	Limit int64
}

func (e *TooLargeError) Error() string { return fmt.Sprintf("%s is over %d bytes", e.Path, e.Limit) }

// Read reads the file at path, which must be a regular file of at most limit bytes.
func Read(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.IsDir() {
		return nil, fmt.Errorf("%s is a folder, not a file", path)
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, &TooLargeError{Path: path, Limit: limit}
	}
	return b, nil
}
