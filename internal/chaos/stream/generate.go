package stream

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/abacus-stream/abacus/partitioner"
)

// Kind says what the generator meant a record to be. The oracle never reads it: it judges each
// record by its content and its place in its partition, as the pipeline does. The suite only
// counts kinds for its summary.
type Kind uint8

// The kinds of generated records.
const (
	OnTime    Kind = iota // in order, or out of order within every grace period
	Straggler             // out of order by more than the tumbling grace: late for some windows
	Late                  // minutes behind its partition's stream time: late for every window
	Future                // a day ahead of the wall clock: dead-lettered
	Malformed             // not an event: dead-lettered
	Duplicate             // a record produced again, a few records after its original
	Flush                 // the end-of-stream flush event of one partition
	numKinds
)

var kindNames = [numKinds]string{"on-time", "straggler", "late", "future", "malformed", "duplicate", "flush"}

// String names the kind.
func (k Kind) String() string {
	if k < numKinds {
		return kindNames[k]
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// Kinds lists every kind, for summaries.
func Kinds() []Kind {
	out := make([]Kind, numKinds)
	for i := range out {
		out[i] = Kind(i)
	}
	return out
}

// Record is one generated Kafka record.
type Record struct {
	Key, Value []byte
	Kind       Kind
}

// Generator produces the chaos stream, deterministically for a seed (future-dated events aside,
// whose times follow the wall clock so that they stay in the future however long a run lasts).
// Nominal event times advance by Step from Start; each event is then shifted by its kind.
type Generator struct {
	Seed     uint64
	Entities int           // distinct entities (default 200)
	Start    int64         // event time of the first nominal event, ms
	Step     time.Duration // nominal event time between consecutive events (default 10 ms)
	// Percentages of generated events of each kind; the rest are on time (defaults: 2 stragglers,
	// 3 late, 0.5 future, 0.5 malformed, 2 duplicated).
	StragglerPct, LatePct, FuturePct, MalformedPct, DuplicatePct float64
	// Jitter bounds how far an on-time event lags its nominal time (default 15 s, below every
	// grace period, so it is out of order but never late).
	Jitter time.Duration
	// Now is the wall clock future-dated events are judged by (default time.Now).
	Now func() time.Time
	// PadBytes pads every event with that many bytes, for tests that need a backlog of a size.
	PadBytes int

	rng     *rand.Rand
	n       int64
	pending []pendingDup
}

type pendingDup struct {
	after int64 // emit once n passes this
	rec   Record
}

func (g *Generator) init() {
	if g.rng != nil {
		return
	}
	g.rng = rand.New(rand.NewPCG(g.Seed, g.Seed^0x6a09e667f3bcc908))
	if g.Entities <= 0 {
		g.Entities = 200
	}
	if g.Step <= 0 {
		g.Step = 10 * time.Millisecond
	}
	if g.Jitter <= 0 {
		g.Jitter = 15 * time.Second
	}
	if g.Now == nil {
		g.Now = time.Now
	}
	if g.StragglerPct == 0 && g.LatePct == 0 && g.FuturePct == 0 && g.MalformedPct == 0 && g.DuplicatePct == 0 {
		g.StragglerPct, g.LatePct, g.FuturePct, g.MalformedPct, g.DuplicatePct = 2, 3, 0.5, 0.5, 2
	}
}

// EntityCount is how many entities the generator names (Entities, or its default).
func (g *Generator) EntityCount() int {
	g.init()
	return g.Entities
}

// entityName names the generator's entity i.
func entityName(i int) string { return fmt.Sprintf("ent-%03d", i) }

// Span is the event time n events cover.
func (g *Generator) Span(n int64) time.Duration {
	g.init()
	return time.Duration(n) * g.Step
}

// Next appends the next generated event's records to dst: the event, and any duplicate whose
// turn has come.
func (g *Generator) Next(dst []Record) []Record {
	g.init()
	i := g.n
	g.n++
	nominal := g.Start + int64(time.Duration(i)*g.Step/time.Millisecond)
	entity := entityName(g.rng.IntN(g.Entities))
	ev := Event{Entity: entity, Time: nominal, Kind: TypeMeasurement, V: float64(g.rng.IntN(1000)), Seq: i}
	if g.PadBytes > 0 {
		ev.Pad = strings.Repeat("x", g.PadBytes)
	}
	kind := OnTime
	x := g.rng.Float64() * 100
	switch {
	case x < g.StragglerPct:
		kind = Straggler
		ev.Time -= 20_000 + g.rng.Int64N(10_000)
	case x < g.StragglerPct+g.LatePct:
		kind = Late
		ev.Time -= 6*60_000 + g.rng.Int64N(14*60_000)
	case x < g.StragglerPct+g.LatePct+g.FuturePct:
		kind = Future
		ev.Time = g.Now().Add(24*time.Hour).UnixMilli() + g.rng.Int64N(60_000)
	case x < g.StragglerPct+g.LatePct+g.FuturePct+g.MalformedPct:
		kind = Malformed
	default:
		ev.Time -= g.rng.Int64N(g.Jitter.Milliseconds())
	}
	var rec Record
	if kind == Malformed {
		rec = Record{Key: []byte(entity), Value: g.malformed(ev), Kind: Malformed}
	} else {
		v, err := json.Marshal(ev)
		if err != nil {
			panic(err) // an Event always marshals
		}
		rec = Record{Key: []byte(entity), Value: v, Kind: kind}
	}
	dst = append(dst, rec)
	if g.rng.Float64()*100 < g.DuplicatePct {
		dup := rec
		dup.Kind = Duplicate
		g.pending = append(g.pending, pendingDup{after: i + 1 + g.rng.Int64N(50), rec: dup})
	}
	keep := g.pending[:0]
	for _, p := range g.pending {
		if g.n > p.after {
			dst = append(dst, p.rec)
		} else {
			keep = append(keep, p)
		}
	}
	g.pending = keep
	return dst
}

// malformed returns a value that is not a decodable event, in one of several ways.
func (g *Generator) malformed(ev Event) []byte {
	switch g.rng.IntN(4) {
	case 0: // truncated JSON
		v, _ := json.Marshal(ev)
		return v[:len(v)/2]
	case 1: // a field of the wrong type
		return fmt.Appendf(nil, `{"e":%q,"ts":"yesterday","k":"m","v":1,"seq":%d}`, ev.Entity, ev.Seq)
	case 2: // not JSON at all
		return fmt.Appendf(nil, "reading %d of %s: %v", ev.Seq, ev.Entity, ev.V)
	default: // binary garbage
		b := make([]byte, 8+g.rng.IntN(24))
		for i := range b {
			b[i] = byte(g.rng.UintN(256))
		}
		b[0] = 0xff // never a JSON value's first byte
		return b
	}
}

// FlushRecords returns the flush records that end the stream: one per partition, keyed by an entity of
// that partition, at event time at (a day past the last event time is plenty), so that every
// partition's stream time passes every window's close.
func FlushRecords(partitions int, at int64) []Record {
	out := make([]Record, partitions)
	found := 0
	for n := 0; found < partitions; n++ {
		entity := "flush-" + strconv.Itoa(n)
		p := partitioner.Partition([]byte(entity), int32(partitions))
		if out[p].Value != nil {
			continue
		}
		v, err := json.Marshal(Event{Entity: entity, Time: at, Kind: TypeFlush, Seq: -1 - int64(p)})
		if err != nil {
			panic(err)
		}
		out[p] = Record{Key: []byte(entity), Value: v, Kind: Flush}
		found++
	}
	return out
}
