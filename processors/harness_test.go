package processors_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/abacus-stream/abacus/partitioner"
	"github.com/abacus-stream/abacus/partitioner/franz"
	"github.com/abacus-stream/abacus/processors"
	"github.com/abacus-stream/abacus/topology"
	"github.com/abacus-stream/abacus/totals"
	"github.com/abacus-stream/abacus/windows"
)

// reading is the test event.
type reading struct {
	Dev string  `json:"dev"`
	TS  int64   `json:"ts"`
	V   float64 `json:"v"`
}

// The scenario's aggregate sets; the oracle below re-implements their semantics by brute force.
const (
	setTumble  = "tumble-1m"
	setHop     = "hop-2m"
	setSession = "session-3s"
	// Rollups of the tumbling set, with its window, grace and aggregations: an event counts in
	// them exactly when it counts for its entity, so their finals merge the entities' finals.
	setRegion = "tumble-region"
	setFleet  = "tumble-fleet"
)

// regionOf is the scenario's rollup key: independent of the partition a device lands in.
func regionOf(dev string) string {
	if dev == "" {
		return ""
	}
	return fmt.Sprintf("region-%d", int(dev[len(dev)-1])%3)
}

var (
	tumbleSpec  = windows.Tumbling(time.Minute)
	tumbleGrace = int64(10_000)
	hopSpec     = windows.Hopping(2*time.Minute, time.Minute)
	hopGrace    = int64(0)
	sessGap     = int64(3_000)
	sessGrace   = int64(5_000)
)

// scenarioTopology declares the scenario's sets; with repartition the source's record keys are
// not the entity and events are re-keyed through the loop topic.
func scenarioTopology(t testing.TB, name, input string, repartition bool) *topology.Topology {
	t.Helper()
	b := topology.New(name)
	if !repartition {
		b.LateTopic(name + "-late") // the repartition scenario drops late events instead
	}
	src := topology.NewSource(b, input, topology.JSON[reading](),
		func(r reading) string { return r.Dev },
		func(r reading) time.Time { return time.UnixMilli(r.TS) })
	if repartition {
		src.Repartition()
	}
	src.Aggregate(setTumble, tumbleSpec).Grace(time.Duration(tumbleGrace)*time.Millisecond).
		Count("n").Sum("sum", "v").Min("min", "V").Max("max", "v").Mean("mean", "v").Last("last", "v")
	src.Aggregate(setRegion, tumbleSpec).Grace(time.Duration(tumbleGrace)*time.Millisecond).By("region", func(r reading) string { return regionOf(r.Dev) }).
		Count("n").Sum("sum", "v").Min("min", "V").Max("max", "v").Mean("mean", "v").Last("last", "v")
	src.Aggregate(setFleet, tumbleSpec).Grace(time.Duration(tumbleGrace)*time.Millisecond).Global().
		Count("n").Sum("sum", "v").Max("max", "v")
	src.Aggregate(setHop, hopSpec).Grace(0).Emit(topology.EveryUpdate()).
		Count("n").Max("max", "v")
	src.Aggregate(setSession, windows.Session(time.Duration(sessGap)*time.Millisecond)).
		Grace(time.Duration(sessGrace)*time.Millisecond).Count("n").SumOf("sum", func(r reading) float64 { return r.V })
	topo, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	return topo
}

// input is one record to produce: a reading, or raw garbage.
type input struct {
	key   string
	value []byte
	r     reading
	bad   bool
}

// baseTime is far in the past of any test run's wall clock, so future-dated events are the ones
// the generator makes so, and idle partitions can close everything.
var baseTime = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()

// genInputs returns n records starting at event time start: mostly in order with jitter inside
// the grace periods, some late, some future-dated, some produced twice, one undecodable.
func genInputs(seed uint64, n, entities int, start int64) []input {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	var out []input
	for i := range n {
		r := reading{
			Dev: fmt.Sprintf("dev-%02d", rng.IntN(entities)),
			TS:  start + int64(i)*200 + rng.Int64N(32_000) - 30_000,
			V:   float64(rng.IntN(100)),
		}
		switch x := rng.IntN(100); {
		case x < 4: // late for every set
			r.TS -= 10 * 60_000
		case x < 5: // too far in the future
			r.TS = time.Now().Add(24 * time.Hour).UnixMilli()
		}
		v, _ := json.Marshal(r)
		in := input{key: r.Dev, value: v, r: r}
		out = append(out, in)
		if rng.IntN(100) < 3 { // the same event produced twice: two records, both count
			out = append(out, in)
		}
		if i == n/2 {
			out = append(out, input{key: r.Dev, value: []byte("{not json"), bad: true})
		}
	}
	return out
}

// partitionOf is the partition goka assigns a key to.
func partitionOf(key string, n int) int32 { return partitioner.Partition([]byte(key), int32(n)) }

func produce(ctx context.Context, t testing.TB, brokers []string, topic string, ins []input) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(franz.Partitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	recs := make([]*kgo.Record, len(ins))
	for i, in := range ins {
		recs[i] = &kgo.Record{Key: []byte(in.key), Value: in.value}
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce %d records to %s: %v", len(recs), topic, err)
	}
}

type winKey struct {
	set    string
	entity string
	start  int64
}

type oWin struct {
	end  int64
	vals []float64 // in applied order
	ts   []int64
	// lasts are, in a rollup's window, each entity's last value and its time: partials merge
	// the entities' lasts, the latest time winning and, on a tie, the larger value.
	lasts [][2]float64
}

// oracle computes the expected final totals from the records in each partition's order, by brute
// force: every window keeps the list of its events, values are computed at the end.
type oracle struct {
	nparts     int
	streamTime map[int32]int64
	open       map[int32]map[winKey]*oWin
	final      map[winKey]*oWin
	late       map[string]int
	future     int
	bad        int
	applied    int
	// lateRecords are the late records expected in the late topic, as "partition@offset set"
	// (source offsets counted as the records are fed, in each partition's order); next is the
	// offset of the next record of each source partition.
	lateRecords map[string]bool
	next        map[int32]int64
}

func newOracle(nparts int) *oracle {
	o := &oracle{nparts: nparts, streamTime: map[int32]int64{}, open: map[int32]map[winKey]*oWin{},
		final: map[winKey]*oWin{}, late: map[string]int{}, lateRecords: map[string]bool{}, next: map[int32]int64{}}
	for p := range int32(nparts) {
		o.streamTime[p] = math.MinInt64
		o.open[p] = map[winKey]*oWin{}
	}
	return o
}

func graceOf(set string) int64 {
	switch set {
	case setTumble:
		return tumbleGrace
	case setHop:
		return hopGrace
	}
	return sessGrace
}

func (o *oracle) feed(in input) {
	// Where the record lands: the partition of its key (what the test producers do).
	srcPart := partitionOf(in.key, o.nparts)
	at := fmt.Sprintf("%d@%d", srcPart, o.next[srcPart])
	o.next[srcPart]++
	if in.bad {
		o.bad++
		return
	}
	r := in.r
	if r.TS > time.Now().Add(topology.DefaultMaxFutureSkew).UnixMilli() {
		o.future++
		return
	}
	p := partitionOf(r.Dev, o.nparts) // the entity's partition, where its state lives
	// The partition has one input here, so the event is judged by the stream time before it; the
	// stream time moves only with an applied event (which, moving it, is never late).
	st := o.streamTime[p]
	open := o.open[p]
	anyApplied := false
	// Fixed windows: every start s (a multiple of the advance) with s <= ts < s+size.
	for _, fs := range []struct {
		name      string
		size, adv int64
	}{{setTumble, tumbleSpec.Size(), tumbleSpec.Advance()}, {setHop, hopSpec.Size(), hopSpec.Advance()}} {
		applied, late := false, false
		first := (r.TS - fs.size) / fs.adv * fs.adv
		for s := first - fs.adv; s <= r.TS; s += fs.adv {
			if !(s <= r.TS && r.TS < s+fs.size) {
				continue
			}
			if s+fs.size+graceOf(fs.name) <= st {
				late = true // a hopping event may be late for some of its windows only
				continue
			}
			k := winKey{fs.name, r.Dev, s}
			w := open[k]
			if w == nil {
				w = &oWin{end: s + fs.size}
				open[k] = w
			}
			w.vals = append(w.vals, r.V)
			w.ts = append(w.ts, r.TS)
			applied = true
		}
		if late {
			o.late[fs.name]++
			o.lateRecords[at+" "+fs.name] = true
			if fs.name == setTumble { // its rollups judge it as it does
				for _, set := range []string{setRegion, setFleet} {
					o.late[set]++
					o.lateRecords[at+" "+set] = true
				}
			}
		}
		anyApplied = anyApplied || applied
	}
	// Sessions: merge [ts, ts+gap) with this entity's open (not yet closed) sessions, transitively.
	ms, me := r.TS, r.TS+sessGap
	var absorbed []winKey
	for grow := true; grow; {
		grow = false
		for k, w := range open {
			if k.set != setSession || k.entity != r.Dev || slices.Contains(absorbed, k) || w.end+sessGrace <= st {
				continue
			}
			if k.start < me && ms < w.end {
				absorbed = append(absorbed, k)
				ms, me = min(ms, k.start), max(me, w.end)
				grow = true
			}
		}
	}
	if me+sessGrace <= st {
		o.late[setSession]++
		o.lateRecords[at+" "+setSession] = true
	} else {
		nw := &oWin{end: me}
		// Merged accumulators: absorbed sessions in any order, then the event (sums of
		// integer values are exact in any order).
		for _, k := range absorbed {
			nw.vals = append(nw.vals, open[k].vals...)
			nw.ts = append(nw.ts, open[k].ts...)
			delete(open, k)
		}
		nw.vals = append(nw.vals, r.V)
		nw.ts = append(nw.ts, r.TS)
		open[winKey{setSession, r.Dev, ms}] = nw
		anyApplied = true
	}
	if anyApplied {
		o.applied++
		o.streamTime[p] = max(st, r.TS)
	}
	o.closeDue(p)
}

func (o *oracle) closeDue(p int32) {
	for k, w := range o.open[p] {
		if w.end+graceOf(k.set) <= o.streamTime[p] {
			o.final[k] = w
			delete(o.open[p], k)
			if k.set == setTumble {
				o.rollUp(k, w)
			}
		}
	}
}

// rollUp adds an entity's final tumbling window to the rollups' windows: when every partition
// has closed it, which idle does in the end, they are final with all their entities'.
func (o *oracle) rollUp(k winKey, w *oWin) {
	last, lastT := 0.0, int64(math.MinInt64)
	for i, v := range w.vals {
		if w.ts[i] >= lastT {
			last, lastT = v, w.ts[i]
		}
	}
	for _, rk := range []winKey{{setRegion, regionOf(k.entity), k.start}, {setFleet, topology.GlobalKey, k.start}} {
		rw := o.final[rk]
		if rw == nil {
			rw = &oWin{end: w.end}
			o.final[rk] = rw
		}
		rw.vals = append(rw.vals, w.vals...)
		rw.ts = append(rw.ts, w.ts...)
		rw.lasts = append(rw.lasts, [2]float64{float64(lastT), last})
	}
}

// idle is what the processor's idle timeout does: every open window closes, and stream time
// moves up to the last close time.
func (o *oracle) idle() {
	for p, open := range o.open {
		for k, w := range open {
			o.streamTime[p] = max(o.streamTime[p], w.end+graceOf(k.set))
		}
		o.closeDue(p)
	}
}

// expected returns the values the final total of window k must carry.
func (o *oracle) expected(k winKey) map[string]float64 {
	w := o.final[k]
	sum, mn, mx := 0.0, math.Inf(1), math.Inf(-1)
	last, lastT := 0.0, int64(math.MinInt64)
	for i, v := range w.vals {
		sum += v
		mn, mx = min(mn, v), max(mx, v)
		if w.ts[i] >= lastT {
			last, lastT = v, w.ts[i]
		}
	}
	n := float64(len(w.vals))
	switch k.set {
	case setRegion:
		lt := math.Inf(-1)
		for _, l := range w.lasts {
			if l[0] > lt || (l[0] == lt && l[1] > last) {
				lt, last = l[0], l[1]
			}
		}
		return map[string]float64{"n": n, "sum": sum, "min": mn, "max": mx, "mean": sum / n, "last": last}
	case setFleet:
		return map[string]float64{"n": n, "sum": sum, "max": mx}
	case setTumble:
		return map[string]float64{"n": n, "sum": sum, "min": mn, "max": mx, "mean": sum / n, "last": last}
	case setHop:
		return map[string]float64{"n": n, "max": mx}
	}
	return map[string]float64{"n": n, "sum": sum}
}

// totalsLog reads the totals topic and keeps, per window, the newest record and every final one.
type totalsLog struct {
	newest  map[winKey]*totals.Record
	finals  map[winKey][]*totals.Record
	ordered []*totals.Record // in the order read (per partition: the order written)
	count   int
}

func readTotals(ctx context.Context, t testing.TB, brokers []string, topic string, done func(*totalsLog) bool) *totalsLog {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	log := &totalsLog{newest: map[winKey]*totals.Record{}, finals: map[winKey][]*totals.Record{}}
	for !done(log) {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("waiting for totals on %s: %v (read %d records, %d final windows)%s", topic, ctx.Err(), log.count, len(log.finals), describeMissing(log))
		}
		fs.EachError(func(topic string, p int32, err error) {
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("fetch %s/%d: %v", topic, p, err)
			}
		})
		fs.EachRecord(func(rec *kgo.Record) {
			r, err := totals.Decode(rec.Value)
			if err != nil {
				t.Fatalf("totals record at %d/%d: %v", rec.Partition, rec.Offset, err)
			}
			if string(rec.Key) != r.Entity {
				t.Fatalf("totals record keyed %q carries entity %q", rec.Key, r.Entity)
			}
			log.count++
			log.ordered = append(log.ordered, r)
			k := winKey{r.Set, r.Entity, r.Start}
			if cur := log.newest[k]; cur == nil || r.Newer(cur) {
				log.newest[k] = r
			}
			if r.Final {
				log.finals[k] = append(log.finals[k], r)
			}
		})
	}
	return log
}

// describeMissing, when set by a test, explains what a timed-out wait still misses.
var describeMissing = func(*totalsLog) string { return "" }

// missing lists up to ten windows the oracle closed that have no final total yet.
func (o *oracle) missing(l *totalsLog) string {
	s := ""
	n := 0
	for k, w := range o.final {
		if len(l.finals[k]) == 0 {
			n++
			if n <= 6 {
				s += fmt.Sprintf("\n  missing %v end %d events %d newest %+v", k, w.end, len(w.vals), l.newest[k])
				for ok, recs := range l.finals {
					if ok.entity == k.entity && ok.set == k.set && ok.start > k.start-20_000 && ok.start < k.start+20_000 {
						_, expected := o.final[ok]
						s += fmt.Sprintf("\n     engine has %v end %d n=%d expected=%v", ok, recs[0].End, recs[0].Revision, expected)
					}
				}
			}
		}
	}
	return fmt.Sprintf("; %d windows missing:%s", n, s)
}

// hasAllFinals reports whether every window the oracle closed has a final total.
func (o *oracle) hasAllFinals(l *totalsLog) bool {
	for k := range o.final {
		if len(l.finals[k]) == 0 {
			return false
		}
	}
	return true
}

// sortedKeys are the window keys of m, by set, entity and start.
func sortedKeys[V any](m map[winKey]V) []winKey {
	keys := make([]winKey, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		if a.set != b.set {
			return a.set < b.set
		}
		if a.entity != b.entity {
			return a.entity < b.entity
		}
		return a.start < b.start
	})
	return keys
}

// check compares the totals with the oracle, exactly.
func (o *oracle) check(t testing.TB, l *totalsLog) {
	t.Helper()
	keys := sortedKeys(o.final)
	bad := 0
	for _, k := range keys {
		finals := l.finals[k]
		if len(finals) == 0 {
			t.Errorf("%v: no final total", k)
			bad++
			continue
		}
		want := o.expected(k)
		for _, r := range finals {
			if r.End != o.final[k].end {
				t.Errorf("%v: end %d, want %d", k, r.End, o.final[k].end)
			}
			if r.Revision != uint64(len(o.final[k].vals)) {
				t.Errorf("%v: revision %d, want %d (events applied)", k, r.Revision, len(o.final[k].vals))
			}
			for name, wv := range want {
				v, ok := r.Value(name)
				got := v.Float
				if v.Kind == totals.KindInt {
					got = float64(v.Int)
				}
				if !ok || got != wv {
					t.Errorf("%v: %s = %v, want %v", k, name, got, wv)
					bad++
				}
			}
			if l.newest[k] != finals[len(finals)-1] && !l.newest[k].Final {
				t.Errorf("%v: a non-final record compares newer than the final one", k)
			}
		}
		if bad > 20 {
			t.Fatal("too many mismatches")
		}
	}
	for k := range l.finals {
		if _, ok := o.final[k]; !ok {
			t.Errorf("%v: final total the oracle does not expect (%+v)", k, l.finals[k][0])
		}
	}
}

// runProcessor starts the processor in the background; the returned func stops it and returns
// Run's error.
func runProcessor(t testing.TB, topo *topology.Topology, cfg processors.Config) (stop func() error) {
	t.Helper()
	p, err := processors.New(topo, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	return func() error {
		cancel()
		return <-done
	}
}

// counter returns the sum of a counter family in reg.
func counter(t testing.TB, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			total += m.GetCounter().GetValue()
		}
	}
	return total
}

// gauge returns the sum of a gauge family in reg.
func gauge(t testing.TB, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				total += m.GetGauge().GetValue()
			}
		}
	}
	return total
}

// resetOffsets rewinds the (stopped) group to the start of topic, so the processor re-reads every
// record: the replay that a crash between changelog write and commit causes, for every record.
func resetOffsets(ctx context.Context, t testing.TB, brokers []string, group, topic string, nparts int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	os := kadm.Offsets{}
	for p := range int32(nparts) {
		os.Add(kadm.Offset{Topic: topic, Partition: p, At: 0, LeaderEpoch: -1})
	}
	if err := kadm.NewClient(cl).CommitAllOffsets(ctx, group, os); err != nil {
		t.Fatalf("rewind group %s on %s: %v", group, topic, err)
	}
}

// kfakeBrokers starts an in-process one-broker kfake cluster for the test and returns its address.
func kfakeBrokers(t testing.TB) []string {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()
}
