package main

import (
	"fmt"
	"hash/fnv"
	"math"
	"strconv"
	"strings"
)

const (
	partitions = 12
	windowMs   = 60_000 // the aggregation's tumbling window: 1 minute, grace 0

	entityPrefix   = "dev-"
	sentinelPrefix = "~sentinel-" // closes every real window; never an expected final
	probePrefix    = "~probe-"    // restore steps: processed only once state is rebuilt
)

// workload is one deterministic input: which entity reports when, with which value. Its event
// times start at base (a minute boundary, ms) and only grow within each partition, so with grace 0
// no event is late for any system, and the windows every system must close are known in advance.
type workload struct {
	name     string // sparse | dense | restore
	entities int
	// rounds: sparse and restore have one event per entity per window (rounds = windows, a round
	// spans one minute); dense has one event per entity per second (rounds = seconds).
	rounds  int
	roundMs int64
	// sentinels: one event per partition, two minutes after the last real event, so every
	// real window closes by stream time alone, in every system, as in a live stream; the
	// sentinels' own windows stay open. The restore workload keeps its windows open instead.
	sentinels bool
}

// newWorkload sizes a workload for about events events. Entity counts follow the issue at 1M
// events (sparse: 100k entities, one event per entity-window over 10 windows; dense: 10k entities
// reporting every second for 100 s, so about 60 events per entity-window) and scale with events
// otherwise; entities > 0 overrides them.
func newWorkload(name string, events, entities int) (*workload, error) {
	w := &workload{name: name}
	switch name {
	case "sparse":
		w.entities, w.roundMs, w.sentinels = max(events/10, 1), windowMs, true
	case "dense":
		w.entities, w.roundMs, w.sentinels = max(events/100, 1), 1000, true
	case "restore":
		w.entities, w.roundMs = events, windowMs
	default:
		return nil, fmt.Errorf("unknown workload %q (sparse, dense)", name)
	}
	if entities > 0 && name != "restore" {
		w.entities = entities
	}
	w.rounds = max(events/w.entities, 1)
	return w, nil
}

// events is the number of real events (sentinels and probes not counted).
func (w *workload) events() int { return w.rounds * w.entities }

// windows is the number of windows per entity.
func (w *workload) windows() int {
	return int((int64(w.rounds)*w.roundMs + windowMs - 1) / windowMs)
}

// topicName is the input topic's name: deterministic, so a later run (before/after a change)
// can reuse the same input.
func (w *workload) topicName(prefix string) string {
	return fmt.Sprintf("%s-%s-%dx%d-v1", prefix, w.name, w.rounds, w.entities)
}

func entityName(i int) string { return entityPrefix + fmt.Sprintf("%07d", i) }

// entityIndex parses a name made by entityName.
func entityIndex(name string) (int, bool) {
	s, ok := strings.CutPrefix(name, entityPrefix)
	if !ok {
		return 0, false
	}
	i, err := strconv.Atoi(s)
	return i, err == nil && i >= 0
}

// event is one reading.
type event struct {
	entity int
	ts     int64
	v      float64
}

// each calls fn for every real event, in production order. Within a round, entities come in an
// order that changes from round to round (a multiplicative permutation), and event times grow
// through the round, so every partition sees non-decreasing event times.
func (w *workload) each(base int64, fn func(event)) {
	mul := coprime(w.entities)
	for r := range w.rounds {
		for k := range w.entities {
			ent := int((int64(k)*int64(mul) + int64(r)*7) % int64(w.entities))
			ts := base + int64(r)*w.roundMs + int64(k)*w.roundMs/int64(w.entities)
			// Integer values keep every sum exact in float64, whatever the order of addition.
			v := float64((ent*31 + r*17) % 1000)
			fn(event{entity: ent, ts: ts, v: v})
		}
	}
}

// lastTime is the event time of the last real event.
func (w *workload) lastTime(base int64) int64 {
	return base + int64(w.rounds-1)*w.roundMs + int64(w.entities-1)*w.roundMs/int64(w.entities)
}

// sentinelTime is far enough past the last event to close every real window (grace 0).
func (w *workload) sentinelTime(base int64) int64 {
	return (w.lastTime(base)/windowMs + 2) * windowMs
}

// coprime returns a multiplier near 7919 that is coprime with n, so k -> k*m mod n permutes.
func coprime(n int) int {
	for m := 7919; ; m++ {
		if gcd(m, n) == 1 {
			return m
		}
	}
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// encodeEvent is the JSON record value every system decodes.
func encodeEvent(b []byte, e event) []byte {
	b = append(b, `{"entity":"`...)
	b = append(b, entityName(e.entity)...)
	b = append(b, `","ts":`...)
	b = strconv.AppendInt(b, e.ts, 10)
	b = append(b, `,"v":`...)
	b = strconv.AppendFloat(b, e.v, 'f', -1, 64)
	return append(b, '}')
}

func fnv32a(b []byte) uint32 {
	h := fnv.New32a()
	h.Write(b)
	return h.Sum32()
}

// partitionOf is where sarama's hash partitioner with goka's FNV-1a hasher puts key (and so
// kgo.SaramaCompatHasher(fnv32a), which the producer uses).
func partitionOf(key string, n int) int32 {
	p := int32(fnv32a([]byte(key))) % int32(n)
	if p < 0 {
		p = -p
	}
	return p
}

// keysPerPartition returns, for each partition, a key with the given prefix that lands there.
func keysPerPartition(prefix string, n int) []string {
	keys := make([]string, n)
	for i, found := 0, 0; found < n; i++ {
		k := prefix + strconv.Itoa(i)
		if p := partitionOf(k, n); keys[p] == "" {
			keys[p] = k
			found++
		}
	}
	return keys
}

// winAgg is one window's expected (or received) total.
type winAgg struct {
	count int64
	sum   float64
	max   float64
}

// expectation holds every final total a correct run emits, by entity and window.
type expectation struct {
	base    int64
	windows int
	wins    []winAgg // entity*windows + window index; count 0: no such window
	finals  int
	count   int64
	sum     float64
	sumMax  float64
}

// expect computes the finals of a workload with sentinels: every real window closes.
func (w *workload) expect(base int64) *expectation {
	x := &expectation{base: base, windows: w.windows()}
	x.wins = make([]winAgg, w.entities*x.windows)
	w.each(base, func(e event) {
		a := &x.wins[e.entity*x.windows+int((e.ts-base)/windowMs)]
		if a.count == 0 {
			a.max = math.Inf(-1)
		}
		a.count++
		a.sum += e.v
		a.max = max(a.max, e.v)
	})
	for _, a := range x.wins {
		if a.count > 0 {
			x.finals++
			x.count += a.count
			x.sum += a.sum
			x.sumMax += a.max
		}
	}
	return x
}

// final is one final window total read back from a system's output topic.
type final struct {
	entity string
	start  int64
	agg    winAgg
}

// lookup returns the expected total of f's window and whether it is an expected window.
func (x *expectation) lookup(entity string, start int64) (winAgg, int, bool) {
	ent, ok := entityIndex(entity)
	if !ok || (start-x.base)%windowMs != 0 {
		return winAgg{}, 0, false
	}
	wi := int((start - x.base) / windowMs)
	if wi < 0 || wi >= x.windows || ent*x.windows+wi >= len(x.wins) {
		return winAgg{}, 0, false
	}
	i := ent*x.windows + wi
	return x.wins[i], i, x.wins[i].count > 0
}
