package backfill

import (
	"context"
	"sync"

	"github.com/abacus-stream/abacus/store"
)

// factBuckets is the facts table's salt bucket count, when its store can say (1 otherwise: one
// scan of the whole table).
func (b *backfill) factBuckets(ctx context.Context) int {
	sb, ok := b.opts.Facts.(interface {
		SaltBuckets(ctx context.Context, table string) (int, error)
	})
	if !ok {
		return 1
	}
	n, err := sb.SaltBuckets(ctx, b.opts.FactsTable)
	if err != nil || n < 1 {
		return 1 // the scan itself says what is wrong with the table
	}
	return n
}

// scannedRow is a row a bucket's scan read, on its way to the collector.
type scannedRow struct {
	row   []byte
	cells []store.Cell
}

// scanBuckets scans each salt bucket of spec's table (rows starting with the bucket's byte),
// readers at once, and hands every row to collect on the calling goroutine, in batches: collect
// needs no lock, and the scans overlap their round trips to the region servers. collect returning
// false stops every scan.
func scanBuckets(ctx context.Context, src store.Reader, spec store.ScanSpec, buckets int, collect func([]byte, []store.Cell) bool) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	next := make(chan int, buckets)
	for i := range buckets {
		next <- i
	}
	close(next)
	rows := make(chan []scannedRow, 2*readers)
	errs := make(chan error, buckets)
	var wg sync.WaitGroup
	for range min(readers, buckets) {
		wg.Go(func() {
			for bucket := range next {
				s := spec
				s.Start = []byte{byte(bucket)}
				if bucket < buckets-1 {
					s.Stop = []byte{byte(bucket + 1)}
				} else {
					s.Stop = nil // the last bucket runs to the table's end
				}
				var batch []scannedRow
				send := func() bool {
					select {
					case rows <- batch:
						batch = nil
						return true
					case <-ctx.Done():
						return false
					}
				}
				err := src.Scan(ctx, s, func(row []byte, cells []store.Cell) bool {
					batch = append(batch, scannedRow{row, cells})
					return len(batch) < 256 || send()
				})
				if err == nil && len(batch) > 0 && !send() {
					err = ctx.Err()
				}
				if err != nil {
					errs <- err
					cancel()
					return
				}
			}
		})
	}
	go func() {
		wg.Wait()
		close(rows)
	}()
	stopped := false
	for batch := range rows {
		for _, r := range batch {
			if stopped {
				break
			}
			if !collect(r.row, r.cells) {
				stopped = true
				cancel() // the scans stop at their next row; their rows are drained here
			}
		}
	}
	select {
	case err := <-errs:
		if !stopped {
			return err
		}
	default:
	}
	return nil
}
