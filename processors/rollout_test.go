package processors_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/abacus-stream/abacus/deadletter"
	"github.com/abacus-stream/abacus/internal/plan"
	"github.com/abacus-stream/abacus/internal/testenv"
	"github.com/abacus-stream/abacus/topology"
	"github.com/abacus-stream/abacus/totals"
	"github.com/abacus-stream/abacus/windows"
)

// The sets the second version of the scenario adds.
const (
	setExtra = "extra-5m"     // an entity set, declared first
	setDigit = "tumble-digit" // a rollup, by a key no other set has: the device's last digit
)

// v2TumbleGrace is the grace the second version gives the tumbling set and its rollups (raised
// from tumbleGrace); v2SessGrace the session set's (lowered from sessGrace).
const (
	v2TumbleGrace = 20 * time.Second
	v2SessGrace   = 2 * time.Second
)

// digitOf is the added rollup's key: ten keys, so that some are owned by each instance.
func digitOf(dev string) string { return "digit-" + dev[len(dev)-1:] }

// scenarioV2Topology is scenarioTopology as a later version of the user's code has it, with a
// change of each kind a running group accepts (docs/OPERATIONS.md, "Upgrading a topology"): a set
// added first (every set of the first version has another position) and a rollup added last; the
// rollups reordered; aggregations reordered, and one added to the fleet rollup; the tumbling set's
// grace, and its rollups', raised; the session set's lowered; the hopping set's emission changed.
func scenarioV2Topology(t testing.TB, name, input string) *topology.Topology {
	t.Helper()
	b := topology.New(name)
	b.LateTopic(name + "-late")
	src := topology.NewSource(b, input, topology.JSON[reading](),
		func(r reading) string { return r.Dev },
		func(r reading) time.Time { return time.UnixMilli(r.TS) })
	src.Aggregate(setExtra, windows.Tumbling(5*time.Minute)).Grace(0).Count("n")
	src.Aggregate(setFleet, tumbleSpec).Grace(v2TumbleGrace).Global().
		Max("max", "v").Count("n").Mean("mean", "v").Sum("sum", "v")
	src.Aggregate(setRegion, tumbleSpec).Grace(v2TumbleGrace).By("region", func(r reading) string { return regionOf(r.Dev) }).
		Last("last", "v").Mean("mean", "v").Max("max", "v").Min("min", "V").Sum("sum", "v").Count("n")
	src.Aggregate(setTumble, tumbleSpec).Grace(v2TumbleGrace).
		Sum("sum", "v").Count("n").Min("min", "V").Max("max", "v").Mean("mean", "v").Last("last", "v")
	src.Aggregate(setHop, hopSpec).Grace(0).Count("n").Max("max", "v")
	src.Aggregate(setSession, windows.Session(time.Duration(sessGap)*time.Millisecond)).
		Grace(v2SessGrace).Count("n").SumOf("sum", func(r reading) float64 { return r.V })
	src.Aggregate(setDigit, tumbleSpec).Grace(v2TumbleGrace).By("digit", func(r reading) string { return digitOf(r.Dev) }).
		Count("n").Sum("sum", "v")
	topo, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	return topo
}

// TestRollingRolloutRealKafka rolls the scenario's topology out to its second version
// (scenarioV2Topology) on a real broker, one processor process at a time, while records come:
// two instances run the first version; one is stopped and started with the second, so that the
// two versions run side by side and send each other rollup partials; the new one is SIGKILLed
// and started again (its storage kept), still beside the old one; then the old one is replaced.
// The rules of an upgrade are checked from what the topics hold, by brute force from the input:
//
//   - one final per window, ever (finals of a window agree on every aggregation both carry);
//   - no share lost: for each window of the tumbling sets and their rollups, its final counts and
//     sums exactly its events but those with a late record (each once); a window with no final
//     has a late record for each of its events. Sessions, whose windows a change of grace
//     reshapes, keep it in total: every event is in one session's final or has a late record;
//   - the sets added have, for each window, no total or a whole one, and a whole one for every
//     window after the rollout; the aggregation added to the fleet rollup is right where present,
//     and present after the rollout;
//   - the hopping set, whose grace stayed, equals the oracle's finals exactly;
//   - every dead letter and late record is there once, and no process stops.
func TestRollingRolloutRealKafka(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processor processes")
	}
	brokers := testenv.Kafka(t)
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	const parts = 8
	name := uniqueName("rollout")
	src := name + "-in"
	createTopic(ctx, t, brokers, src, parts)
	const records = 8_000
	ins := genInputs(57, records, 120, baseTime)
	n := len(ins)
	var chunks [][]input
	for i := range 5 {
		chunks = append(chunks, ins[i*n/5:(i+1)*n/5])
	}
	chunks[4] = append(chunks[4], closingEvents(parts, baseTime+records*200, false)...)
	var produced []input // in the order produced: each partition's order, for the oracle

	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	pp := newPacedProducer(t, brokers, src)
	send := func(what string, ins []input, d time.Duration) <-chan error {
		produced = append(produced, ins...)
		return pp.produce(ctx, ins, d)
	}
	dir := t.TempDir()
	v1 := scaleChild{Brokers: brokers, Name: name, Input: src, Topology: "scenario"}
	v2 := v1
	v2.Topology = "scenario-v2"

	// Static members, as abacus run makes them: an instance SIGKILLed and started again takes its
	// partitions back, rather than lending them to an instance of the other version meanwhile
	// (docs/OPERATIONS.md, "Upgrading a topology", says what that would do).
	member := func(c scaleChild, id string) scaleChild {
		c.InstanceID = id
		return c
	}
	a, b := startInstance(t, member(v1, "a"), "A", dir), startInstance(t, member(v1, "b"), "B", dir)
	wait(t, "produce the first fifth", send("first", chunks[0], 5*time.Second))
	groupCaughtUp(ctx, t, adm, name, src, 3*time.Minute, a, b)

	// A is stopped and started with the second version while records come: two versions run.
	ch := send("second", chunks[1], 10*time.Second)
	time.Sleep(3 * time.Second)
	a.stop(t)
	a2 := startInstance(t, member(v2, "a"), "A2", dir)
	wait(t, "produce the second fifth", ch)
	groupCaughtUp(ctx, t, adm, name, src, 3*time.Minute, a2, b)

	// The partitions of the new version run ten minutes of event time ahead of the others, so
	// that windows of the added rollup close there first and their partials reach owners that
	// run the first version and cannot keep them, while the other partitions have yet to reach
	// those windows, and will reach them in the second version: those windows must get no total,
	// not one short of a share.
	owner := map[int32]string{}
	for _, e := range readHandovers(t, a, a2, b) {
		if e.partition >= 0 {
			owner[e.partition] = e.instance
		}
	}
	burst := aheadEvents(produced, owner, "A2", parts, 600_000)
	var digitOwners []string
	for d := range 10 {
		p := partitionOf(plan.RollupStateKey(setDigit, fmt.Sprintf("digit-%d", d)), parts)
		digitOwners = append(digitOwners, fmt.Sprintf("digit-%d: %d (%s)", d, p, owner[p]))
	}
	t.Logf("owners %v; the added rollup's keys: %v; %d events ahead on A2's partitions", owner, digitOwners, len(burst))
	wait(t, "produce the events ahead", send("ahead", burst, 0))
	groupCaughtUp(ctx, t, adm, name, src, 3*time.Minute, a2, b)
	time.Sleep(3 * time.Second) // ticks: the partials and progress go out

	// The new version is SIGKILLed beside the old one, and started again on its storage.
	ch = send("third", chunks[2], 10*time.Second)
	time.Sleep(3 * time.Second)
	a2.kill(t)
	a2 = startInstance(t, member(v2, "a"), "A2", dir)
	wait(t, "produce the third fifth", ch)
	groupCaughtUp(ctx, t, adm, name, src, 3*time.Minute, a2, b)

	// B, the last of the first version, is replaced before its partitions reach the windows
	// ahead.
	ch = send("fourth", chunks[3], 10*time.Second)
	b.stop(t)
	b2 := startInstance(t, member(v2, "b"), "B2", dir)
	wait(t, "produce the fourth fifth", ch)
	groupCaughtUp(ctx, t, adm, name, src, 3*time.Minute, a2, b2)

	// Windows that start after every event produced so far hold only events that the second
	// version alone processed.
	tail := int64(math.MinInt64)
	for _, in := range produced {
		if !in.bad && in.r.TS < baseTime+records*400 {
			tail = max(tail, in.r.TS)
		}
	}
	wait(t, "produce the last fifth", send("last", chunks[4], 5*time.Second))
	groupCaughtUp(ctx, t, adm, name, src, 3*time.Minute, a2, b2)
	o := newOracle(parts)
	for _, in := range produced {
		o.feed(in)
	}
	ro := newRolloutCheck(o, produced, tail)
	var problems []string
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(2 * time.Second) {
		a2.alive(t)
		b2.alive(t)
		problems = ro.problems(ctx, t, brokers, name)
		if len(problems) == 0 || time.Now().After(deadline) {
			break
		}
	}
	a2.stop(t)
	b2.stop(t)
	if len(problems) == 0 {
		problems = ro.problems(ctx, t, brokers, name) // and nothing changed as they stopped
	}
	for i, p := range problems {
		if i == 30 {
			t.Errorf("... and %d more", len(problems)-i)
			break
		}
		t.Error(p)
	}
	// The case the events ahead make: an owner of the first version ignored partials of the
	// added rollup.
	if ignored := countLines(t, b.logPath, "partial total of a rollup set this topology does not have"); ignored == 0 {
		t.Errorf("no partial of the added rollup reached an owner of the first version (owners %v): the test did not make the case it is for", digitOwners)
	} else {
		t.Logf("the first version's owners ignored %d partials of the added rollup", ignored)
	}
	t.Logf("%d records over %d partitions, rolled out with two versions side by side: %s", len(produced), parts, ro.summary)
}

// aheadEvents returns events of the devices of the partitions that instance owns, ahead by the
// given event time of every event in ins, and others 100 s after them, which close their windows.
func aheadEvents(ins []input, owner map[int32]string, instance string, parts int, ahead int64) []input {
	last := int64(math.MinInt64)
	for _, in := range ins {
		if !in.bad && in.r.TS < time.Now().UnixMilli() {
			last = max(last, in.r.TS)
		}
	}
	var out []input
	for i := range 120 {
		dev := fmt.Sprintf("dev-%02d", i)
		if owner[partitionOf(dev, parts)] != instance {
			continue
		}
		for k := range 2 {
			r := reading{Dev: dev, TS: last + ahead + int64(k*100_000+i*100), V: float64(i % 7)}
			v, _ := json.Marshal(r)
			out = append(out, input{key: dev, value: v, r: r})
		}
	}
	return out
}

// countLines counts the lines of a file that contain s.
func countLines(t *testing.T, path, s string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), s)
}

// rolloutCheck checks the rules of an upgrade (TestRollingRolloutRealKafka) against the input.
type rolloutCheck struct {
	o    *oracle
	tail int64
	// events are the events that count (decodable, not from the future, not the closing ones),
	// per set and window.
	events  map[winKey]*share
	session share // every event, for the session set's total
	summary string
}

// share is a count and sum of events.
type share struct {
	n   int64
	sum float64
}

// tumblingKeys are the tumbling sets checked window by window, with the key and window start
// each gives an event.
var tumblingKeys = map[string]func(r reading) (string, int64){
	setTumble: func(r reading) (string, int64) { return r.Dev, floorTo(r.TS, 60_000) },
	setRegion: func(r reading) (string, int64) { return regionOf(r.Dev), floorTo(r.TS, 60_000) },
	setFleet:  func(r reading) (string, int64) { return topology.GlobalKey, floorTo(r.TS, 60_000) },
	setDigit:  func(r reading) (string, int64) { return digitOf(r.Dev), floorTo(r.TS, 60_000) },
	setExtra:  func(r reading) (string, int64) { return r.Dev, floorTo(r.TS, 300_000) },
}

// added are the sets the second version adds: windows open at the upgrade have no total.
var added = map[string]bool{setExtra: true, setDigit: true}

func floorTo(ts, size int64) int64 { return ts - ((ts%size)+size)%size }

func newRolloutCheck(o *oracle, ins []input, tail int64) *rolloutCheck {
	c := &rolloutCheck{o: o, tail: tail, events: map[winKey]*share{}}
	for _, in := range ins {
		if in.bad || strings.HasPrefix(in.r.Dev, "zz-close") || in.r.TS > time.Now().Add(topology.DefaultMaxFutureSkew).UnixMilli() {
			continue
		}
		for set, keyOf := range tumblingKeys {
			key, start := keyOf(in.r)
			k := winKey{set, key, start}
			if c.events[k] == nil {
				c.events[k] = &share{}
			}
			c.events[k].n++
			c.events[k].sum += in.r.V
		}
		c.session.n++
		c.session.sum += in.r.V
	}
	return c
}

// problems reads the totals, late and dead-letter topics to their ends and lists every broken
// rule.
func (c *rolloutCheck) problems(ctx context.Context, t *testing.T, brokers []string, name string) []string {
	t.Helper()
	var out []string
	end := endOffsets(ctx, t, brokers, name+"-totals")
	l := readTotals(ctx, t, brokers, name+"-totals", func(l *totalsLog) bool { return int64(l.count) >= end })

	// One final per window: every final of a window agrees with the first on what both carry.
	for k, fs := range l.finals {
		for _, f := range fs[1:] {
			for _, v := range f.Values {
				if w, ok := fs[0].Value(v.Name); ok && (w.Int != v.Int || w.Float != v.Float) {
					out = append(out, fmt.Sprintf("%v: two finals disagree on %s: %v and %v", k, v.Name, w, v))
				}
			}
		}
	}

	// Late records, once each, by set and window.
	lateRecs := readSetAside(ctx, t, brokers, name+"-late")
	late := map[winKey]*share{}
	var lateSession share
	seen := map[string]bool{}
	for _, r := range lateRecs {
		id := r.Identity("late")
		if seen[id] {
			out = append(out, fmt.Sprintf("late record written twice: %s for set %s", r.Source, r.Set))
			continue
		}
		seen[id] = true
		var ev reading
		if err := json.Unmarshal(r.Value, &ev); err != nil {
			out = append(out, fmt.Sprintf("late record %s: %v", r.Source, err))
			continue
		}
		if r.Set == setSession {
			lateSession.n++
			lateSession.sum += ev.V
			continue
		}
		keyOf := tumblingKeys[r.Set]
		if keyOf == nil {
			continue // the hopping set's, checked through the oracle
		}
		key, start := keyOf(ev)
		k := winKey{r.Set, key, start}
		if late[k] == nil {
			late[k] = &share{}
		}
		late[k].n++
		late[k].sum += ev.V
	}
	dead := readSetAside(ctx, t, brokers, name+"-dead-letter")
	deadSeen := map[string]bool{}
	for _, r := range dead {
		deadSeen[r.Identity("dead")] = true
	}
	if want := c.o.future + c.o.bad; len(dead) != want || len(deadSeen) != want {
		out = append(out, fmt.Sprintf("dead-letter topic holds %d records (%d distinct), want %d once each", len(dead), len(deadSeen), want))
	}

	// No share lost, window by window, for the tumbling sets and their rollups.
	valueOf := func(k winKey, name string) (float64, bool) {
		fs := l.finals[k]
		if len(fs) == 0 {
			return 0, false
		}
		v, ok := fs[0].Value(name)
		if v.Kind == totals.KindInt {
			return float64(v.Int), ok
		}
		return v.Float, ok
	}
	keys := sortedKeys(c.events)
	whole, none := 0, 0
	for _, k := range keys {
		all, lt := c.events[k], late[k]
		if lt == nil {
			lt = &share{}
		}
		if len(l.finals[k]) == 0 {
			switch {
			case lt.n == all.n:
			case added[k.set] && k.start < c.tail:
				none++ // open at the upgrade: no total
			default:
				out = append(out, fmt.Sprintf("%v: %d events, no final and %d late records", k, all.n, lt.n))
			}
			continue
		}
		got, _ := valueOf(k, "n")
		sum, hasSum := valueOf(k, "sum")
		if int64(got)+lt.n != all.n || (hasSum && sum+lt.sum != all.sum) {
			out = append(out, fmt.Sprintf("%v: %d events (sum %v): the final counts %v (sum %v), %d late records (sum %v)",
				k, all.n, all.sum, got, sum, lt.n, lt.sum))
			continue
		}
		whole++
		if k.set == setFleet {
			mean, has := valueOf(k, "mean")
			if has && math.Abs(mean-sum/got) > 1e-9*math.Abs(sum/got) {
				out = append(out, fmt.Sprintf("%v: mean %v of sum %v over %v", k, mean, sum, got))
			}
			if !has && k.start >= c.tail {
				out = append(out, fmt.Sprintf("%v: a window after the rollout has no mean", k))
			}
		}
	}
	for k := range l.finals {
		if _, ok := tumblingKeys[k.set]; ok && c.events[k] == nil && !strings.HasPrefix(k.entity, "zz-close") {
			out = append(out, fmt.Sprintf("%v: a final of a window with no event", k))
		}
	}

	// Sessions: every event is in one session's final or has a late record.
	var inSessions share
	for k, fs := range l.finals {
		if k.set != setSession || strings.HasPrefix(k.entity, "zz-close") {
			continue
		}
		v, _ := fs[0].Value("n")
		s, _ := fs[0].Value("sum")
		inSessions.n += v.Int
		inSessions.sum += s.Float
	}
	if inSessions.n+lateSession.n != c.session.n || inSessions.sum+lateSession.sum != c.session.sum {
		out = append(out, fmt.Sprintf("sessions: %d events (sum %v): finals count %d (sum %v), %d late records (sum %v)",
			c.session.n, c.session.sum, inSessions.n, inSessions.sum, lateSession.n, lateSession.sum))
	}

	// The hopping set, unchanged but for its emission, equals the oracle.
	ho := *c.o
	ho.final = map[winKey]*oWin{}
	for k, w := range c.o.final {
		if k.set == setHop {
			ho.final[k] = w
		}
	}
	hl := &totalsLog{newest: map[winKey]*totals.Record{}, finals: map[winKey][]*totals.Record{}}
	for k, fs := range l.finals {
		if k.set == setHop {
			hl.finals[k], hl.newest[k] = fs, l.newest[k]
		}
	}
	rt := &recordingT{TB: t}
	ho.check(rt, hl)
	out = append(out, rt.errors...)
	c.summary = fmt.Sprintf("%d windows of the tumbling sets whole (final + late records), %d of the added sets without a total (open at the upgrade), %d hopping finals equal to the oracle, %d late records and %d dead letters once each",
		whole, none, len(ho.final), len(lateRecs), len(dead))
	return out
}

// readSetAside reads a dead-letter or late topic from its start to its end.
func readSetAside(ctx context.Context, t *testing.T, brokers []string, topic string) []deadletter.Record {
	t.Helper()
	want := endOffsets(ctx, t, brokers, topic)
	if want == 0 {
		return nil
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var out []deadletter.Record
	for int64(len(out)) < want {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %s: %v", topic, ctx.Err())
		}
		fs.EachRecord(func(rec *kgo.Record) {
			var hs []deadletter.Header
			for _, h := range rec.Headers {
				hs = append(hs, deadletter.Header{Key: h.Key, Value: h.Value})
			}
			r, err := deadletter.Parse(rec.Value, hs)
			if err != nil {
				t.Fatalf("%s: %v", topic, err)
			}
			out = append(out, r)
		})
	}
	return out
}

// recordingT is a testing.TB whose errors are kept, not reported: a check that may be run again
// while the processors catch up.
type recordingT struct {
	testing.TB
	errors []string
}

func (r *recordingT) Helper() {}

func (r *recordingT) Errorf(format string, args ...any) {
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}

func (r *recordingT) Error(args ...any) { r.errors = append(r.errors, fmt.Sprint(args...)) }

func (r *recordingT) Fatal(args ...any) { r.Error(args...) }

func (r *recordingT) Fatalf(format string, args ...any) { r.Errorf(format, args...) }
