package sinks

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/abacus-stream/abacus/internal/testenv"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestOffsetsShowRewindAndResume runs a sink against the real broker with offsets in Kafka and in
// an HBase offsets table: Show reports committed offsets and lag, a rewind with members running is
// refused, a rewind to 0 or to a time makes the next run write those records again.
func TestOffsetsShowRewindAndResume(t *testing.T) {
	brokers := testenv.Kafka(t)
	for _, where := range []string{"kafka", "hbase"} {
		t.Run(where, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			kcl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
			if err != nil {
				t.Fatal(err)
			}
			defer kcl.Close()
			admin := OffsetsAdmin{Kafka: kadm.NewClient(kcl)}
			var store OffsetStore
			if where == "hbase" {
				c := testenv.HBaseClient(t)
				table := fmt.Sprintf("sinktest_offsets_%d", time.Now().UnixNano())
				testenv.DropTableAtEnd(t, c, table)
				if err := EnsureOffsetsTable(ctx, c.Admin(), table); err != nil {
					t.Fatal(err)
				}
				admin.HBase = NewHBaseOffsets(c, table)
				store = admin.HBase
			}
			cells := newMemStore()
			h := start(t, cluster{where, brokers}, cells, func(cfg *Config) { cfg.Offsets = store })
			topic := h.cfg.Topics[0]
			values := make([]string, 400)
			for i := range values {
				values[i] = "v" + strconv.Itoa(i)
			}
			produce(t, brokers, topic, values)
			h.run()
			waitFor(t, "every record to land", 60*time.Second, func() bool {
				_, landed := cells.snapshot()
				return len(landed) == len(values)
			})
			var lags []PartitionLag
			waitFor(t, "lag 0", 30*time.Second, func() bool {
				lags, err = admin.Show(ctx, h.cfg.Group, topic)
				return err == nil && totalLag(lags) == 0 && committedSum(lags) == int64(len(values))
			})
			if len(lags) != 4 {
				t.Fatalf("show listed %d partitions, want 4", len(lags))
			}
			if err := admin.RewindTo(ctx, h.cfg.Group, []string{topic}, 0); err == nil || !strings.Contains(err.Error(), "running members") {
				t.Fatalf("rewind with the sink running: %v", err)
			}
			h.stop()
			waitFor(t, "the group to empty", 30*time.Second, func() bool {
				return admin.RewindTo(ctx, h.cfg.Group, []string{topic}, 0) == nil
			})
			lags, err = admin.Show(ctx, h.cfg.Group, topic)
			if err != nil || committedSum(lags) != 0 || totalLag(lags) != int64(len(values)) {
				t.Fatalf("after rewind to 0: %+v %v", lags, err)
			}
			// The next run writes every record again.
			again := newMemStore()
			h.store, h.offsets.store = again, again
			h.run()
			waitFor(t, "the rewound records to land again", 60*time.Second, func() bool {
				_, landed := again.snapshot()
				return len(landed) == len(values)
			})
			h.stop()
			// Records were produced with timestamps base+i: rewinding to base+300 leaves 100 to redo.
			waitFor(t, "the group to empty", 30*time.Second, func() bool {
				return admin.RewindToTime(ctx, h.cfg.Group, []string{topic}, time.UnixMilli(1_700_000_000_000+300)) == nil
			})
			lags, err = admin.Show(ctx, h.cfg.Group, topic)
			if err != nil || totalLag(lags) != 100 {
				t.Fatalf("after rewind to a time: lag %d, want 100 (%+v, %v)", totalLag(lags), lags, err)
			}
		})
	}
}

func totalLag(ls []PartitionLag) (n int64) {
	for _, l := range ls {
		n += l.Lag
	}
	return n
}

func committedSum(ls []PartitionLag) (n int64) {
	for _, l := range ls {
		n += max(l.Committed, 0)
	}
	return n
}
