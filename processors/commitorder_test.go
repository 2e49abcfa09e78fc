package processors

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/IBM/sarama"
	"github.com/lovoo/goka"
)

// fakeSession is a sarama session that records the marks it is given, forward only as sarama's.
type fakeSession struct {
	sarama.ConsumerGroupSession // nil: only what commitOrder uses is implemented
	claims                      map[string][]int32
	mu                          sync.Mutex
	marked                      map[topicPartition][]int64
	meta                        map[topicPartition]string // of the highest mark, as sarama keeps it
}

func newFakeSession(claims map[string][]int32) *fakeSession {
	return &fakeSession{claims: claims, marked: map[topicPartition][]int64{}, meta: map[topicPartition]string{}}
}

func (f *fakeSession) Claims() map[string][]int32 { return f.claims }
func (f *fakeSession) Context() context.Context   { return context.Background() }
func (f *fakeSession) MarkOffset(topic string, partition int32, offset int64, metadata string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	tp := topicPartition{topic, partition}
	if prev := f.marked[tp]; len(prev) == 0 || offset > slices.Max(prev) {
		f.meta[tp] = metadata
	}
	f.marked[tp] = append(f.marked[tp], offset)
}

// committed is the offset sarama would commit: the highest marked.
func (f *fakeSession) committed(topic string, partition int32) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := int64(-1)
	for _, o := range f.marked[topicPartition{topic, partition}] {
		c = max(c, o)
	}
	return c
}

// nopSession claims in/0 and drops marks, for the benchmark.
type nopSession struct{ sarama.ConsumerGroupSession }

func (nopSession) Claims() map[string][]int32              { return map[string][]int32{"in": {0}} }
func (nopSession) MarkOffset(string, int32, int64, string) {}

// gokaContext names goka.Context for embedding: a field named Context would hide its method.
type gokaContext = goka.Context

// fakeContext is the part of goka's callback context that track reads.
type fakeContext struct {
	gokaContext
	topic     string
	partition int32
	offset    int64
}

func (c fakeContext) Topic() goka.Stream { return goka.Stream(c.topic) }
func (c fakeContext) Partition() int32   { return c.partition }
func (c fakeContext) Offset() int64      { return c.offset }

// marks drives one claim of an ordered session: start notes callbacks starting, finish marks a
// record as goka does (its offset + 1), and want checks what sarama was told to commit.
type marks struct {
	t    *testing.T
	sess *fakeSession
	os   *orderedSession
}

func newMarks(t *testing.T) *marks {
	fs := newFakeSession(map[string][]int32{"in": {0}})
	return &marks{t: t, sess: fs, os: newOrderedSession(fs)}
}

func (m *marks) start(offsets ...int64) {
	for _, o := range offsets {
		m.os.started("in", 0, o)
	}
}

func (m *marks) finish(offset, want int64) {
	m.t.Helper()
	m.os.MarkOffset("in", 0, offset+1, "")
	if got := m.sess.committed("in", 0); got != want {
		m.t.Fatalf("after offset %d finished: committed %d, want %d", offset, got, want)
	}
}

func TestCommitOrderOutOfOrderCompletions(t *testing.T) {
	m := newMarks(t)
	m.start(0, 1, 2, 3, 4)
	m.finish(2, -1) // 0 and 1 are in flight: nothing commits
	m.finish(1, -1)
	m.finish(0, 3) // 0, 1, 2 are done: the next to consume is 3
	m.finish(4, 3)
	m.finish(3, 5)
}

func TestCommitOrderGapsInOffsets(t *testing.T) {
	// Offsets a compacted topic or transaction markers leave out are never delivered.
	m := newMarks(t)
	m.start(10, 12, 15)
	m.finish(12, -1)
	m.finish(10, 13)
	m.finish(15, 16)
	m.start(100)
	m.finish(100, 101)
}

func TestCommitOrderUnknownOffsets(t *testing.T) {
	// goka marks nil-valued records without running a callback: they are done in their place.
	m := newMarks(t)
	m.finish(7, 8) // nothing in flight
	m.start(9)
	m.finish(8, 9) // before everything noted: nothing before it is in flight
	m.start(10)
	m.finish(11, 9) // after everything noted: waits for 9 and 10
	m.finish(9, 10)
	m.finish(10, 12)
	m.start(20, 30)
	m.finish(25, 12) // between two noted ones: waits for 20
	m.finish(20, 26)
	m.finish(30, 31)
	m.finish(5, 31) // long committed
}

func TestCommitOrderFailureHoldsPrefix(t *testing.T) {
	// Record 1's write failed for good: goka never marks it, and nothing after it commits.
	m := newMarks(t)
	m.start(0, 1, 2, 3)
	m.finish(0, 1)
	m.finish(2, 1)
	m.finish(3, 1)
	m.start(4)
	m.finish(4, 1)
}

func TestCommitOrderStartedOutOfOrderIgnored(t *testing.T) {
	// Offsets that do not come ascending are not noted (their marks count as unknown ones).
	m := newMarks(t)
	m.start(5, 3)
	m.finish(5, 6)
	m.finish(3, 6)
}

// TestCommitOrderRandom checks the marker against its definition: after every mark, sarama was
// told the offset after the longest prefix of started records that are all done.
func TestCommitOrderRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 200 {
		m := newMarks(t)
		var offsets []int64
		o := int64(rng.IntN(5))
		for range 1 + rng.IntN(300) {
			offsets = append(offsets, o)
			o += 1 + int64(rng.IntN(3)*rng.IntN(2)) // mostly contiguous, some gaps
		}
		m.start(offsets...)
		order := rng.Perm(len(offsets))
		done := make([]bool, len(offsets))
		for _, i := range order {
			done[i] = true
			want := int64(-1)
			for j := range offsets {
				if !done[j] {
					break
				}
				want = offsets[j] + 1
			}
			m.os.MarkOffset("in", 0, offsets[i]+1, "")
			if got := m.sess.committed("in", 0); got != want {
				t.Fatalf("round %d: after %d finished: committed %d, want %d", round, offsets[i], got, want)
			}
		}
		if p := m.os.claims[topicPartition{"in", 0}]; len(p.pending) != 0 || p.head != 0 {
			t.Fatalf("round %d: %d records still pending after all finished", round, len(p.pending)-p.head)
		}
	}
}

// TestCommitOrderSessions checks the wiring: callbacks note offsets in the current session,
// claims are apart, marks of topics the session does not claim pass through, and a new session
// (a rebalance) starts with nothing pending.
func TestCommitOrderSessions(t *testing.T) {
	var c commitOrder
	noop := func(goka.Context, any) {}
	cb := c.track(noop)
	cb(fakeContext{topic: "in", partition: 0, offset: 0}, nil) // no session yet: not noted
	s1 := newFakeSession(map[string][]int32{"in": {0, 1}, "loop": {0, 1}})
	os1 := c.begin(s1, nil)
	for _, o := range []int64{3, 4} {
		cb(fakeContext{topic: "in", partition: 0, offset: o}, nil)
		cb(fakeContext{topic: "loop", partition: 0, offset: o}, nil)
	}
	os1.MarkOffset("in", 0, 5, "")
	os1.MarkOffset("loop", 0, 4, "")
	os1.MarkOffset("other", 0, 9, "")
	if got := s1.committed("in", 0); got != -1 {
		t.Fatalf("in/0 committed %d while offset 3 is in flight", got)
	}
	if got := s1.committed("loop", 0); got != 4 {
		t.Fatalf("loop/0 committed %d, want 4", got)
	}
	if got := s1.committed("other", 0); got != 9 {
		t.Fatalf("a topic the session does not claim: committed %d, want 9 (passed through)", got)
	}
	c.end(os1)
	// The next generation resumes from the last commit; 3 and 4 are delivered again.
	s2 := newFakeSession(map[string][]int32{"in": {0}})
	os2 := c.begin(s2, nil)
	cb(fakeContext{topic: "in", partition: 0, offset: 3}, nil)
	os2.MarkMessage(&sarama.ConsumerMessage{Topic: "in", Partition: 0, Offset: 3}, "")
	if got := s2.committed("in", 0); got != 4 {
		t.Fatalf("new session: committed %d, want 4", got)
	}
	c.end(os1) // a stale end leaves the current session
	if c.cur.Load() != os2 {
		t.Fatal("ending an old session dropped the current one")
	}
}

// BenchmarkCommitOrder is the cost per record of ordering commits: a callback noting its offset
// and goka's mark, with marks a few records behind (the producer settles while callbacks run);
// "contended" marks from another goroutine, as the producer's settling goroutine does.
func BenchmarkCommitOrder(b *testing.B) {
	const lag = 64
	b.Run("one-goroutine", func(b *testing.B) {
		var c commitOrder
		os := c.begin(nopSession{}, nil)
		cb := c.track(func(goka.Context, any) {})
		b.ReportAllocs()
		for i := range int64(b.N) {
			cb(fakeContext{topic: "in", partition: 0, offset: i}, nil)
			if i >= lag {
				os.MarkOffset("in", 0, i-lag+1, "")
			}
		}
	})
	b.Run("contended", func(b *testing.B) {
		var c commitOrder
		os := c.begin(nopSession{}, nil)
		cb := c.track(func(goka.Context, any) {})
		started := make(chan int64, 1024)
		done := make(chan struct{})
		go func() {
			defer close(done)
			for o := range started {
				os.MarkOffset("in", 0, o+1, "")
			}
		}()
		b.ReportAllocs()
		for i := range int64(b.N) {
			cb(fakeContext{topic: "in", partition: 0, offset: i}, nil)
			started <- i
		}
		close(started)
		<-done
	})
}

// BenchmarkClaimHop is what the alternative to track would add per record: noting offsets as
// records leave a wrapped claim's Messages channel takes a goroutine that forwards them, one more
// channel hop (sarama's channels hold 256 messages) on top of the marks' cost.
func BenchmarkClaimHop(b *testing.B) {
	for _, hop := range []bool{false, true} {
		b.Run(map[bool]string{false: "direct", true: "forwarded"}[hop], func(b *testing.B) {
			src := make(chan *sarama.ConsumerMessage, 256)
			out := src
			if hop {
				out = make(chan *sarama.ConsumerMessage, 256)
				go func() {
					for m := range src {
						out <- m
					}
					close(out)
				}()
			}
			msg := &sarama.ConsumerMessage{}
			go func() {
				for range b.N {
					src <- msg
				}
				close(src)
			}()
			for range out {
			}
		})
	}
}

// TestCommitMetadataAsideFrom checks the time each commit carries (asideMetadata): nothing was set
// aside for a record at or after the committed offset before it. That is the start of the first
// record in flight, or the time of the commit when none is; and, while the session processes
// again records a run before it set something aside for, the earliest such write not yet passed.
func TestCommitMetadataAsideFrom(t *testing.T) {
	clock := int64(1000)
	defer func(f func() int64) { now = f }(now)
	now = func() int64 { return clock }
	fs := newFakeSession(map[string][]int32{"in": {0}})
	var c commitOrder
	// A run before this session wrote for records 4 (at 700) and 6 (at 500).
	scan := &asideScan{inherited: map[topicPartition][]inherited{{"in", 0}: {{offset: 4, at: 700}, {offset: 6, at: 500}}}}
	os := c.begin(fs, scan)
	want := func(offset, from int64) {
		t.Helper()
		got, ok := parseAsideMetadata(fs.meta[topicPartition{"in", 0}])
		if c := fs.committed("in", 0); c != offset || !ok || got != from {
			t.Fatalf("committed %d with time %d (%v), want %d with %d", c, got, ok, offset, from)
		}
	}
	for o := int64(3); o <= 8; o++ {
		os.started("in", 0, o)
		clock += 100 // record o started at 1000 + 100*(o-3)
	}
	os.MarkOffset("in", 0, 4, "")
	want(4, 500) // records 4 and 6 were written for at 700 and 500
	os.MarkOffset("in", 0, 5, "")
	want(5, 500)
	os.MarkOffset("in", 0, 6, "")
	want(6, 500)
	os.MarkOffset("in", 0, 7, "")
	want(7, 1400) // past what the run before wrote: record 7's start
	os.MarkOffset("in", 0, 9, "")
	want(7, 1400) // 7 is in flight
	os.MarkOffset("in", 0, 8, "")
	want(9, clock) // nothing in flight: now
	// Metadata other than ours is not read as a time.
	for _, m := range []string{"", "abacus.aside-from=x", "other=5"} {
		if _, ok := parseAsideMetadata(m); ok {
			t.Fatalf("metadata %q read as a time", m)
		}
	}
}
