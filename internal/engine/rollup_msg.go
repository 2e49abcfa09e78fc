package engine

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	"github.com/abacus-stream/abacus/internal/plan"
	"github.com/abacus-stream/abacus/internal/wire"
)

// partialMsg is a partial total sent to a rollup key's owner. It names its set and aggregations
// (loopPartialNamed), so that an owner running another version of the topology (sets or
// aggregations added, removed or reordered, during a rolling rollout or across a restart) finds
// them, or knows it has them not. Encoding after the kind byte:
//
//	string set, varint start, uvarint end - start, varint source partition, byte final (0 early,
//	1 final, 2 final but failed: too large to send, 3 failed: user code could not merge), uvarint
//	revision, uvarint #aggs, each: string name, string kind, uvarint len + bytes.
//
// An aggregation the sender's window lacks (state.Window.Absent) is not listed. Partials of
// earlier versions (loopPartial) named the set by its position and listed every aggregation in
// order: uvarint set instead of the name, and each aggregation as uvarint len + bytes.
type partialMsg struct {
	setName    string // as sent (loopPartialNamed); empty in a partial of an earlier version
	set        uint16 // the set's position: the sender's in a partial of an earlier version; this plan's once resolved
	start, end int64
	from       int32
	final      bool
	failed     bool // final, but failed: the owner gives the window up
	userError  bool // failed because user code could not merge a contribution (else: too large)
	revision   uint64
	named      []namedAgg // as sent
	// aggs are the accumulators by position: as sent in a partial of an earlier version, and in
	// this plan's set once resolved (nil for an aggregation the partial does not have, listed in
	// absent).
	aggs   [][]byte
	absent []int
}

// namedAgg is one aggregation's accumulator in a partial, with the name and kind it has in the
// sender's topology.
type namedAgg struct {
	name, kind string
	value      []byte
}

// newPartial is the partial of set's window (start, end) from source partition from, carrying
// accs but for the absent aggregations.
func newPartial(set *plan.Set, start, end int64, from int32, final bool, revision uint64, accs []plan.Accumulator, absent []int) *partialMsg {
	m := &partialMsg{setName: set.Name, set: set.Index, start: start, end: end, from: from, final: final, revision: revision}
	for k, a := range accs {
		if !slices.Contains(absent, k) {
			m.named = append(m.named, namedAgg{name: set.Aggs[k].Name, kind: set.Aggs[k].Kind, value: a.AppendBinary(nil)})
		}
	}
	return m
}

// encode writes m as sent: by names, or, for a partial of an earlier version read back (no set
// name), as that version did, by position.
func (m *partialMsg) encode() []byte {
	var b []byte
	if m.setName == "" {
		b = append(b, byte(loopPartial))
		b = binary.AppendUvarint(b, uint64(m.set))
	} else {
		b = append(b, byte(loopPartialNamed))
		b = wire.AppendString(b, m.setName)
	}
	b = binary.AppendVarint(b, m.start)
	b = binary.AppendUvarint(b, uint64(m.end-m.start))
	b = binary.AppendVarint(b, int64(m.from))
	switch {
	case m.failed && m.userError:
		b = append(b, 3)
	case m.failed:
		b = append(b, 2)
	case m.final:
		b = append(b, 1)
	default:
		b = append(b, 0)
	}
	b = binary.AppendUvarint(b, m.revision)
	if m.setName == "" {
		b = binary.AppendUvarint(b, uint64(len(m.aggs)))
		for _, a := range m.aggs {
			b = binary.AppendUvarint(b, uint64(len(a)))
			b = append(b, a...)
		}
		return b
	}
	b = binary.AppendUvarint(b, uint64(len(m.named)))
	for _, a := range m.named {
		b = wire.AppendString(b, a.name)
		b = wire.AppendString(b, a.kind)
		b = binary.AppendUvarint(b, uint64(len(a.value)))
		b = append(b, a.value...)
	}
	return b
}

// decodePartial reads a partial of either encoding (kind says which).
func decodePartial(kind loopKind, d *wire.Reader) (*partialMsg, error) {
	m := &partialMsg{}
	var set uint64
	if kind == loopPartialNamed {
		m.setName = d.String()
	} else {
		set = d.Uvarint()
		m.set = uint16(set)
	}
	m.start = d.Varint()
	m.end = m.start + int64(d.Uvarint())
	m.from = int32(d.Varint())
	switch f := d.Byte(); f {
	case 0:
	case 1:
		m.final = true
	case 2:
		m.final, m.failed = true, true
	case 3:
		m.final, m.failed, m.userError = true, true, true
	default:
		if d.Err() == nil {
			return nil, fmt.Errorf("%w: partial total with final byte %d", errCorruptLoop, f)
		}
	}
	if set > math.MaxUint16 && d.Err() == nil {
		return nil, fmt.Errorf("%w: partial total of set %d", errCorruptLoop, set)
	}
	m.revision = d.Uvarint()
	n := d.Count()
	for i := 0; i < n && d.Err() == nil; i++ {
		if kind == loopPartialNamed {
			m.named = append(m.named, namedAgg{name: d.String(), kind: d.String(), value: append([]byte(nil), d.Bytes()...)})
		} else {
			m.aggs = append(m.aggs, append([]byte(nil), d.Bytes()...))
		}
	}
	return m, d.Err()
}

// resolve finds m's set in the plan, and lays its aggregations out as the set has them: by name
// (an aggregation the partial lacks, or has under another kind, is absent from it), or, in a
// partial of an earlier version, by position. It says why when the plan has no such rollup set.
func (m *partialMsg) resolve(p *plan.Plan) (*plan.Set, string) {
	if m.setName == "" {
		if int(m.set) >= len(p.Sets) || p.Sets[m.set].Rollup == nil {
			return nil, fmt.Sprintf("set %d (by position, from an earlier version) is not a rollup set of this topology", m.set)
		}
		set := p.Sets[m.set]
		if len(m.aggs) != len(set.Aggs) {
			return nil, fmt.Sprintf("set %d (by position, from an earlier version) has %d aggregations, the partial %d", m.set, len(set.Aggs), len(m.aggs))
		}
		return set, ""
	}
	set := p.SetByName(m.setName)
	if set == nil || set.Rollup == nil {
		return nil, fmt.Sprintf("set %q is not a rollup set of this topology", m.setName)
	}
	m.set = set.Index
	m.aggs = make([][]byte, len(set.Aggs))
	m.absent = nil
	for k, a := range set.Aggs {
		i := slices.IndexFunc(m.named, func(n namedAgg) bool { return n.name == a.Name })
		if i < 0 || m.named[i].kind != a.Kind {
			m.absent = append(m.absent, k)
			continue
		}
		m.aggs[k] = m.named[i].value
	}
	return set, ""
}
