package querybench

import (
	"context"
	"testing"
	"time"

	"github.com/abacus-stream/abacus/hbase"
	"github.com/abacus-stream/abacus/internal/testenv/gate"
)

// BenchmarkLoad writes the dataset (datasetSize) unless a complete load of that size is in HBase
// already, and reports the load rate in window rows per second (each row: one cell per
// aggregate and the meta cell).
func BenchmarkLoad(b *testing.B) {
	q := gate.HBaseZooKeeper(b)
	ctx := context.Background()
	c, err := hbase.NewClient(ctx, hbase.Config{ZooKeeper: q})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	s := datasetSize()
	for range b.N {
		lctx, cancel := context.WithTimeout(ctx, 3*time.Hour)
		st, did, err := load(lctx, c, s, func(msg string) { b.Logf("load %s: %s", s.table(), msg) })
		cancel()
		if err != nil {
			b.Fatal(err)
		}
		if !did {
			b.Logf("table %s is loaded already (%s exists)", s.table(), s.loadedTable())
			continue
		}
		b.Logf("loaded %s: %d window rows in %s", s.table(), st.rows, st.elapsed.Round(time.Second))
		b.ReportMetric(float64(st.rows)/st.elapsed.Seconds(), "rows/s")
		b.ReportMetric(float64(st.rows), "rows")
	}
}
