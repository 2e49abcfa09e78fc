package abacustest

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lovoo/goka"

	"github.com/abacus-stream/abacus/partitioner"
	"github.com/abacus-stream/abacus/state"
)

// failure is how the fake context's Fail leaves the callback, as goka's does.
type failure struct{ err error }

func (f failure) Error() string { return f.err.Error() }

// Unwrap returns the error the processor failed with.
func (f failure) Unwrap() error { return f.err }

// fakeContext is goka.Context over the driver's topics and tables.
type fakeContext struct {
	d         *Driver
	topic     string
	partition int32
	offset    int64
	rec       record
}

func (c *fakeContext) Topic() goka.Stream       { return goka.Stream(c.topic) }
func (c *fakeContext) Key() string              { return c.rec.key }
func (c *fakeContext) Partition() int32         { return c.partition }
func (c *fakeContext) Offset() int64            { return c.offset }
func (c *fakeContext) Group() goka.Group        { return goka.Group(c.d.plan.Name) }
func (c *fakeContext) Headers() goka.Headers    { return c.rec.headers }
func (c *fakeContext) Timestamp() time.Time     { return c.rec.ts }
func (c *fakeContext) Context() context.Context { return context.Background() }
func (c *fakeContext) DeferCommit() func(error) { return func(error) {} }
func (c *fakeContext) Fail(err error) {
	if c.d.failReturns {
		c.d.failed = err // as goka's Fail once its processor is stopping: noted, and it returns
		return
	}
	panic(failure{err})
}

func (c *fakeContext) Value() any {
	b, _ := c.d.tables[c.partition].Get(c.rec.key)
	if b == nil {
		return nil
	}
	v, err := state.Codec{}.Decode(b)
	if err != nil {
		c.Fail(fmt.Errorf("decode table value of %q: %w", c.rec.key, err))
	}
	return v
}

func (c *fakeContext) SetValue(v any, _ ...goka.ContextOption) {
	b, err := state.Codec{}.Encode(v)
	if err != nil {
		c.Fail(err)
	}
	_ = c.d.tables[c.partition].Set(c.rec.key, b)
	c.d.changelog[c.partition] = append(c.d.changelog[c.partition], change{c.rec.key, b})
	c.d.sent++
}

func (c *fakeContext) Delete(_ ...goka.ContextOption) {
	_ = c.d.tables[c.partition].Delete(c.rec.key)
	c.d.changelog[c.partition] = append(c.d.changelog[c.partition], change{key: c.rec.key})
	c.d.sent++
}

func (c *fakeContext) Emit(topic goka.Stream, key string, value any, _ ...goka.ContextOption) {
	b, _ := value.([]byte)
	c.d.output(c, string(topic), key, b, nil)
}

func (c *fakeContext) Loopback(key string, value any, _ ...goka.ContextOption) {
	b, _ := value.([]byte)
	loop := c.d.logs[c.d.loopTopic()]
	p := partitioner.Partition([]byte(key), int32(len(loop)))
	loop[p] = append(loop[p], record{key: key, value: b, ts: c.d.now})
	c.d.queue = append(c.d.queue, delivery{c.d.loopTopic(), p, int64(len(loop[p]) - 1)})
	c.d.sent++
	c.d.out = append(c.d.out, Message{Topic: c.d.loopTopic(), Key: key, Value: b, Partition: p, Offset: int64(len(loop[p]) - 1)})
}

func (c *fakeContext) Join(goka.Table) any {
	c.Fail(errors.New("abacustest: Join is not used by abacus"))
	return nil
}

func (c *fakeContext) Lookup(goka.Table, string) any {
	c.Fail(errors.New("abacustest: Lookup is not used by abacus"))
	return nil
}

var _ goka.Context = (*fakeContext)(nil)
