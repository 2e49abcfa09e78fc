package sinks

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// OffsetStore keeps a sink group's committed offsets: the offset of the next record to write, per
// partition.
type OffsetStore interface {
	// Commit stores offsets; it is called only after every cell below them was acknowledged.
	Commit(ctx context.Context, group string, offsets map[string]map[int32]kgo.EpochOffset) error
	// Load returns the stored offsets of the given partitions; partitions it has no offset for are
	// left out and start from the group's reset offset.
	Load(ctx context.Context, group string, parts map[string][]int32) (map[string]map[int32]int64, error)
}

// kafkaOffsets commits to the consumer group in Kafka, the default store.
type kafkaOffsets struct{ cl *kgo.Client }

func (k kafkaOffsets) Commit(ctx context.Context, _ string, offsets map[string]map[int32]kgo.EpochOffset) error {
	var err error
	k.cl.CommitOffsetsSync(ctx, offsets, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, e error) {
		if e != nil {
			err = e
			return
		}
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if ke := kerr.ErrorForCode(p.ErrorCode); ke != nil && err == nil {
					err = fmt.Errorf("commit %s/%d: %w", t.Topic, p.Partition, ke)
				}
			}
		}
	})
	if err != nil {
		return fmt.Errorf("sinks: kafka offset commit: %w", err)
	}
	return nil
}

// Load is not used for Kafka: the client resumes from the group's commits by itself.
func (kafkaOffsets) Load(context.Context, string, map[string][]int32) (map[string]map[int32]int64, error) {
	return nil, nil
}

// adjustOffsets seeks newly assigned partitions to the offsets an external store holds (with
// offsets in Kafka, kgo has already put them at the group's commits), and notes where each
// resumes.
func (s *FlushThenCommit) adjustOffsets(ctx context.Context, assigned map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
	parts := map[string][]int32{}
	for t, ps := range assigned {
		for p := range ps {
			parts[t] = append(parts[t], p)
		}
	}
	var stored map[string]map[int32]int64
	if s.externalOffsets {
		// Only an external store has offsets to load, and only it is set before the client
		// starts: kgo may call this for the first assignment before NewFlushThenCommit has
		// set the Kafka store, which needs the client (a kfake run found s.offsets nil here).
		var err error
		if stored, err = s.offsets.Load(ctx, s.cfg.Group, parts); err != nil {
			return nil, fmt.Errorf("sinks: load offsets of group %s: %w", s.cfg.Group, err)
		}
	}
	for t, ps := range stored {
		for p, off := range ps {
			if _, ok := assigned[t][p]; ok {
				assigned[t][p] = kgo.NewOffset().At(off)
			}
		}
	}
	s.mu.Lock()
	for t, ps := range assigned {
		for p, o := range ps {
			if off := o.EpochOffset().Offset; off >= 0 {
				setOffset(s.next, t, p, off)
			} else {
				delete(s.next[t], p) // no commit: the partition starts where the reset puts it
			}
		}
	}
	s.mu.Unlock()
	return assigned, nil
}
