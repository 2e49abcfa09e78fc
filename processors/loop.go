package processors

import (
	"encoding/binary"
	"fmt"
)

// loopKind tags the messages the processor sends itself through goka's loop topic.
type loopKind byte

const (
	// loopClose asks an entity to emit and prune its windows closed at the carried stream time.
	loopClose loopKind = 1
	// loopTick is the periodic per-partition heartbeat that lets idle partitions close windows.
	loopTick loopKind = 2
	// loopEvent is a source event re-keyed by entity, carrying its source position for dedup.
	loopEvent loopKind = 3
)

// loopMsg is the decoded loop message. Encoding: byte kind, then
// close: varint stream time; tick: varint wall ms; event: uvarint source index,
// uvarint len + topic, varint partition, varint offset, remaining bytes = record value.
type loopMsg struct {
	kind      loopKind
	time      int64
	source    int
	topic     string
	partition int32
	offset    int64
	value     []byte
}

func (m *loopMsg) encode() []byte {
	b := make([]byte, 0, 32+len(m.topic)+len(m.value))
	b = append(b, byte(m.kind))
	switch m.kind {
	case loopClose, loopTick:
		b = binary.AppendVarint(b, m.time)
	case loopEvent:
		b = binary.AppendUvarint(b, uint64(m.source))
		b = binary.AppendUvarint(b, uint64(len(m.topic)))
		b = append(b, m.topic...)
		b = binary.AppendVarint(b, int64(m.partition))
		b = binary.AppendVarint(b, m.offset)
		b = append(b, m.value...)
	}
	return b
}

func decodeLoop(b []byte) (*loopMsg, error) {
	if len(b) == 0 {
		return nil, fmt.Errorf("loop message: empty")
	}
	m := &loopMsg{kind: loopKind(b[0])}
	b = b[1:]
	varint := func() int64 {
		v, n := binary.Varint(b)
		if n <= 0 {
			b = nil
			return 0
		}
		b = b[n:]
		return v
	}
	uvarint := func() (uint64, bool) {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			return 0, false
		}
		b = b[n:]
		return v, true
	}
	switch m.kind {
	case loopClose, loopTick:
		if len(b) == 0 {
			return nil, fmt.Errorf("loop message kind %d: truncated", m.kind)
		}
		m.time = varint()
	case loopEvent:
		src, ok1 := uvarint()
		tl, ok2 := uvarint()
		if !ok1 || !ok2 || tl > uint64(len(b)) {
			return nil, fmt.Errorf("loop event: truncated header")
		}
		m.source = int(src)
		m.topic = string(b[:tl])
		b = b[tl:]
		m.partition = int32(varint())
		if b == nil {
			return nil, fmt.Errorf("loop event: truncated partition")
		}
		m.offset = varint()
		if b == nil {
			return nil, fmt.Errorf("loop event: truncated offset")
		}
		m.value = append([]byte(nil), b...)
	default:
		return nil, fmt.Errorf("loop message: unknown kind %d", m.kind)
	}
	return m, nil
}
