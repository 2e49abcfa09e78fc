package abacustest

import (
	"errors"
	"slices"
	"strings"

	"github.com/lovoo/goka"

	"github.com/abacus-stream/abacus/deadletter"
)

// kafka is the driver's Kafka as the engine sees it (engine.Durability and engine.DurableSender):
// messages are acknowledged AckLag deliveries after they were sent. It is not the Driver's own
// API, which users would see.
type kafka struct{ d *Driver }

// Sent implements engine.Durability.
func (k kafka) Sent() uint64 { return k.d.sent }

// Acknowledged implements engine.Durability.
func (k kafka) Acknowledged() uint64 { return k.d.ackedNow }

// delivered moves acknowledgements on by one delivery.
func (d *Driver) delivered() {
	if d.opts.AckLag <= 0 {
		d.ackedNow = d.sent
		return
	}
	d.sentLog = append(d.sentLog, d.sent)
	if len(d.sentLog) > d.opts.AckLag {
		d.ackedNow = max(d.ackedNow, d.sentLog[len(d.sentLog)-1-d.opts.AckLag])
		d.sentLog = d.sentLog[1:]
	}
}

// SendDurable implements engine.DurableSender: the processor sends such a message through a
// producer of its own and waits for Kafka's acknowledgement; here it is output at once, acknowledged,
// and not counted among the messages AckLag delays.
func (k kafka) SendDurable(topic, key string, value []byte, headers goka.Headers) error {
	if k.d.durableErr != nil {
		return k.d.durableErr
	}
	k.d.durable++
	k.d.record(topic, key, value, headers)
	return nil
}

// drain processes queued deliveries, and what they cause, until none is left.
func (d *Driver) drain() {
	d.t.Helper()
	if d.failed != nil && d.opts.OnFail != nil {
		d.queue = nil
		return
	}
	for len(d.queue) > 0 && d.failed == nil {
		dl := d.queue[0]
		d.queue = d.queue[1:]
		d.deliver(dl)
		d.delivered()
	}
	if d.failed != nil {
		if d.opts.OnFail != nil {
			d.opts.OnFail(d.failed)
			d.queue = nil
			return
		}
		d.t.Fatalf("abacustest: the processor stopped: %v", d.failed)
	}
}

func (d *Driver) deliver(dl delivery) {
	r := d.logs[dl.topic][dl.partition][dl.offset]
	ctx := &fakeContext{d: d, topic: dl.topic, partition: dl.partition, offset: dl.offset, rec: r}
	eng, pl := d.engs[dl.partition], d.plans[dl.partition]
	cb := eng.LoopCallback()
	if dl.topic != d.loopTopic() {
		cb = nil
		for i, s := range pl.Sources {
			if s.Topic == dl.topic {
				cb = eng.SourceCallback(i)
			}
		}
		if cb == nil {
			// A source this partition's version does not have (a rolling rollout adding one):
			// its records wait, uncommitted, for the version that reads them.
			return
		}
	}
	defer func() {
		if x := recover(); x != nil {
			var f failure
			if errors.As(asError(x), &f) {
				d.failed = f.err
				return
			}
			if d.failReturns && d.failed != nil {
				return // the engine leaving the callback after a Fail that returned
			}
			panic(x)
		}
	}()
	cb(ctx, r.value)
	if dl.topic != d.loopTopic() {
		d.processed(dl)
	}
}

// processed notes that a source record was processed.
func (d *Driver) processed(dl delivery) {
	parts := d.done[dl.topic]
	if parts == nil {
		parts = make([][]bool, d.opts.Partitions)
		d.done[dl.topic] = parts
	}
	ds := parts[dl.partition]
	for int64(len(ds)) <= dl.offset {
		ds = append(ds, false)
	}
	ds[dl.offset] = true
	parts[dl.partition] = ds
}

// isDone reports whether a source record was processed.
func (d *Driver) isDone(topic string, partition int32, offset int64) bool {
	parts := d.done[topic]
	return parts != nil && offset < int64(len(parts[partition])) && parts[partition][offset]
}

// committed is the offset the processor group resumes a source partition from after a stop:
// after the records processed in a row from the start (a stopping processor waits for Kafka's
// acknowledgement of what they wrote, and commits them).
func (d *Driver) committed(topic string, partition int32) int64 {
	var ds []bool
	if parts := d.done[topic]; parts != nil {
		ds = parts[partition]
	}
	n := int64(0)
	for n < int64(len(ds)) && ds[n] {
		n++
	}
	return n
}

func asError(x any) error {
	if err, ok := x.(error); ok {
		return err
	}
	return nil
}

// output takes every message the engine emits.
func (d *Driver) output(_ goka.Context, topic, key string, value []byte, headers goka.Headers) {
	d.sent++
	d.record(topic, key, value, headers)
}

// record keeps a message the engine emitted.
func (d *Driver) record(topic, key string, value []byte, headers goka.Headers) {
	m := Message{Topic: topic, Key: key, Value: value}
	for k, v := range headers {
		m.Headers = append(m.Headers, deadletter.Header{Key: k, Value: v})
	}
	slices.SortFunc(m.Headers, func(a, b deadletter.Header) int { return strings.Compare(a.Key, b.Key) })
	d.out = append(d.out, m)
}
