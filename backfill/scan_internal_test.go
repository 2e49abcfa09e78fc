package backfill

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync/atomic"
	"testing"

	"github.com/abacus-stream/abacus/store"
)

// bucketRows serves rows whose first byte is their bucket, in order, and fails the scan of
// failBucket (when >= 0) after its first row.
type bucketRows struct {
	rows       [][]byte
	failBucket int
	scans      atomic.Int32
}

func (b *bucketRows) Scan(ctx context.Context, spec store.ScanSpec, fn func([]byte, []store.Cell) bool) error {
	b.scans.Add(1)
	for _, r := range b.rows {
		if r[0] < spec.Start[0] || (spec.Stop != nil && r[0] >= spec.Stop[0]) {
			continue
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if !fn(r, []store.Cell{{Row: r}}) {
			return nil
		}
		if int(r[0]) == b.failBucket {
			return fmt.Errorf("region of bucket %d is down", r[0])
		}
	}
	return nil
}

// TestScanBuckets: every row of every bucket reaches the collector once (the last bucket's range
// runs to the table's end, so a row past the buckets is not lost); a collector that stops ends
// every scan without an error; a scan's failure is the read's error.
func TestScanBuckets(t *testing.T) {
	const buckets = 7
	src := &bucketRows{failBucket: -1}
	for b := range buckets + 1 { // one row past the last bucket: a stray the last scan must cover
		for i := range 1000 {
			src.rows = append(src.rows, fmt.Appendf(nil, "%c%05d", byte(b), i))
		}
	}
	var got []string
	err := scanBuckets(context.Background(), src, store.ScanSpec{}, buckets, func(row []byte, cells []store.Cell) bool {
		got = append(got, string(row))
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	if src.scans.Load() != buckets {
		t.Errorf("%d scans for %d buckets", src.scans.Load(), buckets)
	}
	sort.Strings(got)
	if len(got) != len(src.rows) {
		t.Fatalf("collected %d rows of %d", len(got), len(src.rows))
	}
	for i, r := range src.rows {
		if got[i] != string(r) {
			t.Fatalf("row %d: %q, want %q", i, got[i], r)
		}
	}

	n := 0
	err = scanBuckets(context.Background(), src, store.ScanSpec{}, buckets, func([]byte, []store.Cell) bool {
		n++
		return n < 10
	})
	if err != nil || n != 10 {
		t.Fatalf("a collector that stopped at 10 rows: %d rows, %v", n, err)
	}

	src.failBucket = 3
	err = scanBuckets(context.Background(), src, store.ScanSpec{}, buckets, func([]byte, []store.Cell) bool { return true })
	if err == nil || errors.Is(err, context.Canceled) {
		t.Fatalf("a failed scan gave %v, want its error", err)
	}
}
