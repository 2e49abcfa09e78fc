// Package kafkaread reads what Kafka topics hold, for the checks that compare it with what they
// should hold (the failure suite, the end-to-end tests): every record of a topic up to its end at
// the call, the sum of a topic's end offsets, and how far a consumer group is behind on a topic.
package kafkaread

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// All calls fn with every record of topic, each partition in offset order, up to the partition's
// end offset when All was called (records produced meanwhile are not waited for). opts add to the
// consumer's options (security, fetch sizes).
func All(ctx context.Context, brokers []string, topic string, fn func(*kgo.Record), opts ...kgo.Opt) error {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())}, opts...)...)
	if err != nil {
		return err
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err != nil {
		return fmt.Errorf("end offsets of %s: %w", topic, err)
	}
	if err := ends.Error(); err != nil {
		return fmt.Errorf("end offsets of %s: %w", topic, err)
	}
	left := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			left[o.Partition] = o.Offset
		}
	})
	for len(left) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("read %s: %w", topic, err)
		}
		var ferr error
		fs.EachError(func(_ string, p int32, err error) {
			if ferr == nil && !errors.Is(err, context.Canceled) {
				ferr = fmt.Errorf("read %s/%d: %w", topic, p, err)
			}
		})
		if ferr != nil {
			return ferr
		}
		fs.EachRecord(func(r *kgo.Record) {
			if end, ok := left[r.Partition]; ok && r.Offset < end {
				fn(r)
				if r.Offset+1 >= end {
					delete(left, r.Partition)
				}
			}
		})
	}
	return nil
}

// EndSum returns the sum of topic's end offsets: how many records it ever held, for a topic
// without transactions.
func EndSum(ctx context.Context, adm *kadm.Client, topic string) (int64, error) {
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return 0, fmt.Errorf("end offsets of %s: %w", topic, err)
	}
	if err := ends.Error(); err != nil {
		return 0, fmt.Errorf("end offsets of %s: %w", topic, err)
	}
	var n int64
	ends.Each(func(o kadm.ListedOffset) { n += o.Offset })
	return n, nil
}

// GroupLag returns how many records of topic group has not committed yet (all of a partition's
// records while the group has committed nothing there).
func GroupLag(ctx context.Context, adm *kadm.Client, group, topic string) (int64, error) {
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return 0, fmt.Errorf("end offsets of %s: %w", topic, err)
	}
	if err := ends.Error(); err != nil {
		return 0, fmt.Errorf("end offsets of %s: %w", topic, err)
	}
	committed, err := adm.FetchOffsets(ctx, group)
	if errors.Is(err, kerr.GroupIDNotFound) {
		committed, err = nil, nil // a group that never committed (some brokers say so, others answer -1)
	}
	if err != nil {
		return 0, fmt.Errorf("committed offsets of %s: %w", group, err)
	}
	var lag int64
	ends.Each(func(o kadm.ListedOffset) {
		var c int64
		if r, ok := committed.Lookup(topic, o.Partition); ok && r.Err == nil && r.At >= 0 {
			c = r.At
		}
		lag += max(o.Offset-c, 0)
	})
	return lag, nil
}
