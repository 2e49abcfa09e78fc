package stream

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/abacus-stream/abacus/deadletter"
	"github.com/abacus-stream/abacus/internal/kafkaread"
	"github.com/abacus-stream/abacus/partitioner"
	"github.com/abacus-stream/abacus/partitioner/franz"
	"github.com/abacus-stream/abacus/processors"
	"github.com/abacus-stream/abacus/schema"
	"github.com/abacus-stream/abacus/sinks"
	"github.com/abacus-stream/abacus/totals"
)

var layout = Layout{AggregatesBuckets: 4, FactsBuckets: 4, Family: "d"}

// TestOracleByHand checks the oracle on a stream small enough to reason about: lateness is judged
// per partition against a stream time that includes the event, and a flush closes everything.
func TestOracleByHand(t *testing.T) {
	const min = 60_000
	base := int64(1000 * min)
	now := time.UnixMilli(base + 2*24*60*min)
	o := NewOracle(layout)
	off := int64(0)
	feed := func(p int32, ev Event) {
		v, _ := json.Marshal(ev)
		o.Feed(SourceRecord{Topic: "src", Partition: p, Offset: off, Key: []byte(ev.Entity), Value: v, Timestamp: now})
		off++
	}
	m := func(e string, ts int64, v float64) Event {
		return Event{Entity: e, Time: ts, Kind: TypeMeasurement, V: v}
	}
	feed(0, m("a", base+1_000, 5))
	feed(0, m("a", base+59_000, 7))
	feed(0, m("a", base+70_000, 1))   // stream time 70 s: the first minute is open until 80 s
	feed(0, m("a", base+30_000, 2))   // 40 s behind, within the 20 s grace of the minute's end
	feed(0, m("b", base+85_000, 1))   // stream time 85 s: the first minute closes
	feed(0, m("a", base+59_999, 100)) // late for the first minute, on time for the 5-minute windows
	feed(1, m("c", base+1, 9))        // another partition has its own stream time
	o.Feed(SourceRecord{Topic: "src", Partition: 0, Offset: off, Key: []byte("a"), Value: []byte("{oops"), Timestamp: now})
	bad := deadletter.Source{Topic: "src", Partition: 0, Offset: off}
	off++
	feed(0, Event{Entity: "a", Time: now.Add(time.Hour).UnixMilli(), Kind: TypeMeasurement})
	future := deadletter.Source{Topic: "src", Partition: 0, Offset: off - 1}

	// The rollups have the tumbling set's windows and grace, judged at the entity's partition:
	// late alike.
	if o.LateFor[SetTumble] != 1 || o.LateFor[SetRegion] != 1 || o.LateFor[SetGlobal] != 1 || o.LateFor[SetHop] != 0 {
		t.Fatalf("late: %v, want one late for the tumbling set and its rollups only", o.LateFor)
	}
	// Offset 5, a at 59.999 s, is the one late event: for the tumbling set and its rollups.
	lateSrc := deadletter.Source{Topic: "src", Partition: 0, Offset: 5}
	if ls, ok := o.Late[lateSrc]; !ok || len(o.Late) != 1 || !slices.Equal(ls.Sets, []string{SetTumble, SetRegion, SetGlobal}) || ls.Key != "a" ||
		ls.Timestamp != now.UnixMilli() || o.LateRecords[SetTumble] != 1 || o.LateRecords[SetRegion] != 1 || o.LateRecords[SetHop] != 0 {
		t.Fatalf("late records: %v (%v), want one of offset 5 for the tumbling set and its rollups", o.Late, o.LateRecords)
	}
	if o.Bad[bad] != deadletter.Undecodable || o.Bad[future] != deadletter.Future || len(o.Bad) != 2 {
		t.Fatalf("bad records: %v", o.Bad)
	}
	// The first minute of a, on partition 0: 5, 7, 2.
	want := func(entity, set string, start int64, name string, v totals.Value) {
		t.Helper()
		row := schema.AggregateRow(entity, set, start, layout.AggregatesBuckets)
		b, _ := schema.AppendCellValue(nil, v)
		cmp := o.Aggregates.Compare(func(r, f, q []byte) string { return string(q) })
		cmp.Cell(row, []byte("d"), []byte(name), start+min, b)
		if d := cmp.D; d.Extra+d.WrongValue != 0 {
			t.Fatalf("%s %s %d %s: %v", entity, set, start, name, d.Examples)
		}
	}
	want("a", SetTumble, base, "n", totals.Value{Kind: totals.KindInt, Int: 3})
	want("a", SetTumble, base, "sum", totals.Value{Kind: totals.KindFloat, Float: 14})
	want("a", SetTumble, base, "max", totals.Value{Kind: totals.KindFloat, Float: 7})
	// a's first minute is closed on partition 0, but not c's on partition 1: the rollup windows
	// of the first minute are not final yet. The entity windows open are a's minute 1, 5 hopping
	// windows over a's minute 0 and 1 more over its minute 1, b's minute 1 and 5 hopping
	// windows, c's minute 0 and 5 hopping windows, and the rollup contributions of a's minute 1,
	// b's, and c's minute 0 (per rollup set); the rollup windows with a contribution in, not
	// final: a's region and the global window of the first minute.
	regions0 := map[string]bool{RegionAt("a", base): true, RegionAt("c", base): true}
	if n := o.Open(); n != 1+6+1+5+1+5+2*3+2 {
		t.Fatalf("%d windows open before the flush", n)
	}
	for p, rec := range FlushRecords(2, base+24*60*min) {
		var ev Event
		_ = json.Unmarshal(rec.Value, &ev)
		o.Feed(SourceRecord{Topic: "src", Partition: int32(p), Offset: 100, Key: rec.Key, Value: rec.Value, Timestamp: now})
	}
	if o.Open() != 0 {
		t.Fatalf("%d windows open after the flush", o.Open())
	}
	// Windows of a: minutes 0 and 1, 5 hopping windows over minute 0 and one more over minute 1;
	// b's minute 1 and its 5 hopping windows; c's minute 0 and its 5 hopping windows. Rollup
	// windows: the regions of minute 0 (a's and c's) and of minute 1 (a's and b's), of 6 cells,
	// and the two global windows, of 7.
	regions1 := map[string]bool{RegionAt("a", base+min): true, RegionAt("b", base+min): true}
	if n := o.Aggregates.Len(); n != (2+1+1)*4+(6+5+5)*3+(len(regions0)+len(regions1))*6+2*7 {
		t.Fatalf("%d aggregate cells after the flush", n)
	}
	if o.Facts.Len() != 7+2 {
		t.Fatalf("%d fact cells, want one per readable event (7 and 2 flushes)", o.Facts.Len())
	}
}

// TestOracleMatchesEngine runs a generated stream through the real window engine (processors, on an
// in-process broker) and checks that the final totals, turned into cells by the aggregates
// encoder, are exactly the oracle's: the suite's two references agree on semantics before any
// fault is injected.
func TestOracleMatchesEngine(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a processor")
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	brokers := c.ListenAddrs()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const parts = 3
	topo, err := Topology()
	if err != nil {
		t.Fatal(err)
	}
	topo, err = topo.WithTopicNames("t-", nil)
	if err != nil {
		t.Fatal(err)
	}
	source := topo.SourceTopics()[0]
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(franz.Partitioner()), kgo.DefaultProduceTopic(source))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, parts, 1, nil, source); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	g := &Generator{Seed: 5, Entities: 30, Start: now.Add(-48 * time.Hour).UnixMilli(), Step: 50 * time.Millisecond}
	var recs []Record
	for range 6000 {
		recs = g.Next(recs)
	}
	recs = append(recs, FlushRecords(parts, now.Add(-24*time.Hour).UnixMilli())...)
	kinds := map[Kind]int{}
	var out []*kgo.Record
	for _, r := range recs {
		kinds[r.Kind]++
		out = append(out, &kgo.Record{Key: r.Key, Value: r.Value})
	}
	if err := cl.ProduceSync(ctx, out...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	for _, k := range []Kind{OnTime, Straggler, Late, Future, Malformed, Duplicate} {
		if kinds[k] == 0 {
			t.Fatalf("the generator made no %s records: %v", k, kinds)
		}
	}

	p, err := processors.New(topo, processors.Config{Brokers: brokers, StoragePath: filepath.Join(t.TempDir(), "state"),
		IdleTimeout: time.Hour, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	pctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- p.Run(pctx) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("processor: %v", err)
		}
	}()

	// The oracle reads the source topic back, as the suite does.
	o := NewOracle(layout)
	if err := kafkaread.All(ctx, brokers, source, func(r *kgo.Record) {
		o.Feed(SourceRecord{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: r.Key, Value: r.Value, Timestamp: r.Timestamp})
	}); err != nil {
		t.Fatal(err)
	}
	if o.Open() != 0 || o.Flushes != parts {
		t.Fatalf("oracle: %d windows open, %d flushes", o.Open(), o.Flushes)
	}
	wantFinals := o.Aggregates.Len()
	for _, set := range RollupSets() {
		if o.CellsBySet[set] == 0 {
			t.Fatalf("the oracle expects no cells of rollup set %s: %v", set, o.CellsBySet)
		}
	}

	// Totals, until every window the oracle closed has its final (one final per window: cells
	// of a window's final are n, the values, and _meta).
	enc := &sinks.AggregatesEncoder{Table: "agg", Family: "d", SaltBuckets: layout.AggregatesBuckets}
	tcl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topo.TotalsTopic()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer tcl.Close()
	got := map[string][]byte{} // cell -> the newest value written, as HBase keeps it
	type cellTS struct {
		row, qual []byte
		ts        int64
	}
	cells := map[string]cellTS{}
	finals := map[string]bool{}
	for len(finals) < wantFinals {
		fs := tcl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("waiting for %d final cells, have %d", wantFinals, len(finals))
		}
		fs.EachRecord(func(r *kgo.Record) {
			tr, err := totals.Decode(r.Value)
			if err != nil {
				t.Fatalf("totals record: %v", err)
			}
			cs, err := enc.Encode(r, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, cl := range cs {
				k := string(cl.Row) + "/" + string(cl.Qualifier)
				if tr.Final {
					finals[k] = true
				}
				got[k] = cl.Value
				cells[k] = cellTS{cl.Row, cl.Qualifier, cl.Timestamp}
			}
		})
	}
	cmp := o.Aggregates.Compare(func(row, _, q []byte) string {
		e, set, start, _ := schema.ParseAggregateRow(row)
		return fmt.Sprintf("%s %s %d %s", e, set, start, q)
	})
	for k, v := range got {
		c := cells[k]
		cmp.Cell(c.row, []byte("d"), c.qual, c.ts, v)
	}
	d := cmp.Finish()
	if d.Mismatches() != 0 {
		t.Fatalf("engine vs oracle: %d missing, %d extra, %d wrong of %d: %v", d.Missing, d.Extra, d.WrongValue, d.Compared, d.Examples)
	}

	// The late topic: exactly one record per event and set the oracle judges late, stragglers
	// late for the tumbling set only among them.
	want := map[string]bool{}
	for src, ls := range o.Late {
		for _, set := range ls.Sets {
			want[src.String()+" "+set] = true
		}
	}
	if o.LateRecords[SetTumble] <= o.LateFor[SetHop] {
		t.Fatalf("no straggler late for the tumbling set only (late records %v, late for every window %v)", o.LateRecords, o.LateFor)
	}
	lcl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topo.LateTopic()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer lcl.Close()
	gotLate := map[string]int{}
	for n := 0; n < len(want); {
		fs := lcl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("waiting for %d late records, have %d", len(want), n)
		}
		fs.EachRecord(func(r *kgo.Record) {
			var set string
			for _, h := range r.Headers {
				if h.Key == deadletter.HeaderSet {
					set = string(h.Value)
				}
			}
			k := string(r.Key) + " " + set
			if !want[k] {
				t.Errorf("late record %s, which the oracle does not expect", k)
			}
			gotLate[k]++
			n++
		})
	}
	for k := range want {
		if gotLate[k] != 1 {
			t.Errorf("%d late records for %s, want 1", gotLate[k], k)
		}
	}
	t.Logf("%d records (%v), %d applied, late for every window %v, %d bad: %d aggregate cells agree (by set %v); %d late records agree (%v)",
		o.Records, kinds, o.Applied, o.LateFor, len(o.Bad), d.Compared, o.CellsBySet, len(want), o.LateRecords)
}

// TestOracleRollupsByHand checks the rollup cells on a stream computed by hand: contributions of
// entities of several partitions merge per (region, window) and (all, window); an event late at
// its entity's partition counts in no rollup; last takes, within an entity, the later applied of
// one time and, between entities, the larger; a rollup window is open until every partition has
// passed its close.
func TestOracleRollupsByHand(t *testing.T) {
	const sec = 1000
	base := int64(2000 * 60 * sec) // a minute's start
	now := time.UnixMilli(base + 3*24*3600*sec)
	// x1 and x2 share a region, y has another.
	var x1, x2, y string
	for i := 0; y == ""; i++ {
		e := fmt.Sprintf("ent-%03d", i)
		switch {
		case x1 == "":
			x1 = e
		case x2 == "" && Region(e) == Region(x1):
			x2 = e
		case x2 != "" && Region(e) != Region(x1):
			y = e
		}
	}
	// Regions move every RegionPeriod; the two minutes of the test may be in two periods.
	rx, ry := RegionAt(x1, base), RegionAt(y, base)
	rx1, ry1 := RegionAt(x1, base+60*sec), RegionAt(y, base+60*sec)
	o := NewOracle(layout)
	offs := map[int32]int64{}
	feed := func(p int32, e string, ts int64, v float64) {
		b, _ := json.Marshal(Event{Entity: e, Time: base + ts, Kind: TypeMeasurement, V: v})
		o.Feed(SourceRecord{Topic: "src", Partition: p, Offset: offs[p], Key: []byte(e), Value: b, Timestamp: now})
		offs[p]++
	}
	feed(0, x1, 10*sec, 5)
	feed(0, x1, 20*sec, 9)
	feed(0, x1, 20*sec, 3) // same time, applied later: x1's last of minute 0
	feed(1, x2, 20*sec, 4) // same time as x1's last, another entity: the larger wins
	feed(1, y, 20*sec, 8)
	feed(1, y, 90*sec, 1) // partition 1 passes minute 0's close (80 s)
	// Partition 0 has not: the first minute's rollup windows are not final.
	if n := o.Open(); n < 3 {
		t.Fatalf("%d windows open, want at least the three rollup windows of minute 0", n)
	}
	feed(0, x1, 81*sec, 2)   // partition 0 passes it too
	feed(0, x1, 30*sec, 100) // late at x1's partition for minute 0: in no rollup window
	feed(1, x2, 65*sec, 7)
	lateSrc := deadletter.Source{Topic: "src", Partition: 0, Offset: 4}
	if ls := o.Late[lateSrc]; !slices.Equal(ls.Sets, []string{SetTumble, SetRegion, SetGlobal}) {
		t.Fatalf("late sets of the late event: %v", ls.Sets)
	}
	for p, rec := range FlushRecords(2, base+24*3600*sec) {
		o.Feed(SourceRecord{Topic: "src", Partition: int32(p), Offset: offs[int32(p)], Key: rec.Key, Value: rec.Value, Timestamp: now})
	}
	if n := o.Open(); n != 0 {
		t.Fatalf("%d windows open after the flush", n)
	}

	f := func(x float64) totals.Value { return totals.Value{Kind: totals.KindFloat, Float: x} }
	type cell struct {
		name string
		v    totals.Value
	}
	type window struct {
		key, set string
		start    int64
		n        int64
		cells    []cell
	}
	want := []window{
		{rx, SetRegion, base, 4, []cell{{"sum", f(5 + 9 + 3 + 4)}, {"min", f(3)}, {"max", f(9)}, {"last", f(4)}}},
		{ry, SetRegion, base, 1, []cell{{"sum", f(8)}, {"min", f(8)}, {"max", f(8)}, {"last", f(8)}}},
		// x1's 3 and x2's 4 are the last of their entities at 20 s, y's 8 the largest of them:
		// not x1's 9, which x1's 3 replaced.
		{"all", SetGlobal, base, 5, []cell{{"sum", f(29)}, {"min", f(3)}, {"max", f(9)}, {"mean", f(29.0 / 5)}, {"last", f(8)}}},
		// x1's 2 at 81 s is later than x2's 7 at 65 s.
		{rx1, SetRegion, base + 60*sec, 2, []cell{{"sum", f(9)}, {"min", f(2)}, {"max", f(7)}, {"last", f(2)}}},
		{ry1, SetRegion, base + 60*sec, 1, []cell{{"sum", f(1)}, {"min", f(1)}, {"max", f(1)}, {"last", f(1)}}},
		{"all", SetGlobal, base + 60*sec, 3, []cell{{"sum", f(10)}, {"min", f(1)}, {"max", f(7)}, {"mean", f(10.0 / 3)}, {"last", f(1)}}},
	}
	cmp := o.Aggregates.Compare(func(row, _, q []byte) string {
		e, set, start, _ := schema.ParseAggregateRow(row)
		return fmt.Sprintf("%s %s %d %s", e, set, start, q)
	})
	rollupCells := 0
	for _, w := range want {
		row := schema.AggregateRow(w.key, w.set, w.start, layout.AggregatesBuckets)
		cells := append([]cell{{"n", totals.Value{Kind: totals.KindInt, Int: w.n}}}, w.cells...)
		for _, c := range cells {
			b, _ := schema.AppendCellValue(nil, c.v)
			cmp.Cell(row, []byte("d"), []byte(c.name), w.start+60*sec, b)
		}
		cmp.Cell(row, []byte("d"), []byte(schema.MetaQualifier), w.start+60*sec, schema.AppendMeta(nil, true, uint64(w.n)))
		rollupCells += len(cells) + 1
	}
	if d := cmp.D; d.Extra+d.WrongValue+d.ExtraVersions != 0 {
		t.Fatalf("rollup cells: %d extra, %d wrong: %v", d.Extra, d.WrongValue, d.Examples)
	}
	if o.CellsBySet[SetRegion]+o.CellsBySet[SetGlobal] != int64(rollupCells) || o.CellsBySet[SetGlobal] != 2*7 {
		t.Fatalf("rollup cells by set %v, want %d of them", o.CellsBySet, rollupCells)
	}
	// Every entity window's cells besides: nothing else.
	var entityCells int64
	for _, s := range []string{SetTumble, SetHop} {
		entityCells += o.CellsBySet[s]
	}
	if int64(o.Aggregates.Len()) != entityCells+int64(rollupCells) {
		t.Fatalf("%d aggregate cells, want %d of entity windows and %d of rollups", o.Aggregates.Len(), entityCells, rollupCells)
	}
}

// TestRegion checks that the region rollup merges across partitions: the generator's entities
// fall in every region, and each region's in several partitions.
func TestRegion(t *testing.T) {
	parts := map[string]map[int32]bool{}
	for i := range 200 {
		e := fmt.Sprintf("ent-%03d", i)
		if parts[Region(e)] == nil {
			parts[Region(e)] = map[int32]bool{}
		}
		parts[Region(e)][partitioner.Partition([]byte(e), 4)] = true
	}
	if len(parts) != len(regions) {
		t.Fatalf("200 entities in %d regions, want all %d", len(parts), len(regions))
	}
	for r, ps := range parts {
		if len(ps) < 3 {
			t.Errorf("region %s's entities are in %d of 4 partitions", r, len(ps))
		}
	}
}
