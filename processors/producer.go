package processors

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
	"github.com/lovoo/goka"
)

// producer is goka's Producer on an idempotent sarama AsyncProducer, built here instead of with
// goka.NewProducer for three reasons:
//
//   - It settles the promises of messages in the order they were sent, whatever order Kafka
//     acknowledges them in. goka commits a record's offset once the messages its callback sent
//     are acknowledged; on a cluster, messages to different brokers are acknowledged in any order,
//     so a later record could commit while an earlier one's messages (a re-keyed event, a state
//     write) were still in flight, and a crash would lose them. Settled in order, a commit implies
//     that everything sent before it is in Kafka.
//   - It tells the engine how far Kafka has acknowledged (engine.Durability): the engine emits a
//     final total only from state Kafka holds, and drops a closed window only once its final is
//     acknowledged.
//   - Once a message failed for good, every later message's promise fails too, naming the first
//     failure, even when Kafka acknowledged it: goka commits a record once its messages succeeded,
//     so a later record's commit would pass the one whose write failed, and a restart would
//     resume after it (a dead letter too large for its topic was lost so). With every later
//     promise failed, goka commits nothing after the failure, and stops.
//   - Headers go out in key order: goka's map order would make a dead letter repeated after a
//     crash differ from the first.
type producer struct {
	p   sarama.AsyncProducer
	cfg *sarama.Config // as built
	wg  sync.WaitGroup

	sent  atomic.Uint64 // messages handed to sarama, numbered from 1
	acked atomic.Uint64 // every message up to this one is acknowledged
	// failed is set once a message failed: nothing after it counts as acknowledged.
	failed atomic.Bool

	// Owned by the settling goroutine.
	settled map[uint64]settlement
	next    uint64
	first   error // the first failure, which every later promise's error wraps
}

type settlement struct {
	msg    *sarama.ProducerMessage
	err    error
	finish goka.PromiseFinisher
}

// message metadata, carried through sarama in ProducerMessage.Metadata.
type msgMeta struct {
	seq    uint64
	finish goka.PromiseFinisher
}

// newProducer starts a producer.
func newProducer(brokers []string, c *sarama.Config) (*producer, error) {
	ap, err := sarama.NewAsyncProducer(brokers, c)
	if err != nil {
		return nil, fmt.Errorf("kafka producer: %w", err)
	}
	p := &producer{p: ap, cfg: c, settled: map[uint64]settlement{}, next: 1}
	p.wg.Add(1)
	go p.settle()
	return p, nil
}

// settle settles promises in send order: one goroutine for both outcomes, so that the order holds.
func (p *producer) settle() {
	defer p.wg.Done()
	successes, errs := p.p.Successes(), p.p.Errors()
	for successes != nil || errs != nil {
		select {
		case m, ok := <-successes:
			if !ok {
				successes = nil
				continue
			}
			meta := m.Metadata.(*msgMeta)
			p.settled[meta.seq] = settlement{msg: m, finish: meta.finish}
		case e, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
			meta := e.Msg.Metadata.(*msgMeta)
			p.settled[meta.seq] = settlement{msg: e.Msg, err: fmt.Errorf("kafka write to topic %s partition %d: %w",
				e.Msg.Topic, e.Msg.Partition, e.Err), finish: meta.finish}
		}
		for {
			s, ok := p.settled[p.next]
			if !ok {
				break
			}
			delete(p.settled, p.next)
			switch {
			case p.first != nil && s.err != nil:
				s.err = fmt.Errorf("%w; an earlier write failed: %w", s.err, p.first)
			case p.first != nil:
				s.err = fmt.Errorf("kafka write to topic %s not taken as acknowledged: an earlier write failed: %w", s.msg.Topic, p.first)
			case s.err != nil:
				p.first = s.err
				p.failed.Store(true)
			default:
				p.acked.Store(p.next)
			}
			if s.err != nil {
				s.msg = nil // as goka's producer finishes a failed promise
			}
			s.finish(s.msg, s.err)
			p.next++
		}
	}
}

// Sent implements engine.Durability.
func (p *producer) Sent() uint64 { return p.sent.Load() }

// Acknowledged implements engine.Durability.
func (p *producer) Acknowledged() uint64 { return p.acked.Load() }

// Emit implements goka.Producer.
func (p *producer) Emit(topic, key string, value []byte) *goka.Promise {
	return p.EmitWithHeaders(topic, key, value, nil)
}

// EmitWithHeaders implements goka.Producer.
func (p *producer) EmitWithHeaders(topic, key string, value []byte, headers goka.Headers) *goka.Promise {
	promise, finish := goka.NewPromiseWithFinisher()
	msg := &sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(key), Value: sarama.ByteEncoder(value)}
	if value == nil {
		msg.Value = nil // a tombstone (goka's Delete)
	}
	// No timestamp: sarama stamps the write's time. A dead letter's or late record's time of write
	// is how a restarted processor finds it (aside.go); the original's is in its headers.
	msg.Headers = recordHeaders(headers)
	// The number orders settlement; within one partition's callbacks it follows the calls.
	msg.Metadata = &msgMeta{seq: p.sent.Add(1), finish: finish}
	p.p.Input() <- msg
	return promise
}

// recordHeaders are goka's headers as sarama's, sorted by key so that a repeat of a record is
// identical to the first (maps iterate in any order).
func recordHeaders(headers goka.Headers) []sarama.RecordHeader {
	if len(headers) == 0 {
		return nil
	}
	out := make([]sarama.RecordHeader, 0, len(headers))
	for k, v := range headers {
		out = append(out, sarama.RecordHeader{Key: []byte(k), Value: v})
	}
	slices.SortFunc(out, func(a, b sarama.RecordHeader) int { return strings.Compare(string(a.Key), string(b.Key)) })
	return out
}

// Close stops the producer, waiting (up to a minute, as goka's does) for the outstanding
// messages' promises to be settled.
func (p *producer) Close() error {
	p.p.AsyncClose()
	done := make(chan struct{})
	go func() { p.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Minute):
	}
	return nil
}
