package engine_test

import (
	"bytes"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/abacus-stream/abacus/abacustest"
	"github.com/abacus-stream/abacus/topology"
	"github.com/abacus-stream/abacus/windows"
)

// regionOf puts a device in one of three regions.
func regionOf(device string) string {
	h := fnv.New32a()
	h.Write([]byte(device))
	return fmt.Sprintf("r%d", h.Sum32()%3)
}

// rollups has an entity set and two rollups of it (per region, fleet-wide) with the same window,
// grace and aggregations: a rollup's final is then the merge of its entities' finals.
func rollups(t testing.TB, emit topology.Emission) *topology.Topology {
	t.Helper()
	b := topology.New("fleet")
	src := topology.NewSource(b, "readings", topology.JSON[reading](),
		func(r reading) string { return r.Device },
		func(r reading) time.Time { return time.UnixMilli(r.TS) })
	add := func(a *topology.AggregateSet[reading]) {
		a.Grace(10*time.Second).Emit(emit).Count("count").Sum("sum", "Temp").Max("max", "Temp").Min("min", "Temp").
			Mean("mean", "Temp").Last("last", "Temp").Distinct("devices", "Device")
	}
	add(src.Aggregate("minute", windows.Tumbling(time.Minute)))
	add(src.Aggregate("region", windows.Tumbling(time.Minute)).By("region", func(r reading) string { return regionOf(r.Device) }))
	add(src.Aggregate("all", windows.Tumbling(time.Minute)).Global())
	src.Aggregate("cold", windows.Tumbling(time.Minute)).Grace(10 * time.Second).Global().
		Where(func(r reading) bool { return r.Temp < 10 }).Count("count")
	topo, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	return topo
}

// TestRollupInOrder checks rollup finals against totals computed from the raw events: every event
// on time, several partitions, one window after another.
func TestRollupInOrder(t *testing.T) {
	d := abacustest.New(t, rollups(t, topology.FinalOnly()), abacustest.Options{Start: at(t0), Partitions: 4, IdleTimeout: time.Minute})
	type agg struct {
		count, sum, cold float64
		max              float64
	}
	want := map[string]map[int64]*agg{}
	add := func(key string, w int64, temp float64) {
		if want[key] == nil {
			want[key] = map[int64]*agg{}
		}
		a := want[key][w]
		if a == nil {
			a = &agg{max: math.Inf(-1)}
			want[key][w] = a
		}
		a.count++
		a.sum += temp
		a.max = max(a.max, temp)
		if temp < 10 {
			a.cold++
		}
	}
	for i := range 600 {
		dev := fmt.Sprintf("d%02d", i%20)
		ts := t0 + int64(i)*500 // five minutes
		temp := float64(i % 17)
		d.Pipe("readings", dev, reading{Device: dev, TS: ts, Temp: temp})
		w := ts - ts%60_000
		add(regionOf(dev), w, temp)
		add(topology.GlobalKey, w, temp)
		d.Advance(500 * time.Millisecond)
	}
	// Every partition goes quiet: idle advances close the last windows, and progress follows.
	d.Advance(3 * time.Minute)
	for key, byWindow := range want {
		set := "region"
		if key == topology.GlobalKey {
			set = "all"
		}
		for w, a := range byWindow {
			got := d.Final(set, key, at(w))
			got.Expect(t, map[string]float64{"count": a.count, "sum": a.sum, "max": a.max, "mean": a.sum / a.count})
			if set == "all" {
				if c := d.Final("cold", key, at(w)).Float("count"); c != a.cold {
					t.Errorf("cold count of window %d: %v, want %v", w, c, a.cold)
				}
			}
		}
	}
	if n := len(d.FinalsOf("all", topology.GlobalKey)); n != 5 {
		t.Fatalf("%d fleet-wide finals, want 5 (one per minute): %v", n, d.FinalsOf("all", topology.GlobalKey))
	}
	// The global key's owner got at most one final partial per source partition and window (the
	// loop messages to its key are partials, kind 6, and the closes that prune its windows).
	partials := 0
	for _, m := range d.Messages("fleet-loop") {
		if strings.HasPrefix(m.Key, "abacus-rollup/all/") && (m.Value[0] == 6 || m.Value[0] == 8) {
			partials++
		}
	}
	if partials == 0 {
		t.Fatal("no partial sent to the global key's owner")
	}
	if partials > 4*5 {
		t.Fatalf("%d partials sent to the global key's owner for 5 windows over 4 partitions", partials)
	}
}

// TestRollupsMergeEntityFinalsThroughRestarts runs disorder, late events, lagging
// acknowledgements, redeliveries and restarts that keep or lose the local tables: every rollup window gets
// exactly one final, and it is the merge of its entities' finals (same window, grace and
// aggregations, so an event counts in a rollup exactly when it counts for its entity).
func TestRollupsMergeEntityFinalsThroughRestarts(t *testing.T) {
	for seed := range uint64(12) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 99))
			d := abacustest.New(t, rollups(t, topology.FinalOnly()), abacustest.Options{Start: at(t0), Partitions: 3 + int(seed%3),
				IdleTimeout: 30 * time.Second, AckLag: int(seed % 4)})
			clock := t0
			for i := range 1500 {
				dev := fmt.Sprintf("d%02d", rng.IntN(25))
				clock += int64(rng.IntN(400))
				ts := clock - int64(rng.IntN(25_000)) // up to 25 s out of order: some late for grace 10 s
				d.Pipe("readings", dev, reading{Device: dev, TS: ts, Temp: float64(rng.IntN(40)) - 5})
				if lag := time.Duration(clock-d.Now().UnixMilli()) * time.Millisecond; lag > 0 {
					d.Advance(lag) // the wall clock keeps up with event time
				}
				switch i % 400 {
				case 399:
					d.Restart(rng.IntN(2) == 0)
				case 200:
					// A processor that restarts before committing reads its records again.
					d.Redeliver("readings", int32(rng.IntN(3)), 0)
				}
			}
			d.Advance(5 * time.Minute)
			checkRollupFinals(t, d)
			// Every window closed, and left the table since: the gauges count none, never fewer.
			d.Advance(5 * time.Minute)
			for _, g := range []string{"abacus_processor_windows_held", "abacus_processor_windows_open"} {
				if n := gauge(t, d.Registry(), g); n != 0 {
					t.Errorf("%s = %v after every window closed and left", g, n)
				}
			}
		})
	}
}

func checkRollupFinals(t *testing.T, d *abacustest.Driver) {
	t.Helper()
	type key struct {
		set, key string
		start    int64
	}
	merged := map[key]map[string]float64{}
	once := map[key]bool{} // a restart emits a final again (the same): count each window once
	for _, f := range d.Finals() {
		if (f.Set != "minute" && f.Set != "hop") || once[key{f.Set, f.Entity, f.Start.UnixMilli()}] {
			continue
		}
		once[key{f.Set, f.Entity, f.Start.UnixMilli()}] = true
		rolls := []key{{"region", regionOf(f.Entity), f.Start.UnixMilli()}, {"all", topology.GlobalKey, f.Start.UnixMilli()}}
		if f.Set == "hop" {
			rolls = []key{{"hop-region", regionOf(f.Entity), f.Start.UnixMilli()}}
		}
		for _, k := range rolls {
			m := merged[k]
			if m == nil {
				m = map[string]float64{"max": math.Inf(-1), "min": math.Inf(1)}
				merged[k] = m
			}
			m["count"] += f.Float("count")
			m["sum"] += f.Float("sum")
			m["max"] = max(m["max"], f.Float("max"))
			m["min"] = min(m["min"], f.Float("min"))
		}
	}
	if len(merged) == 0 {
		t.Fatal("no entity finals")
	}
	seen := map[key]bool{}
	for _, f := range d.Finals() {
		if f.Set != "region" && f.Set != "all" && f.Set != "hop-region" {
			continue
		}
		k := key{f.Set, f.Entity, f.Start.UnixMilli()}
		seen[k] = true
		if _, ok := merged[k]; !ok {
			t.Errorf("final of %s/%s at %d without any entity final", f.Set, f.Entity, k.start)
		}
	}
	for k, m := range merged {
		got := d.Final(k.set, k.key, at(k.start)) // fails on two different finals
		for _, name := range []string{"count", "max", "min"} {
			if got.Float(name) != m[name] {
				t.Errorf("%s/%s at %d: %s = %v, the entities' finals merge to %v", k.set, k.key, k.start, name, got.Float(name), m[name])
			}
		}
		if math.Abs(got.Float("sum")-m["sum"]) > 1e-9*math.Max(1, math.Abs(m["sum"])) {
			t.Errorf("%s/%s at %d: sum = %v, want %v", k.set, k.key, k.start, got.Float("sum"), m["sum"])
		}
	}
	if len(seen) != len(merged) {
		t.Errorf("%d rollup windows have finals, the entity finals make %d", len(seen), len(merged))
	}
}

// TestRollupEarlyFirings: an EarlyEvery rollup sends running totals before its final, never more
// than the final says, and the final is still the merge of the entities' finals.
func TestRollupEarlyFirings(t *testing.T) {
	d := abacustest.New(t, rollups(t, topology.EarlyEvery(5*time.Second)), abacustest.Options{Start: at(t0), Partitions: 4,
		IdleTimeout: 20 * time.Second, AckLag: 2})
	rng := rand.New(rand.NewPCG(7, 7))
	clock := t0
	held := map[int64]float64{} // what the owner holds of each window mid-stream
	for i := range 800 {
		dev := fmt.Sprintf("d%02d", rng.IntN(30))
		clock += int64(rng.IntN(300))
		d.Pipe("readings", dev, reading{Device: dev, TS: clock - int64(rng.IntN(5000)), Temp: float64(rng.IntN(30))})
		if lag := time.Duration(clock-d.Now().UnixMilli()) * time.Millisecond; lag > 0 {
			d.Advance(lag)
		}
		if i%100 == 50 {
			for _, w := range d.Windows("all", topology.GlobalKey) {
				held[w.Start.UnixMilli()] = max(held[w.Start.UnixMilli()], w.Values["count"].Number())
			}
		}
	}
	if len(held) == 0 {
		t.Fatal("the global key's owner held no window mid-stream (abacustest.Windows of a rollup)")
	}
	d.Advance(3 * time.Minute)
	checkRollupFinals(t, d)
	early := 0
	for _, tot := range d.Totals() {
		if tot.Set != "all" || tot.Final {
			continue
		}
		early++
		final := d.Final("all", topology.GlobalKey, tot.Start)
		if tot.Float("count") > final.Float("count") || tot.Revision > final.Revision {
			t.Fatalf("early total %v is ahead of the final %v", tot, final)
		}
	}
	if early == 0 {
		t.Fatal("no early total of the fleet-wide rollup")
	}
	for start, n := range held {
		if f := d.Final("all", topology.GlobalKey, at(start)); n > f.Float("count") {
			t.Fatalf("the owner held %v events of window %d, its final counts %v", n, start, f.Float("count"))
		}
	}
}

// TestRollupEmptyPartitions: partitions that never see an event still let the rollups close
// (they follow the furthest partition's progress once idle), and a backfill far behind the wall
// clock is not judged late for it.
func TestRollupEmptyPartitions(t *testing.T) {
	d := abacustest.New(t, rollups(t, topology.FinalOnly()), abacustest.Options{Start: at(t0 + 30*24*3600_000), Partitions: 8,
		IdleTimeout: 10 * time.Second})
	for i := range 200 {
		dev := fmt.Sprintf("d%d", i%2) // two devices: six partitions stay empty
		d.Pipe("readings", dev, reading{Device: dev, TS: t0 + int64(i)*1000, Temp: 1})
		d.Advance(100 * time.Millisecond)
	}
	d.Advance(time.Minute)
	checkRollupFinals(t, d)
	if n := len(d.FinalsOf("all", topology.GlobalKey)); n != 4 {
		t.Fatalf("%d fleet-wide finals, want 4: %v", n, d.FinalsOf("all", topology.GlobalKey))
	}
	if late := len(d.Late()) + int(sumMetric(t, d.Registry(), "abacus_processor_late_dropped_total")); late != 0 {
		t.Fatalf("%d late events in a backfill a month behind the wall clock", late)
	}
}

// TestRollupKeys: an empty rollup key leaves the event out of the set only; one past the entity
// limit sends the event to the dead-letter topic, naming the set, and counts it nowhere.
func TestRollupKeys(t *testing.T) {
	b := topology.New("keys").Limits(1<<20, 16)
	src := topology.NewSource(b, "readings", topology.JSON[reading](),
		func(r reading) string { return r.Device },
		func(r reading) time.Time { return time.UnixMilli(r.TS) })
	src.Aggregate("minute", windows.Tumbling(time.Minute)).Grace(0).Count("count")
	src.Aggregate("by-kind", windows.Tumbling(time.Minute)).Grace(0).By("kind", func(r reading) string { return r.Kind }).Count("count")
	topo, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	d := abacustest.New(t, topo, abacustest.Options{Start: at(t0), Partitions: 2, IdleTimeout: 5 * time.Second})
	d.Pipe("readings", "a", reading{Device: "a", TS: t0, Kind: "x"})
	d.Pipe("readings", "a", reading{Device: "a", TS: t0 + 1, Kind: ""})
	d.Pipe("readings", "a", reading{Device: "a", TS: t0 + 2, Kind: strings.Repeat("k", 17)})
	d.Advance(2 * time.Minute)
	d.Final("minute", "a", at(t0)).Expect(t, map[string]float64{"count": 2})
	d.Final("by-kind", "x", at(t0)).Expect(t, map[string]float64{"count": 1})
	dl := d.DeadLetters()
	if len(dl) != 1 || dl[0].Reason != "too-large" || !strings.Contains(dl[0].Detail, "rollup key of set by-kind") {
		t.Fatalf("dead letters %+v, want one too-large naming set by-kind", dl)
	}
}

// TestRollupKeyChangeRefused: a set that was keyed by its entity cannot come back keyed by a
// rollup key (or the other way): its state is per entity, and the processor refuses to start.
func TestRollupKeyChangeRefused(t *testing.T) {
	build := func(rollup bool) *topology.Topology {
		b := topology.New("change")
		src := topology.NewSource(b, "readings", topology.JSON[reading](),
			func(r reading) string { return r.Device },
			func(r reading) time.Time { return time.UnixMilli(r.TS) })
		a := src.Aggregate("minute", windows.Tumbling(time.Minute)).Grace(0).Count("count")
		if rollup {
			a.Global()
		}
		topo, err := b.Build()
		if err != nil {
			t.Fatal(err)
		}
		return topo
	}
	var failed error
	d := abacustest.New(t, build(false), abacustest.Options{Start: at(t0), Partitions: 2, OnFail: func(err error) { failed = err }})
	d.Pipe("readings", "a", reading{Device: "a", TS: t0})
	d.Advance(time.Minute) // the partition's record now holds the layout
	d.RestartWith(build(true), false)
	if failed == nil || !strings.Contains(failed.Error(), `aggregate set "minute" changed its window or key`) {
		t.Fatalf("restart with the set keyed otherwise: %v", failed)
	}
}

// TestRollupOwnerStateFitsMessages: a rollup whose merged sketch cannot fit a message is refused
// by Build; one that fits, but not beside the early partials of every partition, has its owner
// drop early partials, never a final, and never stop. The final's distinct count is the sketch's
// estimate of every device.
func TestRollupOwnerStateFitsMessages(t *testing.T) {
	build := func(maxMessage int) (*topology.Topology, error) {
		b := topology.New("sketch").MaxMessageBytes(maxMessage)
		src := topology.NewSource(b, "readings", topology.JSON[reading](),
			func(r reading) string { return r.Device },
			func(r reading) time.Time { return time.UnixMilli(r.TS) })
		src.Aggregate("all", windows.Tumbling(time.Minute)).Grace(0).Global().Emit(topology.EarlyEvery(time.Second)).
			Count("count").Distinct("devices", "Device")
		return b.Build()
	}
	if _, err := build(16 << 10); err == nil || !strings.Contains(err.Error(), `aggregate set "all": a rollup's merged state can reach`) {
		t.Fatalf("Build with a HyperLogLog over 16 KiB messages: %v", err)
	}
	topo, err := build(24 << 10)
	if err != nil {
		t.Fatal(err)
	}
	var failed error
	var logs bytes.Buffer
	d := abacustest.New(t, topo, abacustest.Options{Start: at(t0), Partitions: 4, IdleTimeout: 5 * time.Second,
		OnFail: func(err error) { failed = err }, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	const devices = 20_000
	for i := range devices {
		dev := fmt.Sprintf("device-%05d", i)
		d.Pipe("readings", dev, reading{Device: dev, TS: t0 + int64(i)*2, Temp: 1})
		if i%1000 == 0 {
			d.Advance(2 * time.Second) // early partials from every partition
		}
	}
	d.Advance(2 * time.Minute)
	if failed != nil {
		t.Fatalf("the processor stopped: %v", failed)
	}
	f := d.Final("all", topology.GlobalKey, at(t0))
	if f.Float("count") != devices {
		t.Fatalf("count %v, want %d", f.Float("count"), devices)
	}
	if est := f.Float("devices"); math.Abs(est-devices) > 0.03*devices {
		t.Fatalf("distinct devices %v, want about %d", est, devices)
	}
	if len(d.DeadLetters()) != 0 {
		t.Fatalf("dead letters: %+v", d.DeadLetters())
	}
	if !strings.Contains(logs.String(), "early partials dropped") {
		t.Fatal("the owner's state never grew past a message: the test does not test the limit")
	}
}

// TestRollupTooLargeDeadLettersWindow: an aggregation with no bound (a custom one collecting
// values) whose partial, or whose merge at the owner, cannot fit a message: the window's final is
// dead-lettered once, with its reason, no final that misses a partition's share is emitted, and
// the processor and the other sets go on.
func TestRollupTooLargeDeadLettersWindow(t *testing.T) {
	values := topology.UserDefined[reading, []string]{
		Init:   func() []string { return nil },
		Add:    func(a []string, r reading, _ int64) []string { return append(a, r.Device) },
		Merge:  func(a, b []string) []string { return append(a, b...) },
		Encode: func(a []string) []byte { return []byte(strings.Join(a, ",")) },
		Decode: func(b []byte) ([]string, error) {
			if len(b) == 0 {
				return nil, nil
			}
			return strings.Split(string(b), ","), nil
		},
	}
	for _, c := range []struct {
		name       string
		partitions int
		devices    int
		why        string
	}{
		{"merged at the owner", 4, 3000, "merging the partial totals makes the owner's state"},
		{"one partition's partial", 2, 4000, "is larger than a message"},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := topology.New("big").MaxMessageBytes(16 << 10)
			src := topology.NewSource(b, "readings", topology.JSON[reading](),
				func(r reading) string { return r.Device },
				func(r reading) time.Time { return time.UnixMilli(r.TS) })
			src.Aggregate("names", windows.Tumbling(time.Minute)).Grace(0).Global().Custom("names", values)
			src.Aggregate("count", windows.Tumbling(time.Minute)).Grace(0).Global().Count("count")
			topo, err := b.Build()
			if err != nil {
				t.Fatal(err)
			}
			var failed error
			d := abacustest.New(t, topo, abacustest.Options{Start: at(t0), Partitions: c.partitions, IdleTimeout: 5 * time.Second,
				OnFail: func(err error) { failed = err }})
			for i := range c.devices {
				dev := fmt.Sprintf("device-%05d", i)
				d.Pipe("readings", dev, reading{Device: dev, TS: t0 + int64(i)*10})
			}
			d.Advance(2 * time.Minute)
			d.Restart(false) // repeated partials after a restart: still one dead letter
			d.Advance(2 * time.Minute)
			if failed != nil {
				t.Fatalf("the processor stopped: %v", failed)
			}
			if n := d.Final("count", topology.GlobalKey, at(t0)).Float("count"); n != float64(c.devices) {
				t.Fatalf("count %v, want %d", n, c.devices)
			}
			if fs := d.FinalsOf("names", topology.GlobalKey); len(fs) != 0 {
				t.Fatalf("finals of a window that cannot be whole: %v", fs)
			}
			dl := d.DeadLetters()
			if len(dl) != 1 || dl[0].Reason != "too-large" || !strings.Contains(dl[0].Detail, c.why) || dl[0].Set != "names" {
				t.Fatalf("dead letters %+v, want one too-large of set names saying %q", dl, c.why)
			}
		})
	}
}

// TestRollupMergePanicDeadLettersWindow: user code that cannot merge one entity's contribution
// dead-letters that contribution (naming the entity) and the window's final (its total cannot be
// whole); the next window, and the processor, go on.
func TestRollupMergePanicDeadLettersWindow(t *testing.T) {
	picky := topology.UserDefined[reading, string]{
		Init: func() string { return "" },
		Add:  func(a string, r reading, _ int64) string { return a + r.Device[:1] },
		Merge: func(a, b string) string {
			if strings.Contains(b, "x") {
				panic("cannot merge an x")
			}
			return a + b
		},
		Encode: func(a string) []byte { return []byte(a) },
		Decode: func(b []byte) (string, error) { return string(b), nil },
	}
	b := topology.New("picky")
	src := topology.NewSource(b, "readings", topology.JSON[reading](),
		func(r reading) string { return r.Device },
		func(r reading) time.Time { return time.UnixMilli(r.TS) })
	src.Aggregate("letters", windows.Tumbling(time.Minute)).Grace(0).Global().Custom("letters", picky)
	topo, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	var failed error
	d := abacustest.New(t, topo, abacustest.Options{Start: at(t0), Partitions: 2, IdleTimeout: 5 * time.Second,
		OnFail: func(err error) { failed = err }})
	d.Pipe("readings", "a1", reading{Device: "a1", TS: t0})
	d.Pipe("readings", "x1", reading{Device: "x1", TS: t0 + 1})
	d.Pipe("readings", "b1", reading{Device: "b1", TS: t0 + 60_000})
	d.Advance(3 * time.Minute)
	if failed != nil {
		t.Fatalf("the processor stopped: %v", failed)
	}
	if fs := d.FinalsOf("letters", topology.GlobalKey); len(fs) != 1 || !fs[0].Start.Equal(at(t0+60_000)) {
		t.Fatalf("finals %v, want only the second window's", fs)
	}
	var entity, window int
	for _, r := range d.DeadLetters() {
		switch {
		case r.Reason == "user-error" && strings.Contains(r.Detail, `entity "x1"`):
			entity++
		case r.Reason == "user-error" && strings.Contains(r.Detail, `entity "all"`) && strings.Contains(r.Detail, "could not merge a contribution"):
			window++
		default:
			t.Errorf("dead letter %+v", r)
		}
	}
	if entity != 1 || window != 1 {
		t.Fatalf("%d dead letters of the contribution, %d of the window; want one each: %+v", entity, window, d.DeadLetters())
	}
}

// TestRollupOwnerCatchUpKeepsStateSmall: a processor catching up on a backlog goes through hours
// of event time in a minute of wall clock. A rollup owner drops its closed windows as it takes
// the next partial, once the partition records (written at ticks) hold the progress that
// completed them, not a FinalRetention of wall clock later: it kept every window closed in that
// minute, and 16 KiB messages held about 200 fleet minutes, so the finals after them were
// dead-lettered as too large.
func TestRollupOwnerCatchUpKeepsStateSmall(t *testing.T) {
	b := topology.New("catchup").MaxMessageBytes(16 << 10)
	src := topology.NewSource(b, "readings", topology.JSON[reading](),
		func(r reading) string { return r.Device },
		func(r reading) time.Time { return time.UnixMilli(r.TS) })
	src.Aggregate("all", windows.Tumbling(time.Minute)).Grace(0).Global().Emit(topology.FinalOnly()).
		Count("count").Max("max", "Temp")
	topo, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	// Each second of wall clock takes 50 minutes of readings: the finals retained for a minute
	// would be 3,000 windows, and the default 15 s between two ticks (which write the partition
	// records) 750.
	d := abacustest.New(t, topo, abacustest.Options{Start: at(t0), Partitions: 4, IdleTimeout: time.Minute})
	const minutes = 1000 // 16 hours of readings, 8 a minute, in 20 s of wall clock
	for i := range minutes * 8 {
		dev := fmt.Sprintf("d%02d", i%20)
		ts := t0 + int64(i)*7_500
		d.Pipe("readings", dev, reading{Device: dev, TS: ts, Temp: float64(i % 13)}, abacustest.At(at(ts)))
		if i%400 == 399 {
			d.Advance(time.Second)
		}
	}
	d.Advance(3 * time.Minute)
	if dl := d.DeadLetters(); len(dl) != 0 {
		t.Fatalf("%d dead letters, the first: %+v", len(dl), dl[0])
	}
	// The last window stays open: the wall clock, hours behind the readings, cannot idle past it.
	finals := d.FinalsOf("all", topology.GlobalKey)
	if len(finals) != minutes-1 {
		t.Fatalf("%d fleet-wide finals, want %d", len(finals), minutes-1)
	}
	for _, f := range finals {
		if f.Float("count") != 8 {
			t.Fatalf("window %s counts %v, want 8", f.Start, f.Float("count"))
		}
	}
}
