package sinks

import (
	"context"
	"time"

	"github.com/abacus-stream/abacus/deadletter"
	"github.com/twmb/franz-go/pkg/kgo"
)

// deadLetter is a record the sink sets aside, and why.
type deadLetter struct {
	rec    *kgo.Record
	reason deadletter.Reason
	detail string
}

// record is the dead letter in package deadletter's format, for topic. Everything in it comes
// from the source record, so a repeat after a crash is an identical record, but for its Kafka
// timestamp: the time of the write, as the processor's, so that the topic's retention counts from
// when it was set aside (a dead letter of a month-old event is not deleted at once); the original
// record's timestamp is in its header abacus.timestamp.
func (d deadLetter) record(topic string) *kgo.Record {
	r := deadletter.Record{Source: deadletter.Source{Topic: d.rec.Topic, Partition: d.rec.Partition, Offset: d.rec.Offset},
		Reason: d.reason, Detail: d.detail, Key: d.rec.Key, Value: d.rec.Value, Timestamp: d.rec.Timestamp}
	for _, h := range d.rec.Headers {
		r.Headers = append(r.Headers, deadletter.Header{Key: h.Key, Value: h.Value})
	}
	// A dead letter Kafka refuses for its size would stop the sink on every restart.
	r.Fit(deadletter.DefaultMaxBytes)
	var hs []kgo.RecordHeader
	for _, h := range r.RecordHeaders() {
		hs = append(hs, kgo.RecordHeader{Key: h.Key, Value: h.Value})
	}
	return &kgo.Record{Topic: topic, Key: r.RecordKey(), Value: r.Value, Headers: hs} // franz-go stamps the write's time
}

// produceDead sends dead letters before anything that depends on them is committed, retrying
// until Kafka takes them or ctx ends: a record is never dropped silently.
func (s *FlushThenCommit) produceDead(ctx context.Context, dead []deadLetter) error {
	if len(dead) == 0 {
		return nil
	}
	recs := make([]*kgo.Record, len(dead))
	for i, d := range dead {
		recs[i] = d.record(s.cfg.DeadLetterTopic)
	}
	backoff := s.cfg.RetryBackoff
	for {
		err := s.cl.ProduceSync(ctx, recs...).FirstErr()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		s.log.Warn("dead-letter produce failed; retrying", "topic", s.cfg.DeadLetterTopic, "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, s.cfg.MaxRetryBackoff)
	}
}
