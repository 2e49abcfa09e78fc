package querytest

import (
	"context"
	"sync"

	"github.com/abacus-stream/abacus/store"
)

// Counts are what a CountingSource counted.
type Counts struct {
	Scans, Rows, Cells int
	Unbounded          int // scans without a row limit
	Reversed           int // reversed scans
}

// CountingSource counts the scans a reader makes and the rows and cells they deliver. Readers
// scan several entities at once, so the counts are kept under a lock.
type CountingSource struct {
	Source
	// Only, when set, is the one table whose scans are counted (the aggregates, say, not the
	// key index an entity listing walks).
	Only string
	mu   sync.Mutex
	c    Counts
}

// Scan implements store.Reader, counting.
func (c *CountingSource) Scan(ctx context.Context, spec store.ScanSpec, fn func([]byte, []store.Cell) bool) error {
	if c.Only != "" && spec.Table != c.Only {
		return c.Source.Scan(ctx, spec, fn)
	}
	c.mu.Lock()
	c.c.Scans++
	if spec.Limit == 0 {
		c.c.Unbounded++
	}
	if spec.Reversed {
		c.c.Reversed++
	}
	c.mu.Unlock()
	return c.Source.Scan(ctx, spec, func(row []byte, cells []store.Cell) bool {
		c.mu.Lock()
		c.c.Rows++
		c.c.Cells += len(cells)
		c.mu.Unlock()
		return fn(row, cells)
	})
}

// Counts are the counts since the source was made or last Reset.
func (c *CountingSource) Counts() Counts {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.c
}

// Reset sets every count to zero.
func (c *CountingSource) Reset() {
	c.mu.Lock()
	c.c = Counts{}
	c.mu.Unlock()
}
