package engine_test

import (
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/abacus-stream/abacus/abacustest"
	"github.com/abacus-stream/abacus/topology"
)

// modelVersions are the topology versions the model test moves between: the entity set "minute"
// (counting) in all of them, the rollups and aggregations coming and going, in other orders, and
// the grace, the same for every set of a version, raised and lowered.
var modelVersions = []evo{
	{order: []string{"minute", "all", "region"}, aggs: []string{"count", "sum"}, grace: 10 * time.Second},
	{order: []string{"region", "minute", "all"}, aggs: []string{"count", "sum", "max"}, grace: 10 * time.Second},
	{order: []string{"all", "minute"}, aggs: []string{"count"}, grace: 30 * time.Second},
	{order: []string{"minute", "extra", "all", "region"}, aggs: []string{"max", "count"}, grace: 5 * time.Second},
	{order: []string{"minute"}, aggs: []string{"count", "mean"}, grace: 20 * time.Second},
}

// TestModelTopologyChanges runs seeded random sequences of events (out of order, some late),
// restarts keeping or losing the local tables, redeliveries and changes of the topology among
// modelVersions (of every partition at once, or of one, so that two versions run side by side as
// in a rolling rollout), and checks what comes out against the rules, computed by brute force
// from what went in:
//
//   - the processor never stops;
//   - a window has one final total, ever (the same one again after a restart is the same);
//   - no total is keyed by an internal key;
//   - no event is lost: of the events of an entity's minute window, the final counts those it
//     took, and every other one has a late record for the set (counted once, by offset);
//   - a rollup's final is whole: "all" counts exactly what its entities' finals of the window
//     count, and "region" what those of its region count.
//
// ABACUS_MODEL_SEEDS sets how many seeds run (default 100, a second or two; the long form:
// ABACUS_MODEL_SEEDS=20000); ABACUS_MODEL_TRACE=1 logs what a seed does, and the engine's log,
// to read one that fails.
func TestModelTopologyChanges(t *testing.T) {
	seeds := 100
	if v := os.Getenv("ABACUS_MODEL_SEEDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("ABACUS_MODEL_SEEDS=%q: want a number of seeds", v)
		}
		seeds = n
	}
	for seed := range uint64(seeds) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { modelRun(t, seed) })
	}
}

// modelSteps is how many events a seed sends.
const modelSteps = 700

// modelEvent is an event the model sent: where it lies, for the late records that name it.
type modelEvent struct {
	device string
	ts     int64
	offset int64
	part   int32
}

func modelRun(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 41))
	topos := make([]*topology.Topology, len(modelVersions))
	for i, v := range modelVersions {
		topos[i] = v.topology(t)
	}
	version := rng.IntN(len(topos))
	trace(t, "start with version %d", version)
	d := abacustest.New(t, topos[version], abacustest.Options{Start: at(t0), Partitions: 2, IdleTimeout: 30 * time.Second,
		TickInterval: 5 * time.Second, FinalRetention: 20 * time.Second, AckLag: int(seed % 3), OnFail: noStop(t), Logger: modelLogger(t)})
	var sent []modelEvent
	offsets := map[int32]int64{}
	clock := t0
	for i := range modelSteps {
		dev := allDevices[rng.IntN(len(allDevices))]
		clock += int64(rng.IntN(600))
		ts := clock - int64(rng.IntN(40_000)) // up to 40 s out of order: late for some graces
		p := int32(0)
		if slicesIndex(devices[1], dev) >= 0 {
			p = 1
		}
		d.Pipe("readings", dev, reading{Device: dev, TS: ts, Temp: float64(rng.IntN(30))})
		trace(t, "step %d: %s at +%dms (partition %d offset %d), wall +%dms", i, dev, ts-t0, p, offsets[p], d.Now().UnixMilli()-t0)
		sent = append(sent, modelEvent{device: dev, ts: ts, offset: offsets[p], part: p})
		offsets[p]++
		if lag := time.Duration(clock-d.Now().UnixMilli()) * time.Millisecond; lag > 0 {
			d.Advance(lag)
		}
		switch r := rng.IntN(100); {
		case r < 2:
			version = rng.IntN(len(topos))
			lose := rng.IntN(2) == 0
			trace(t, "step %d clock +%ds: restart with version %d (lose %v)", i, (clock-t0)/1000, version, lose)
			d.RestartWith(topos[version], lose)
		case r < 4:
			lose := rng.IntN(2) == 0
			trace(t, "step %d clock +%ds: restart (lose %v)", i, (clock-t0)/1000, lose)
			d.Restart(lose)
		case r < 6:
			// A rolling rollout: one partition's instance restarts with a version (perhaps
			// another than the other partition's), and the two run side by side.
			v, p, lose := rng.IntN(len(topos)), int32(rng.IntN(2)), rng.IntN(2) == 0
			trace(t, "step %d clock +%ds: partition %d alone restarts with version %d (lose %v)", i, (clock-t0)/1000, p, v, lose)
			d.RollOut(topos[v], lose, p)
		case r < 7:
			p := int32(rng.IntN(2))
			trace(t, "step %d clock +%ds: redeliver partition %d", i, (clock-t0)/1000, p)
			d.Redeliver("readings", p, 0)
		}
	}
	d.Advance(5 * time.Minute)
	modelCheck(t, d, sent)
}

// trace logs the model's actions when ABACUS_MODEL_TRACE=1, to read a failing seed.
func trace(t *testing.T, format string, args ...any) {
	if os.Getenv("ABACUS_MODEL_TRACE") == "1" {
		t.Logf(format, args...)
	}
}

func slicesIndex(s []string, v string) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}

func modelCheck(t *testing.T, d *abacustest.Driver, sent []modelEvent) {
	t.Helper()
	checkOneFinal(t, d)
	type win struct {
		key   string
		start int64
	}
	// The late records of minute, by the event they stand for.
	late := map[[2]int64]bool{}
	for _, r := range d.Late() {
		if r.Set == "minute" {
			late[[2]int64{int64(r.Source.Partition), r.Source.Offset}] = true
		}
	}
	events := map[win]int{}
	lates := map[win]int{}
	for _, e := range sent {
		w := win{e.device, e.ts - e.ts%60_000}
		events[w]++
		if late[[2]int64{int64(e.part), e.offset}] {
			lates[w]++
		}
	}
	finals := map[win]float64{}
	for _, f := range d.Finals() {
		if f.Set == "minute" {
			finals[win{f.Entity, f.Start.UnixMilli()}] = f.Float("count")
		}
	}
	rollups := map[string]map[win]float64{"all": {}, "region": {}}
	for w, n := range events {
		got, ok := finals[w]
		if !ok {
			if lates[w] != n {
				t.Errorf("%s window %d: %d events, no final and %d late records", w.key, w.start, n, lates[w])
			}
			continue
		}
		if int(got)+lates[w] != n {
			t.Errorf("%s window %d: %d events, the final counts %v and %d have late records", w.key, w.start, n, got, lates[w])
			for i, e := range sent {
				if e.device == w.key && e.ts-e.ts%60_000 == w.start {
					trace(t, "  event %d: %s at +%ds, partition %d offset %d, late %v", i, e.device, (e.ts-t0)/1000, e.part, e.offset, late[[2]int64{int64(e.part), e.offset}])
				}
			}
		}
		rollups["all"][win{topology.GlobalKey, w.start}] += got
		rollups["region"][win{regionOf(w.key), w.start}] += got
	}
	for _, f := range d.Finals() {
		want, ok := rollups[f.Set]
		if !ok {
			continue
		}
		c, has := f.Values["count"]
		if !has {
			continue // absent: count was added to the set while the window was open
		}
		if w := want[win{f.Entity, f.Start.UnixMilli()}]; float64(c.Int) != w {
			t.Errorf("%s %s window %d counts %d, its entities' finals %v", f.Set, f.Entity, f.Start.UnixMilli(), c.Int, w)
		}
	}
}

// modelLogger is the engine's log on the test's, with ABACUS_MODEL_TRACE=1.
func modelLogger(t *testing.T) *slog.Logger {
	if os.Getenv("ABACUS_MODEL_TRACE") != "1" {
		return nil
	}
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}
