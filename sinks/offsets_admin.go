package sinks

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// OffsetsAdmin shows a sink group's offsets and lag, and rewinds them, wherever they are kept.
type OffsetsAdmin struct {
	// Kafka reads topic ends and, without HBase, the group's committed offsets.
	Kafka *kadm.Client
	// HBase, when set, is where the group's offsets live instead of Kafka.
	HBase *HBaseOffsets
}

// PartitionLag is one partition's committed offset against the end of its topic.
type PartitionLag struct {
	Topic     string
	Partition int32
	Committed int64 // next record to write; -1 when the group has not committed
	Start     int64 // the oldest offset the topic still holds
	End       int64 // offset the next produced record gets
	Lag       int64 // records not yet committed that the topic still holds
	// Deleted counts the records after the committed offset that the topic no longer holds
	// (retention or DeleteRecords took them before the group read them): the group skips them
	// when it resumes.
	Deleted     int64
	CommittedAt time.Time
}

// Show lists every partition of topics with the group's committed offset and lag.
func (a OffsetsAdmin) Show(ctx context.Context, group string, topics ...string) ([]PartitionLag, error) {
	starts, err := a.Kafka.ListStartOffsets(ctx, topics...)
	if err != nil {
		return nil, fmt.Errorf("sinks: start offsets of %v: %w", topics, err)
	}
	// Committed offsets before the ends: a sink commits while this runs, and an end read first
	// could be passed by a commit read after it, showing a committed offset past the end.
	committed, err := a.committed(ctx, group)
	if err != nil {
		return nil, err
	}
	ends, err := a.Kafka.ListEndOffsets(ctx, topics...)
	if err != nil {
		return nil, fmt.Errorf("sinks: end offsets of %v: %w", topics, err)
	}
	if err := ends.Error(); err != nil {
		return nil, fmt.Errorf("sinks: end offsets of %v: %w", topics, err)
	}
	var out []PartitionLag
	ends.Each(func(o kadm.ListedOffset) {
		pl := PartitionLag{Topic: o.Topic, Partition: o.Partition, Committed: -1, End: o.Offset}
		from := int64(0)
		if s, ok := starts.Lookup(o.Topic, o.Partition); ok {
			from = s.Offset
		}
		pl.Start = from
		if c, ok := committed[o.Topic][o.Partition]; ok {
			pl.Committed, pl.CommittedAt = c.Offset, c.CommittedAt
			pl.Deleted = max(0, min(from, pl.End)-c.Offset)
			from = max(from, c.Offset)
		}
		pl.Lag = max(0, pl.End-from)
		out = append(out, pl)
	})
	sort.Slice(out, func(i, j int) bool {
		if out[i].Topic != out[j].Topic {
			return out[i].Topic < out[j].Topic
		}
		return out[i].Partition < out[j].Partition
	})
	return out, nil
}

func (a OffsetsAdmin) committed(ctx context.Context, group string) (map[string]map[int32]StoredOffset, error) {
	out := map[string]map[int32]StoredOffset{}
	put := func(s StoredOffset) {
		if out[s.Topic] == nil {
			out[s.Topic] = map[int32]StoredOffset{}
		}
		out[s.Topic][s.Partition] = s
	}
	if a.HBase != nil {
		stored, err := a.HBase.Stored(ctx, group)
		if err != nil {
			return nil, err
		}
		for _, s := range stored {
			put(s)
		}
		return out, nil
	}
	resp, err := a.Kafka.FetchOffsets(ctx, group)
	if errors.Is(err, kerr.GroupIDNotFound) {
		// A group that has never committed: some coordinators say so rather than answer with
		// no offsets. Its lag is all of every partition.
		return out, nil
	}
	if err != nil {
		return nil, fmt.Errorf("sinks: committed offsets of group %s: %w", group, err)
	}
	if err := resp.Error(); err != nil {
		return nil, fmt.Errorf("sinks: committed offsets of group %s: %w", group, err)
	}
	resp.Each(func(o kadm.OffsetResponse) {
		if o.At >= 0 {
			put(StoredOffset{Topic: o.Topic, Partition: o.Partition, Offset: o.At})
		}
	})
	return out, nil
}

// RewindTo sets every partition of topics to offset (clamped to what the topic still holds), so the
// group's sinks rewrite from there on their next start. The group must have no running members:
// they would commit over the rewind.
func (a OffsetsAdmin) RewindTo(ctx context.Context, group string, topics []string, offset int64) error {
	starts, err := a.Kafka.ListStartOffsets(ctx, topics...)
	if err != nil {
		return fmt.Errorf("sinks: start offsets of %v: %w", topics, err)
	}
	ends, err := a.Kafka.ListEndOffsets(ctx, topics...)
	if err != nil {
		return fmt.Errorf("sinks: end offsets of %v: %w", topics, err)
	}
	target := map[string]map[int32]int64{}
	starts.Each(func(s kadm.ListedOffset) {
		o := max(offset, s.Offset)
		if e, ok := ends.Lookup(s.Topic, s.Partition); ok {
			o = min(o, e.Offset)
		}
		if target[s.Topic] == nil {
			target[s.Topic] = map[int32]int64{}
		}
		target[s.Topic][s.Partition] = o
	})
	return a.set(ctx, group, target)
}

// RewindToTime sets every partition of topics to its first record at or after t (the end when
// there is none), by the records' timestamps.
func (a OffsetsAdmin) RewindToTime(ctx context.Context, group string, topics []string, t time.Time) error {
	listed, err := a.Kafka.ListOffsetsAfterMilli(ctx, t.UnixMilli(), topics...)
	if err != nil {
		return fmt.Errorf("sinks: offsets after %s of %v: %w", t, topics, err)
	}
	if err := listed.Error(); err != nil {
		return fmt.Errorf("sinks: offsets after %s of %v: %w", t, topics, err)
	}
	target := map[string]map[int32]int64{}
	listed.Each(func(o kadm.ListedOffset) {
		if target[o.Topic] == nil {
			target[o.Topic] = map[int32]int64{}
		}
		target[o.Topic][o.Partition] = o.Offset
	})
	return a.set(ctx, group, target)
}

func (a OffsetsAdmin) set(ctx context.Context, group string, target map[string]map[int32]int64) error {
	groups, err := a.Kafka.DescribeGroups(ctx, group)
	if err != nil {
		return fmt.Errorf("sinks: describe group %s: %w", group, err)
	}
	if g, ok := groups[group]; ok && len(g.Members) > 0 {
		return fmt.Errorf("sinks: group %s has %d running members: stop them before moving its offsets", group, len(g.Members))
	}
	if a.HBase != nil {
		eo := map[string]map[int32]kgo.EpochOffset{}
		for t, ps := range target {
			eo[t] = map[int32]kgo.EpochOffset{}
			for p, o := range ps {
				eo[t][p] = kgo.EpochOffset{Epoch: -1, Offset: o}
			}
		}
		// Prime the store with the stored versions so the rewind's versions sort above them.
		parts := map[string][]int32{}
		for t, ps := range target {
			for p := range ps {
				parts[t] = append(parts[t], p)
			}
		}
		if _, err := a.HBase.Load(ctx, group, parts); err != nil {
			return err
		}
		return a.HBase.Commit(ctx, group, eo)
	}
	os := kadm.Offsets{}
	for t, ps := range target {
		for p, o := range ps {
			os.Add(kadm.Offset{Topic: t, Partition: p, At: o, LeaderEpoch: -1})
		}
	}
	resp, err := a.Kafka.CommitOffsets(ctx, group, os)
	if err != nil {
		return fmt.Errorf("sinks: commit offsets of group %s: %w", group, err)
	}
	if err := resp.Error(); err != nil {
		return fmt.Errorf("sinks: commit offsets of group %s: %w", group, err)
	}
	return nil
}
