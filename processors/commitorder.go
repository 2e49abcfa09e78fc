package processors

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
	"github.com/lovoo/goka"
)

// commitOrder makes goka commit each partition's offsets in order. goka marks a record's offset
// (MarkOffset(offset+1)) as soon as its callback returned and the messages it sent are
// acknowledged, whatever happened to the records before it, and sarama's MarkOffset only moves
// forward: a record that sent nothing (a late event with no late topic, an event no set takes)
// marked at once, past earlier records whose writes were still in flight, and a crash then lost
// those writes; and a record whose write failed for good was skipped on restart when a later
// record's mark had passed it. Through commitOrder a mark commits only the contiguous prefix of
// records whose callbacks finished, so the committed offset never passes a record in flight or
// one that failed.
//
// The records are known from the callbacks: graph wraps every callback of the group (sources and
// loop) with track, which notes the record's offset as the callback starts. goka's partition
// processor runs a partition's callbacks one after the other in the order of each topic's
// offsets, so the offsets noted are ascending per topic/partition. A mark of an offset that was
// not noted is a record goka took without a callback (it commits nil-valued records at once, in
// the same order): it is done, in its place.
//
// One orderedSession holds a session's offsets, from its Setup to its Cleanup: a rebalance ends a
// session's claims and the next one starts with nothing pending; goka's partition processors
// stop (no callback starts) before Cleanup returns, and start after Setup, so a callback always
// notes its offset in the session that will mark it. A group run again in process (Run, after a
// broker outage) starts new sessions the same way.
type commitOrder struct {
	cur atomic.Pointer[orderedSession]
}

// track wraps a goka callback so that its record's offset is noted as the callback starts.
func (c *commitOrder) track(cb goka.ProcessCallback) goka.ProcessCallback {
	return func(ctx goka.Context, msg any) {
		if s := c.cur.Load(); s != nil {
			s.started(string(ctx.Topic()), ctx.Partition(), ctx.Offset())
		}
		cb(ctx, msg)
	}
}

// begin wraps a new session (at its Setup) and makes it the one callbacks note their offsets in.
// scan, if not nil, is what the session found set aside before it (asideLedger.scan): the times
// its commits carry start from there.
func (c *commitOrder) begin(sess sarama.ConsumerGroupSession, scan *asideScan) *orderedSession {
	s := newOrderedSession(sess)
	if scan != nil {
		for tp, m := range s.claims {
			m.inherit(scan.inherited[tp])
		}
	}
	c.cur.Store(s)
	return s
}

// end forgets a session once it ended (at its Cleanup).
func (c *commitOrder) end(s *orderedSession) { c.cur.CompareAndSwap(s, nil) }

// topicPartition names one claim of a session.
type topicPartition struct {
	topic     string
	partition int32
}

// orderedSession is a sarama session whose MarkOffset commits, per claim, only the prefix of
// records that are done (see commitOrder).
type orderedSession struct {
	sarama.ConsumerGroupSession
	// claims is built at Setup from the session's claims and only read after.
	claims map[topicPartition]*partitionMarks
}

func newOrderedSession(sess sarama.ConsumerGroupSession) *orderedSession {
	s := &orderedSession{ConsumerGroupSession: sess, claims: map[topicPartition]*partitionMarks{}}
	for topic, parts := range sess.Claims() {
		for _, p := range parts {
			s.claims[topicPartition{topic, p}] = &partitionMarks{}
		}
	}
	return s
}

// started notes that the callback of a record started.
func (s *orderedSession) started(topic string, partition int32, offset int64) {
	if m := s.claims[topicPartition{topic, partition}]; m != nil {
		m.started(offset)
	}
}

// MarkOffset implements sarama.ConsumerGroupSession: offset (the next one to consume, as goka
// passes it) says that the record before it is done; what is committed is the end of the done
// prefix, when it moved.
func (s *orderedSession) MarkOffset(topic string, partition int32, offset int64, metadata string) {
	m := s.claims[topicPartition{topic, partition}]
	if m == nil {
		// Not a claim of this session: nothing of it is tracked, and sarama ignores it.
		s.ConsumerGroupSession.MarkOffset(topic, partition, offset, metadata)
		return
	}
	if next, from, moved := m.done(offset - 1); moved {
		// Outside the lock: two marks may reach sarama in either order, and sarama keeps the
		// higher with its metadata.
		s.ConsumerGroupSession.MarkOffset(topic, partition, next, asideMetadata(from))
	}
}

// MarkMessage implements sarama.ConsumerGroupSession, as MarkOffset of the message's next offset.
func (s *orderedSession) MarkMessage(msg *sarama.ConsumerMessage, metadata string) {
	s.MarkOffset(msg.Topic, msg.Partition, msg.Offset+1, metadata)
}

// partitionMarks is the commit point of one claim: the records whose callbacks started and that
// are not yet committed, in offset order, and whether each is done.
type partitionMarks struct {
	mu sync.Mutex
	// pending[head:] are the records not committed, ascending; the first one is not done. The
	// array is reused from its start whenever everything is committed, so a busy claim does not
	// allocate.
	pending []pendingRecord
	head    int
	next    int64 // the offset last handed to sarama (next to consume); 0: none
	// before are the records a run before this session set something aside for, ascending, with
	// the time of the earliest such write at or after each (asideMetadata); before[0:] is
	// dropped as commits pass it.
	before []inherited
}

type pendingRecord struct {
	offset int64
	at     int64 // when its callback started, unix ms; 0 for a record never noted
	done   bool
}

// now is the clock of the commits' metadata (a variable for tests).
var now = func() int64 { return time.Now().UnixMilli() }

// inherit takes what runs before this session set aside (ascending by offset) and keeps, at each,
// the earliest time of it and everything after.
func (m *partitionMarks) inherit(in []inherited) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.before = slices.Clone(in)
	for i := len(m.before) - 2; i >= 0; i-- {
		m.before[i].at = min(m.before[i].at, m.before[i+1].at)
	}
}

// from is the commit metadata's time for a commit of m.next (asideMetadata): nothing was set
// aside for a record at or after it before that time. Called with mu held.
func (m *partitionMarks) from() int64 {
	t := now()
	if m.head < len(m.pending) && m.pending[m.head].at > 0 {
		t = min(t, m.pending[m.head].at)
	}
	i := 0
	for i < len(m.before) && m.before[i].offset < m.next {
		i++
	}
	m.before = m.before[i:]
	if len(m.before) > 0 {
		t = min(t, m.before[0].at)
	}
	return t
}

// started notes a record whose callback started. Offsets come ascending (see commitOrder); one
// that does not is not noted, and its mark is then taken as one of a record never noted.
func (m *partitionMarks) started(offset int64) {
	m.mu.Lock()
	if n := len(m.pending); offset >= m.next && (n == m.head || offset > m.pending[n-1].offset) {
		m.push(pendingRecord{offset: offset, at: now()})
	}
	m.mu.Unlock()
}

// push appends a record, moving the live ones to the array's start rather than growing it when
// there is room there.
func (m *partitionMarks) push(r pendingRecord) {
	if len(m.pending) == cap(m.pending) && m.head > 0 {
		n := copy(m.pending, m.pending[m.head:])
		m.pending, m.head = m.pending[:n], 0
	}
	m.pending = append(m.pending, r)
}

// done notes that the record at offset is done and returns the offset to commit (the one after
// the done prefix), the time its commit carries (from) and whether it moved.
func (m *partitionMarks) done(offset int64) (next, asideFrom int64, moved bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if offset < m.next {
		return m.next, 0, false // committed already
	}
	live := m.pending[m.head:]
	switch n := len(live); {
	case n == 0 || offset > live[n-1].offset:
		// Never noted, after everything that was: done in its place, at the end.
		m.push(pendingRecord{offset: offset, done: true})
	case offset < live[0].offset:
		// Never noted, before everything pending: nothing before it is in flight.
		m.next = offset + 1
		return m.next, m.from(), true
	default:
		i := find(live, offset)
		if live[i].offset == offset {
			live[i].done = true
		} else {
			// Never noted, between two that were: goka does not do that (it marks a record
			// it takes without a callback before the next callback starts), but if it did
			// the record is done in its place.
			m.pending = slices.Insert(m.pending, m.head+i, pendingRecord{offset: offset, done: true})
		}
	}
	i := m.head
	for i < len(m.pending) && m.pending[i].done {
		i++
	}
	if i == m.head {
		return m.next, 0, false
	}
	m.next = m.pending[i-1].offset + 1
	m.head = i
	if m.head == len(m.pending) {
		m.pending, m.head = m.pending[:0], 0
	}
	return m.next, m.from(), true
}

// find returns the index of offset in live, or where it would go; offset is within live's range.
// Marks come mostly in order and offsets mostly without gaps, so the offset's distance from the
// first one is tried first.
func find(live []pendingRecord, offset int64) int {
	if d := offset - live[0].offset; d < int64(len(live)) && live[d].offset == offset {
		return int(d)
	}
	i, _ := slices.BinarySearchFunc(live, offset, func(r pendingRecord, o int64) int {
		switch {
		case r.offset < o:
			return -1
		case r.offset > o:
			return 1
		}
		return 0
	})
	return i
}
