package sinks

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/abacus-stream/abacus/deadletter"
	"github.com/abacus-stream/abacus/hbase"
	"github.com/abacus-stream/abacus/internal/testenv"
	"github.com/abacus-stream/abacus/internal/testenv/gate"
	"github.com/abacus-stream/abacus/schema"
	"github.com/abacus-stream/abacus/store"
	"github.com/abacus-stream/abacus/store/hbasestore"
	"github.com/abacus-stream/abacus/totals"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// e2e is one end-to-end setup on the real broker and HBase: an events topic for the facts sink, a
// totals topic for the aggregates sink, their tables and a dead-letter topic.
type e2e struct {
	Brokers     []string
	Quorum      string
	HBase       hbase.Config // with Kerberos when ABACUS_HBASE_AUTH=kerberos
	Events      string
	Totals      string
	DeadLetter  string
	FactsTable  string
	AggTable    string
	Buckets     int
	FactsGroup  string
	AggGroup    string
	MaxBatch    int
	ExpectFacts int
}

func newE2E(t *testing.T) *e2e {
	t.Helper()
	return newE2EOn(t, testenv.Kafka(t), 1)
}

// newE2EOn is newE2E on the given brokers, with topics of the given replication factor.
func newE2EOn(t *testing.T, brokers []string, replication int16) *e2e {
	t.Helper()
	n := time.Now().UnixNano()
	e := &e2e{
		Brokers: brokers, Quorum: gate.HBaseZooKeeper(t), HBase: testenv.HBaseConfig(t),
		Events: fmt.Sprintf("e2e-events-%d", n), Totals: fmt.Sprintf("e2e-totals-%d", n), DeadLetter: fmt.Sprintf("e2e-dlq-%d", n),
		FactsTable: fmt.Sprintf("sinktest_facts_%d", n), AggTable: fmt.Sprintf("sinktest_agg_%d", n), Buckets: 8,
		FactsGroup: fmt.Sprintf("e2e-facts-%d", n), AggGroup: fmt.Sprintf("e2e-agg-%d", n), MaxBatch: 300,
	}
	createReplicatedTopics(t, e.Brokers, 4, replication, e.Events, e.Totals, e.DeadLetter)
	c := testenv.HBaseClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, tb := range []string{e.FactsTable, e.AggTable} {
		testenv.DropTableAtEnd(t, c, tb)
		if err := hbaseStore(t, c).EnsureTable(ctx, schema.TableLayout{Name: tb, Family: "d", SaltBuckets: e.Buckets, Versions: 5}); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

// event is the raw event of these tests: JSON with an entity, an event time and a reading.
type event struct {
	Device string  `json:"device"`
	TS     int64   `json:"ts"`
	Temp   float64 `json:"temp"`
}

func (e *e2e) facts() *FactsEncoder {
	return &FactsEncoder{Table: e.FactsTable, Family: "d", SaltBuckets: e.Buckets, Extract: func(rec *kgo.Record) (Fact, error) {
		var ev event
		if err := json.Unmarshal(rec.Value, &ev); err != nil {
			return Fact{}, err
		}
		return Fact{Entity: ev.Device, EventTime: ev.TS, Type: "reading"}, nil
	}}
}

func (e *e2e) aggregates() *AggregatesEncoder {
	return &AggregatesEncoder{Table: e.AggTable, Family: "d", SaltBuckets: e.Buckets}
}

// sink builds one of the two sinks on the real servers.
func (e *e2e) sink(ctx context.Context, kind string, tune func(*Config)) (*FlushThenCommit, *hbase.Client, error) {
	c, err := hbase.NewClient(ctx, e.HBase)
	if err != nil {
		return nil, nil, err
	}
	st, err := hbasestore.New(c, hbasestore.Config{})
	if err != nil {
		return nil, nil, err
	}
	cfg := Config{Brokers: e.Brokers, DeadLetterTopic: e.DeadLetter, MaxBatchRecords: e.MaxBatch,
		FlushInterval: 100 * time.Millisecond, RetryBackoff: 50 * time.Millisecond, MaxRetryBackoff: time.Second,
		// A killed member holds its partitions until its session expires: keep that short (the
		// broker's minimum) so the tests restart quickly.
		ClientOptions: []kgo.Opt{kgo.SessionTimeout(6 * time.Second), kgo.HeartbeatInterval(500 * time.Millisecond)}}
	var enc Encoder
	if kind == "facts" {
		cfg.Group, cfg.Topics, enc = e.FactsGroup, []string{e.Events}, e.facts()
	} else {
		cfg.Group, cfg.Topics, enc = e.AggGroup, []string{e.Totals}, e.aggregates()
	}
	if tune != nil {
		tune(&cfg)
	}
	s, err := NewFlushThenCommit(cfg, enc, st)
	return s, c, err
}

// produceWorkload writes raw events (some undecodable) and, for every device and minute window,
// several revisions of its total, ending with the final one.
func (e *e2e) produceWorkload(t *testing.T, devices, perDevice int) (goodEvents int, finals map[string]*totals.Record) {
	t.Helper()
	recs, goodEvents, finals := e.workload(devices, perDevice)
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.Brokers...), kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	return goodEvents, finals
}

// workload returns the records of produceWorkload, in the order to produce them.
func (e *e2e) workload(devices, perDevice int) (recs []*kgo.Record, goodEvents int, finals map[string]*totals.Record) {
	base := time.Now().Add(-time.Hour).Truncate(time.Minute).UnixMilli()
	finals = map[string]*totals.Record{}
	for d := range devices {
		dev := fmt.Sprintf("dev-%d", d)
		if d == 1 {
			dev = "dev-1x" // shares a prefix with dev-1 of a longer name: dev-1 must not see it
		}
		var win *totals.Record
		for i := range perDevice {
			ts := base + int64(i)*7_000 + int64(d)
			v, _ := json.Marshal(event{Device: dev, TS: ts, Temp: float64(i % 40)})
			if i%50 == 49 {
				v = []byte("{not json")
			} else {
				goodEvents++
			}
			recs = append(recs, &kgo.Record{Topic: e.Events, Key: []byte(dev), Value: v})
			start := ts / 60_000 * 60_000
			if win == nil || win.Start != start {
				if win != nil {
					win.Final = true
					recs = append(recs, &kgo.Record{Topic: e.Totals, Key: []byte(dev), Value: win.Encode()})
				}
				win = &totals.Record{Topology: "t", Set: "minute", Entity: dev, Start: start, End: start + 60_000}
			}
			win.Revision++
			n := int64(win.Revision)
			win.Values = []totals.Value{{Name: "count", Kind: totals.KindInt, Int: n}, {Name: "max", Kind: totals.KindFloat, Float: float64(n) * 1.5}}
			if i%3 == 0 { // an early firing, as EarlyEvery emits
				recs = append(recs, &kgo.Record{Topic: e.Totals, Key: []byte(dev), Value: win.Encode()})
			}
			finals[fmt.Sprintf("%s/%d", dev, start)] = win
		}
		win.Final = true
		recs = append(recs, &kgo.Record{Topic: e.Totals, Key: []byte(dev), Value: win.Encode()})
	}
	recs = append(recs, &kgo.Record{Topic: e.Totals, Key: []byte("junk"), Value: []byte{9, 9, 9}})
	return recs, goodEvents, finals
}

// tableCells reads every version of every cell of a table.
func tableCells(t *testing.T, c *hbase.Client, table string) map[string][]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st := hbaseStore(t, c)
	out := map[string][]string{}
	err := st.Scan(ctx, store.ScanSpec{Table: table, MaxVersions: hbase.AllVersions}, func(row []byte, cells []store.Cell) bool {
		for _, cl := range cells {
			k := fmt.Sprintf("%x/%s/%s", row, cl.Family, cl.Qualifier)
			out[k] = append(out[k], fmt.Sprintf("%d=%x", cl.Timestamp, cl.Value))
		}
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func runUntilDrained(t *testing.T, e *e2e, kind string, done func() bool) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, c, err := e.sink(ctx, kind, func(cfg *Config) { cfg.Logger = testLogger(t) })
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	errc := make(chan error, 1)
	go func() { errc <- s.Run(ctx) }()
	waitFor(t, kind+" sink to drain", 3*time.Minute, done)
	cancel()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

func (e *e2e) lag(t *testing.T, group, topic string) int64 {
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lags, err := OffsetsAdmin{Kafka: kadm.NewClient(cl)}.Show(ctx, group, topic)
	if err != nil {
		return -1
	}
	return totalLag(lags)
}

// checkTables compares the tables with what the workload must give: one cell per good event, the
// final total of every window, one version each, nothing else.
func checkTables(t *testing.T, e *e2e, c *hbase.Client, goodEvents int, finals map[string]*totals.Record) (facts, aggs map[string][]string) {
	t.Helper()
	facts = tableCells(t, c, e.FactsTable)
	if len(facts) != goodEvents {
		t.Fatalf("facts table has %d cells, want %d", len(facts), goodEvents)
	}
	for k, vs := range facts {
		if len(vs) != 1 {
			t.Fatalf("fact cell %s has %d versions: %v", k, len(vs), vs)
		}
	}
	aggs = tableCells(t, c, e.AggTable)
	if want := len(finals) * 3; len(aggs) != want {
		t.Fatalf("aggregate table has %d cells, want %d", len(aggs), want)
	}
	for key, r := range finals {
		dev, _, _ := strings.Cut(key, "/")
		row := schema.AggregateRow(dev, r.Set, r.Start, e.Buckets)
		for _, v := range r.Values {
			want, _ := schema.AppendCellValue(nil, v)
			k := fmt.Sprintf("%x/d/%s", row, v.Name)
			if got := aggs[k]; len(got) != 1 || got[0] != fmt.Sprintf("%d=%x", r.End, want) {
				t.Fatalf("window %s %s: cell versions %v, want one %d=%x", key, v.Name, got, r.End, want)
			}
		}
	}
	return facts, aggs
}

// TestSinksReplayRewritesIdenticalCells runs both sinks to the end, rewinds them to offset 0 and
// runs them again: every cell must be identical, with exactly one version.
func TestSinksReplayRewritesIdenticalCells(t *testing.T) {
	e := newE2E(t)
	good, finals := e.produceWorkload(t, 12, 200)
	c := testenv.HBaseClient(t)
	for _, kind := range []string{"facts", "aggregates"} {
		group, topic := e.FactsGroup, e.Events
		if kind == "aggregates" {
			group, topic = e.AggGroup, e.Totals
		}
		runUntilDrained(t, e, kind, func() bool { return e.lag(t, group, topic) == 0 })
	}
	facts1, aggs1 := checkTables(t, e, c, good, finals)
	// Undecodable events and the junk totals record are in the dead-letter topic with reasons.
	bad := 12 * (200 / 50)
	dead := consumeAll(t, e.Brokers, e.DeadLetter, bad+1)
	reasons := map[string]int{}
	for _, r := range dead {
		reasons[string(header(r, deadletter.HeaderReason))]++
		if len(header(r, deadletter.HeaderDetail)) == 0 {
			t.Fatalf("dead letter %q without a detail", r.Value)
		}
		if src := string(header(r, deadletter.HeaderSource)); string(r.Key) != src {
			t.Fatalf("dead letter keyed %q, its source is %q", r.Key, src)
		}
	}
	if reasons["undecodable"] != bad || reasons["invalid"] != 1 {
		t.Fatalf("dead letters by reason %v, want %d undecodable and 1 invalid", reasons, bad)
	}

	cl, _ := kgo.NewClient(kgo.SeedBrokers(e.Brokers...))
	defer cl.Close()
	adm := OffsetsAdmin{Kafka: kadm.NewClient(cl)}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, g := range [][2]string{{e.FactsGroup, e.Events}, {e.AggGroup, e.Totals}} {
		waitFor(t, "group "+g[0]+" to empty", 30*time.Second, func() bool { return adm.RewindTo(ctx, g[0], []string{g[1]}, 0) == nil })
		if l := e.lag(t, g[0], g[1]); l == 0 {
			t.Fatalf("group %s has no lag after a rewind to 0", g[0])
		}
	}
	for _, kind := range []string{"facts", "aggregates"} {
		group, topic := e.FactsGroup, e.Events
		if kind == "aggregates" {
			group, topic = e.AggGroup, e.Totals
		}
		runUntilDrained(t, e, kind, func() bool { return e.lag(t, group, topic) == 0 })
	}
	facts2, aggs2 := checkTables(t, e, c, good, finals)
	for name, pair := range map[string][2]map[string][]string{"facts": {facts1, facts2}, "aggregates": {aggs1, aggs2}} {
		if !sameCells(pair[0], pair[1]) {
			t.Fatalf("%s table differs after the replay", name)
		}
	}
}

func sameCells(a, b map[string][]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if strings.Join(v, ",") != strings.Join(b[k], ",") {
			return false
		}
	}
	return true
}

// childEnv carries the setup to a sink process started by TestSinkKilledMidWrite.
const childEnv = "ABACUS_SINKS_E2E_CHILD"

// TestSinkChildProcess is the sink process that TestSinkKilledMidWrite kills; on its own it does
// nothing.
func TestSinkChildProcess(t *testing.T) {
	spec := os.Getenv(childEnv)
	if spec == "" {
		return
	}
	var cfg struct {
		E    e2e
		Kind string
	}
	if err := json.Unmarshal([]byte(spec), &cfg); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	s, _, err := cfg.E.sink(ctx, cfg.Kind, nil)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println("child running")
	_ = s.Run(ctx) // until SIGKILL
}

// TestSinkKilledMidWrite SIGKILLs sink processes mid-write several times, then lets one finish:
// no cell may be missing and none may have gained a version.
func TestSinkKilledMidWrite(t *testing.T) {
	e := newE2E(t)
	e.MaxBatch = 100
	good, finals := e.produceWorkload(t, 16, 400)
	c := testenv.HBaseClient(t)
	rng := rand.New(rand.NewPCG(1, 2))
	for _, kind := range []string{"facts", "aggregates"} {
		group, topic := e.FactsGroup, e.Events
		if kind == "aggregates" {
			group, topic = e.AggGroup, e.Totals
		}
		spec, _ := json.Marshal(struct {
			E    e2e
			Kind string
		}{*e, kind})
		kills := 0
		for kills < 4 {
			cmd := exec.Command(os.Args[0], "-test.run=^TestSinkChildProcess$", "-test.count=1")
			cmd.Env = append(os.Environ(), childEnv+"="+string(spec))
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			// Let it write a few batches, then kill it wherever it is.
			time.Sleep(time.Duration(300+rng.IntN(900)) * time.Millisecond)
			_ = cmd.Process.Signal(syscall.SIGKILL)
			_ = cmd.Wait()
			kills++
			if e.lag(t, group, topic) == 0 {
				break // nothing left to interrupt
			}
		}
		t.Logf("%s sink killed %d times, lag before the last run %d", kind, kills, e.lag(t, group, topic))
		runUntilDrained(t, e, kind, func() bool { return e.lag(t, group, topic) == 0 })
	}
	checkTables(t, e, c, good, finals)
}

// TestSinksNewestWinsInOneBatch writes many firings of the same window in single batches to the
// real HBase, whose Multi applies actions in no fixed order: the final value must win every time.
func TestSinksNewestWinsInOneBatch(t *testing.T) {
	e := newE2E(t)
	e.MaxBatch = 100_000
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const windows = 50
	var recs []*kgo.Record
	want := map[string]int64{}
	for w := range windows {
		dev := "dev-" + strconv.Itoa(w%5)
		start := int64(w) * 60_000
		r := &totals.Record{Topology: "t", Set: "minute", Entity: dev, Start: start, End: start + 60_000}
		for rev := 1; rev <= 20; rev++ {
			r.Revision, r.Final = uint64(rev), rev == 20
			r.Values = []totals.Value{{Name: "count", Kind: totals.KindInt, Int: int64(rev)}}
			recs = append(recs, &kgo.Record{Topic: e.Totals, Key: []byte(dev), Value: r.Encode()})
		}
		want[fmt.Sprintf("%x", schema.AggregateRow(dev, "minute", start, e.Buckets))] = 20
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	runUntilDrained(t, e, "aggregates", func() bool { return e.lag(t, e.AggGroup, e.Totals) == 0 })
	c := testenv.HBaseClient(t)
	cells := tableCells(t, c, e.AggTable)
	var bad []string
	for row, n := range want {
		v, _ := schema.AppendCellValue(nil, totals.Value{Kind: totals.KindInt, Int: n})
		got := cells[row+"/d/count"]
		if len(got) != 1 || !strings.HasSuffix(got[0], fmt.Sprintf("=%x", v)) {
			bad = append(bad, fmt.Sprintf("%s: %v", row, got))
		}
	}
	sort.Strings(bad)
	if len(bad) > 0 {
		t.Fatalf("%d windows do not hold their newest total: %v", len(bad), bad)
	}
}
