package processors

import (
	"context"
	"fmt"

	"github.com/lovoo/goka"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/abacus-stream/abacus/internal/engine"
	"github.com/abacus-stream/abacus/internal/kafkaread"
	"github.com/abacus-stream/abacus/state"
)

// PartitionRecords reads, from the processor group's table topic, what each of its partitions
// keeps about itself under its own key (state.Partition: stream time, the inputs' watermarks,
// each set's grace and live start), as of the newest record: what a backfill needs to know which
// windows the processor owns. A partition with no record yet is nil. It reads the whole topic
// (compacted: about one record per open entity); opts give the brokers and security.
func PartitionRecords(ctx context.Context, group string, partitions int, opts ...kgo.Opt) ([]*state.Partition, error) {
	topic := string(goka.GroupTable(goka.Group(group)))
	keys := engine.TickKeys(partitions)
	out := make([]*state.Partition, partitions)
	var derr error
	err := kafkaread.All(ctx, nil, topic, func(r *kgo.Record) {
		p := r.Partition
		if int(p) >= partitions || string(r.Key) != keys[p] || derr != nil {
			return
		}
		if r.Value == nil {
			out[p] = nil
			return
		}
		rec, err := state.DecodePartition(r.Value)
		if err != nil {
			derr = fmt.Errorf("processors: record of partition %d in %s: %w", p, topic, err)
			return
		}
		out[p] = rec
	}, opts...)
	if err != nil {
		return nil, fmt.Errorf("processors: read %s: %w", topic, err)
	}
	return out, derr
}
