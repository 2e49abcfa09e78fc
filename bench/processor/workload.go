package main

import (
	"fmt"
	"hash/fnv"
	"math"
	"slices"
	"strconv"
	"strings"
)

const (
	partitions = 12
	windowMs   = 60_000 // the aggregation's tumbling window: 1 minute, grace 0

	entityPrefix   = "dev-"
	sentinelPrefix = "~sentinel-" // closes every real window; never an expected final
	probePrefix    = "~probe-"    // restore steps: processed only once state is rebuilt

	// A rollup workload's per-region set has this many regions: entity i is in region i mod
	// regions. The entity's index, not a hash of its name, picks the region: the partition is
	// FNV-1a of the name mod 12, and FNV-1a mod 100 would share a factor of 4 with it, so a
	// region would see only 3 of the 12 partitions.
	regions      = 100
	regionPrefix = "region-"
	globalKey    = "all" // the entity of a global rollup's totals (topology.GlobalKey)
)

// workload is one deterministic input: which entity reports when, with which value. Its event
// times start at base (a minute boundary, ms) and the on-time events' times only grow within each
// partition, so with grace 0 none of them is late for any system, and the windows every system
// must close are known in advance. A late workload (sparse-late10) adds late events among them
// (lateGen): they are late for every window, so the finals stay those of its base workload.
type workload struct {
	name     string // sparse | dense | restore, sparse-late<pct> | dense-late<pct>, sparse-rollup | dense-rollup
	entities int
	// rounds: sparse and restore have one event per entity per window (rounds = windows, a round
	// spans one minute); dense has one event per entity per second (rounds = seconds).
	rounds  int
	roundMs int64
	// sentinels: one event per partition, two minutes after the last real event, so every
	// real window closes by stream time alone, in every system, as in a live stream; the
	// sentinels' own windows stay open. The restore workload keeps its windows open instead.
	sentinels bool
	// late is the fraction of the real events that are late (0.1 for sparse-late10), and base
	// the name of the workload whose on-time events it has ("" for sparse, dense, restore).
	late float64
	base string
	// rollup: the topology adds a per-region and a global set to the per-entity one, on the
	// same source (sparse-rollup, dense-rollup). The input is its base's, the very same topic,
	// so the ratio of the two workloads' figures is what the two rollup sets cost.
	rollup bool
	// join: a rollup workload whose region comes from a table, the entity registry (one record
	// per entity, its region, stamped an hour before the input), looked up by event time; the
	// same regions as regionOf, so the same finals (sparse-join, dense-join). Its figures over
	// its rollup workload's are what one table lookup per event costs.
	join bool
}

// newWorkload sizes a workload for about events events. Entity counts follow the issue at 1M
// events (sparse: 100k entities, one event per entity-window over 10 windows; dense: 10k entities
// reporting every second for 100 s, so about 60 events per entity-window) and scale with events
// otherwise; entities > 0 overrides them.
//
// A late workload, <base>-late<pct> (sparse-late10, dense-late50), is its base workload (same
// entities, same on-time events, same finals) with late events added, pct percent of all its real
// events: its base's figures and its own then differ by the late events' cost alone.
func newWorkload(name string, events, entities int) (*workload, error) {
	w := &workload{name: name}
	kind := name
	if b, pct, ok := strings.Cut(name, "-late"); ok && (b == "sparse" || b == "dense") {
		n, err := strconv.Atoi(pct)
		if err != nil || n < 1 || n > 90 || strconv.Itoa(n) != pct {
			return nil, fmt.Errorf("workload %q: the late percentage must be a whole number from 1 to 90", name)
		}
		kind, w.base, w.late = b, b, float64(n)/100
	} else if b, ok := strings.CutSuffix(name, "-rollup"); ok && (b == "sparse" || b == "dense") {
		kind, w.base, w.rollup = b, b, true
	} else if b, ok := strings.CutSuffix(name, "-join"); ok && (b == "sparse" || b == "dense") {
		kind, w.base, w.rollup, w.join = b, b, true, true
	}
	switch kind {
	case "sparse":
		w.entities, w.roundMs, w.sentinels = max(events/10, 1), windowMs, true
	case "dense":
		w.entities, w.roundMs, w.sentinels = max(events/100, 1), 1000, true
	case "restore":
		w.entities, w.roundMs = events, windowMs
	default:
		return nil, fmt.Errorf("unknown workload %q (sparse, dense, sparse-late<pct>, dense-late<pct>, sparse-rollup, dense-rollup, sparse-join, dense-join)", name)
	}
	if entities > 0 && kind != "restore" {
		w.entities = entities
	}
	w.rounds = max(events/w.entities, 1)
	return w, nil
}

// events is the number of real events, on time and late (sentinels and probes not counted).
func (w *workload) events() int { return w.onTime() + w.lateEvents() }

// onTime is the number of on-time events: those of the base workload.
func (w *workload) onTime() int { return w.rounds * w.entities }

// lateEvents is the number of late events: w.late of all real events.
func (w *workload) lateEvents() int {
	if w.late == 0 {
		return 0
	}
	return int(math.Round(float64(w.onTime()) * w.late / (1 - w.late)))
}

// windows is the number of windows per entity.
func (w *workload) windows() int {
	return int((int64(w.rounds)*w.roundMs + windowMs - 1) / windowMs)
}

// topicName is the input topic's name: deterministic, so a later run (before/after a change)
// can reuse the same input. A rollup workload reads its base's topic.
func (w *workload) topicName(prefix string) string {
	name := w.name
	if w.rollup {
		name = w.base
	}
	// v2: the sentinels moved from one minute past the last window's end to sentinelGapMs.
	return fmt.Sprintf("%s-%s-%dx%d-v2", prefix, name, w.rounds, w.entities)
}

// registryName is the topic of a join workload's entity registry.
func (w *workload) registryName(prefix string) string {
	return fmt.Sprintf("%s-registry-%d-v1", prefix, w.entities)
}

func entityName(i int) string { return entityPrefix + fmt.Sprintf("%07d", i) }

// regionName is the per-region set's key of region i.
func regionName(i int) string { return regionPrefix + fmt.Sprintf("%02d", i) }

// regionOf is the region of an entity named by entityName, "" for any other name (sentinels,
// probes): a rollup leaves an event with key "" out of its set. The Kafka Streams application
// computes the same (StreamsAggregate.regionOf).
func regionOf(entity string) string {
	i, ok := entityIndex(entity)
	if !ok {
		return ""
	}
	return regionName(i % regions)
}

// regionIndex parses a name made by regionName.
func regionIndex(name string) (int, bool) {
	s, ok := strings.CutPrefix(name, regionPrefix)
	if !ok || len(s) != 2 {
		return 0, false
	}
	i, err := strconv.Atoi(s)
	return i, err == nil && i >= 0 && i < regions
}

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
	late   bool // behind its partition's stream time: late for every window (lateGen)
}

// each calls fn for every real event, in production order. Within a round, entities come in an
// order that changes from round to round (a multiplicative permutation), and on-time event times
// grow through the round, so every partition sees non-decreasing on-time event times. A late
// workload's late events come in between (lateGen).
func (w *workload) each(base int64, fn func(event)) {
	mul := coprime(w.entities)
	g := newLateGen(w)
	n := w.onTime()
	i := 0
	for r := range w.rounds {
		for k := range w.entities {
			ent := int((int64(k)*int64(mul) + int64(r)*7) % int64(w.entities))
			ts := base + int64(r)*w.roundMs + int64(k)*w.roundMs/int64(w.entities)
			// Integer values keep every sum exact in float64, whatever the order of addition.
			v := float64((ent*31 + r*17) % 1000)
			e := event{entity: ent, ts: ts, v: v}
			fn(e)
			if g != nil {
				i++
				g.after(e, i, n, fn)
			}
		}
	}
}

// Late bursts: an entity that was offline sends its backlog at once.
const (
	burstMin, burstMax = 5, 30 // events per burst
	// The oldest event of a burst is 5 to 30 minutes behind its partition's stream time, the
	// newest lateNewestMs behind: more than a window, so with grace 0 even the newest one's
	// window has closed (its end is at most ts + windowMs), whatever the window's alignment.
	lateMinMs, lateMaxMs = 5 * windowMs, 30 * windowMs
	lateNewestMs         = 2 * windowMs
)

// lateGen adds a late workload's late events to its on-time ones, in bursts: an entity goes
// "offline" and sends, in one go between two on-time events of the stream, burstMin to burstMax
// events whose times lie well behind its partition's stream time (the largest on-time event time
// produced to that partition so far, which is what the processor judges them by: nothing else
// moves it). Each is late for every window, so it changes no final and gives exactly one late
// record per aggregate set. The bursts are spread evenly over the input: after on-time event i
// of n, i*L/n late events are due (L = lateEvents), and a burst goes out once enough are due.
// Its choices come from a fixed seed, so the input is the same at every run.
type lateGen struct {
	w           *workload
	total, sent int
	next        int // size of the next burst
	rng         uint64
	part        []int8            // each entity's partition
	wm          [partitions]int64 // each partition's stream time so far
	seen        [partitions]bool  // whether the partition has had an on-time event
}

// newLateGen returns w's late event generator, or nil for a workload without late events.
func newLateGen(w *workload) *lateGen {
	if w.lateEvents() == 0 {
		return nil
	}
	g := &lateGen{w: w, total: w.lateEvents(), rng: 0x9e3779b97f4a7c15, part: make([]int8, w.entities)}
	for ent := range g.part {
		g.part[ent] = int8(partitionOf(entityName(ent), partitions))
	}
	g.next = g.between(burstMin, burstMax)
	return g
}

// rand is splitmix64: deterministic, and independent of the input's base time.
func (g *lateGen) rand() uint64 {
	g.rng += 0x9e3779b97f4a7c15
	z := g.rng
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// between returns a number from lo to hi, both included.
func (g *lateGen) between(lo, hi int) int { return lo + int(g.rand()%uint64(hi-lo+1)) }

// after is called with on-time event i of n (from 1), just produced; it sends the bursts due.
func (g *lateGen) after(e event, i, n int, fn func(event)) {
	p := g.part[e.entity]
	g.wm[p], g.seen[p] = max(g.wm[p], e.ts), true
	due := int(int64(i) * int64(g.total) / int64(n))
	// The last on-time event sends what is left, even less than a burst.
	for g.sent < due && (due-g.sent >= g.next || i == n) {
		g.burst(min(g.next, due-g.sent), fn)
		g.next = g.between(burstMin, burstMax)
	}
}

// burst sends size late events of one entity, oldest first.
func (g *lateGen) burst(size int, fn func(event)) {
	// An entity whose partition has a stream time: before its first on-time event, a partition
	// would apply the burst (nothing has closed there yet), and the harness reads the input's base
	// time from a partition's first record.
	ent := int(g.rand() % uint64(g.w.entities))
	for !g.seen[g.part[ent]] {
		ent = int(g.rand() % uint64(g.w.entities))
	}
	wm := g.wm[g.part[ent]]
	oldest := wm - int64(g.between(lateMinMs, lateMaxMs))
	span := wm - lateNewestMs - oldest
	for j := range size {
		ts := oldest
		if size > 1 {
			ts += int64(j) * span / int64(size-1)
		}
		fn(event{entity: ent, ts: ts, v: float64(g.rand() % 1000), late: true})
	}
	g.sent += size
}

// lastTime is the event time of the last real event.
func (w *workload) lastTime(base int64) int64 {
	return base + int64(w.rounds-1)*w.roundMs + int64(w.entities-1)*w.roundMs/int64(w.entities)
}

// sentinelGapMs is how far past the last real window's end the sentinels are: enough to close it
// with grace 0, and in Kafka Streams' rollup aggregations with their grace too. Those read
// repartition topics, where the records of a replayed input arrive as far out of event-time order
// as the input tasks drift apart (nothing keeps two stream threads, or two tasks of one thread,
// at the same event time), up to the input's whole span: 10 minutes for sparse. So their grace
// must cover the span (-kstreams-rollup-grace, 10 minutes), and the sentinels come after it.
const sentinelGapMs = 11 * windowMs

// sentinelTime is far enough past the last event to close every real window (sentinelGapMs).
func (w *workload) sentinelTime(base int64) int64 {
	return (w.lastTime(base)/windowMs+1)*windowMs + sentinelGapMs
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

// The sets of the topology beside setName (per entity), in a rollup workload: per region (By)
// and for all events (Global), with the same window and aggregations.
const (
	regionSet = "region-minute"
	globalSet = "fleet-minute"
)

// expectation holds every final total a correct run emits, by set, key and window.
type expectation struct {
	base     int64
	windows  int
	entities int
	rollup   bool // the per-region and global sets' finals are expected too
	// wins: entity*windows + window index, then (rollup) regions*windows of the per-region set
	// (regionAt) and windows of the global one (globalAt); count 0: no such window.
	wins   []winAgg
	finals int
	// setFinals counts the finals of each set: setName, regionSet, globalSet.
	setFinals [3]int
	count     int64
	sum       float64
	sumMax    float64
	// late holds, per partition, the input offsets of the late events, ascending: the sources of
	// the late records a correct run writes, one per event (the topology has one set).
	late      [partitions][]int64
	lateCount int
}

// regionAt is the index in wins of region r's window wi.
func (x *expectation) regionAt(r, wi int) int { return x.entities*x.windows + r*x.windows + wi }

// globalAt is the index in wins of the global set's window wi.
func (x *expectation) globalAt(wi int) int { return x.entities*x.windows + regions*x.windows + wi }

// expect computes the finals of a workload with sentinels: every real window closes. Late events
// change none; their offsets are those of the records produced in each() order (a new topic, one
// producer, which keeps each partition's order), the sentinels coming after them all. A rollup
// workload's region and global totals are those of its on-time events, as its entities' are.
func (w *workload) expect(base int64) *expectation {
	x := &expectation{base: base, windows: w.windows(), entities: w.entities, rollup: w.rollup}
	n := w.entities * x.windows
	if w.rollup {
		n += (regions + 1) * x.windows
	}
	x.wins = make([]winAgg, n)
	var next [partitions]int64 // each partition's next offset
	var part []int8
	if w.late > 0 {
		part = newLateGen(w).part
	}
	w.each(base, func(e event) {
		if part != nil { // without late events, the offsets are not needed
			p := part[e.entity]
			if e.late {
				x.late[p] = append(x.late[p], next[p])
				x.lateCount++
			}
			next[p]++
		}
		if e.late {
			return
		}
		wi := int((e.ts - base) / windowMs)
		x.wins[e.entity*x.windows+wi].add(e.v)
		if w.rollup {
			x.wins[x.regionAt(e.entity%regions, wi)].add(e.v)
			x.wins[x.globalAt(wi)].add(e.v)
		}
	})
	for i, a := range x.wins {
		if a.count > 0 {
			x.finals++
			x.setFinals[x.setOf(i)]++
			x.count += a.count
			x.sum += a.sum
			x.sumMax += a.max
		}
	}
	return x
}

// lateIndex returns the index of the late event at input partition p, offset off, among x's late
// events, or -1 when there is none there.
func (x *expectation) lateIndex(p int32, off int64) int {
	if p < 0 || p >= partitions {
		return -1
	}
	i, found := slices.BinarySearch(x.late[p], off)
	if !found {
		return -1
	}
	for q := range p {
		i += len(x.late[q])
	}
	return i
}

// final is one final window total read back from a system's output topic.
type final struct {
	set    string // setName, or in a rollup workload regionSet or globalSet
	entity string // the set's key: entity, region or globalKey
	start  int64
	agg    winAgg
}

// add folds one event's value into a window's total.
func (a *winAgg) add(v float64) {
	if a.count == 0 {
		a.max = math.Inf(-1)
	}
	a.count++
	a.sum += v
	a.max = max(a.max, v)
}

// setOf is the set of wins[i]: 0 per entity, 1 per region, 2 global.
func (x *expectation) setOf(i int) int {
	switch {
	case i < x.entities*x.windows:
		return 0
	case i < x.globalAt(0):
		return 1
	}
	return 2
}

// lookup returns the expected total of a final's window (set, key, start), its index in wins and
// whether it is an expected window.
func (x *expectation) lookup(set, key string, start int64) (winAgg, int, bool) {
	if (start-x.base)%windowMs != 0 {
		return winAgg{}, 0, false
	}
	wi := int((start - x.base) / windowMs)
	if wi < 0 || wi >= x.windows {
		return winAgg{}, 0, false
	}
	var i int
	switch set {
	case setName:
		ent, ok := entityIndex(key)
		if !ok || ent >= x.entities {
			return winAgg{}, 0, false
		}
		i = ent*x.windows + wi
	case regionSet:
		r, ok := regionIndex(key)
		if !ok || !x.rollup {
			return winAgg{}, 0, false
		}
		i = x.regionAt(r, wi)
	case globalSet:
		if key != globalKey || !x.rollup {
			return winAgg{}, 0, false
		}
		i = x.globalAt(wi)
	default:
		return winAgg{}, 0, false
	}
	return x.wins[i], i, x.wins[i].count > 0
}
