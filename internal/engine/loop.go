package engine

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/abacus-stream/abacus/deadletter"
	"github.com/abacus-stream/abacus/internal/wire"
)

// loopKind tags the messages the processor sends itself through goka's loop topic.
type loopKind byte

const (
	// loopClose asks an entity to emit and prune its windows closed at the carried stream time.
	loopClose loopKind = 1
	// loopTick is the periodic per-partition heartbeat that lets idle partitions close windows.
	loopTick loopKind = 2
	// loopEvent is a source event re-keyed by entity, carrying its source position for dedup,
	// as earlier versions wrote it (without the record's timestamp). It is read, never written.
	loopEventV1 loopKind = 3
	// loopEvent is a source event re-keyed by entity, with its source position and its record's
	// timestamp, by which it is judged from the future or not.
	loopEvent loopKind = 4
	// loopNudge is a partition's message to itself while closes wait for Kafka's
	// acknowledgement: it comes back once Kafka holds it, and the partition looks again.
	loopNudge loopKind = 5
	// loopPartial is a source partition's partial total of a rollup key's window, to its owner
	// (partialMsg).
	loopPartial loopKind = 6
	// loopProgress tells a partition, under its tick key, that every final partial the sender
	// has for windows closing at or before a stream time is sent and acknowledged.
	loopProgress loopKind = 7
	// loopPartialNamed is a partial total naming its set and aggregations (partialMsg); it
	// replaces loopPartial, which named them by position and is still read.
	loopPartialNamed loopKind = 8
	// loopProgressEnds is a progress that says, per rollup set by name, up to which end the
	// sender has sent every window's final partial; it replaces loopProgress, still read, whose
	// stream time the owner had to turn into windows by its own graces.
	loopProgressEnds loopKind = 9
)

// setEnd is, in a progress message, the end up to which the sender has sent the final partial of
// every window of the named set, and from when it runs the set (a window that started before has
// missed events there: the owner gives it no total).
type setEnd struct {
	set  string
	end  int64
	live int64
}

// loopMsg is the decoded loop message. Encoding: byte kind, then
// close and tick: nothing (messages written by earlier versions carry a time, which is ignored:
// a time carried in a loop message may come from a crashed run's future, so none decides anything);
// event: uvarint source index, uvarint len + topic, varint partition, varint offset, varint
// record timestamp (ms; not in kind 3), remaining bytes = record value;
// partial: see partialMsg; progress: varint source partition (partition), varint stream time
// (offset), then (loopProgressEnds) uvarint #sets, each: string set, varint end, varint live-from.
type loopMsg struct {
	kind      loopKind
	source    int
	topic     string
	partition int32
	offset    int64
	timestamp int64 // of the source record, ms; 0 when unknown
	value     []byte
	partial   *partialMsg
	ends      []setEnd // progress: per rollup set
	byEnd     bool     // progress: ends were sent (loopProgressEnds), not only a stream time
}

func (m *loopMsg) encode() []byte {
	if m.kind == loopPartial && m.partial != nil {
		return m.partial.encode()
	}
	b := make([]byte, 0, 32+len(m.topic)+len(m.value))
	kind := m.kind
	if kind == loopProgress && m.byEnd {
		kind = loopProgressEnds
	}
	b = append(b, byte(kind))
	switch m.kind {
	case loopEvent:
		b = binary.AppendUvarint(b, uint64(m.source))
		b = wire.AppendString(b, m.topic)
		b = binary.AppendVarint(b, int64(m.partition))
		b = binary.AppendVarint(b, m.offset)
		b = binary.AppendVarint(b, m.timestamp)
		b = append(b, m.value...)
	case loopProgress:
		b = binary.AppendVarint(b, int64(m.partition))
		b = binary.AppendVarint(b, m.offset)
		if !m.byEnd {
			break // a progress of an earlier version: a stream time only
		}
		b = binary.AppendUvarint(b, uint64(len(m.ends)))
		for _, se := range m.ends {
			b = wire.AppendString(b, se.set)
			b = binary.AppendVarint(b, se.end)
			b = binary.AppendVarint(b, se.live)
		}
	}
	return b
}

// errCorruptLoop is wrapped by every loop decoding error.
var errCorruptLoop = errors.New("corrupt loop message")

func decodeLoop(b []byte) (*loopMsg, error) {
	if len(b) == 0 {
		return nil, fmt.Errorf("%w: empty", errCorruptLoop)
	}
	m := &loopMsg{kind: loopKind(b[0])}
	d := wire.NewReader(b[1:], errCorruptLoop)
	switch m.kind {
	case loopClose, loopTick, loopNudge:
	case loopPartial, loopPartialNamed:
		p, err := decodePartial(m.kind, d)
		if err != nil {
			return nil, err
		}
		m.kind, m.partial = loopPartial, p
	case loopProgress, loopProgressEnds:
		m.partition = int32(d.Varint())
		m.offset = d.Varint()
		if m.kind == loopProgressEnds {
			n := d.Count()
			for i := 0; i < n && d.Err() == nil; i++ {
				m.ends = append(m.ends, setEnd{set: d.String(), end: d.Varint(), live: d.Varint()})
			}
			m.kind, m.byEnd = loopProgress, true
		}
	case loopEvent, loopEventV1:
		m.source = int(d.Uvarint())
		m.topic = d.String()
		m.partition = int32(d.Varint())
		m.offset = d.Varint()
		if m.kind == loopEvent {
			m.timestamp = d.Varint()
		}
		m.kind = loopEvent
		m.value = append([]byte(nil), d.Rest()...)
	default:
		return nil, fmt.Errorf("%w: unknown kind %d", errCorruptLoop, m.kind)
	}
	if err := d.Err(); err != nil {
		return nil, err
	}
	return m, nil
}

// origin is the position of a re-keyed event's original record.
func (m *loopMsg) origin() deadletter.Source {
	return deadletter.Source{Topic: m.topic, Partition: m.partition, Offset: m.offset}
}
