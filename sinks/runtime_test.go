package sinks

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/abacus-stream/abacus/deadletter"
	"github.com/abacus-stream/abacus/internal/testenv"
	"github.com/abacus-stream/abacus/store"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// memStore is a Store that keeps every version written, can be taken down, and refuses cells of
// family "missing" for good, as HBase refuses an unknown family.
type memStore struct {
	mu       sync.Mutex
	versions map[string][]string // cell key -> values written, in order
	landed   map[string]bool     // "topic/partition@offset" of every record with a landed cell
	down     atomic.Bool
	writes   atomic.Int64
	// reverse applies a write's cells last-to-first, as a Multi may, to expose uncoalesced batches.
	reverse bool
}

func newMemStore() *memStore {
	return &memStore{versions: map[string][]string{}, landed: map[string]bool{}}
}

func (m *memStore) Write(ctx context.Context, cells []store.Cell) ([]store.CellError, error) {
	m.writes.Add(1)
	if m.down.Load() {
		return nil, errors.New("store down")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var failed []store.CellError
	for k := range cells {
		i := k
		if m.reverse {
			i = len(cells) - 1 - k
		}
		c := cells[i]
		if string(c.Family) == "missing" {
			failed = append(failed, store.CellError{Index: i, Err: errors.New("NoSuchColumnFamilyException: missing"), Permanent: true})
			continue
		}
		key := cellKey(&c)
		m.versions[key] = append(m.versions[key], string(c.Value))
		m.landed[string(c.Qualifier)] = true
	}
	return failed, nil
}

func (m *memStore) snapshot() (map[string][]string, map[string]bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v := make(map[string][]string, len(m.versions))
	for k, vs := range m.versions {
		v[k] = append([]string(nil), vs...)
	}
	l := make(map[string]bool, len(m.landed))
	for k := range m.landed {
		l[k] = true
	}
	return v, l
}

// factEncoder writes each record as one cell keyed by its source position, like the facts sink.
// Values: "bad" cannot be decoded; "missing:..." targets a family the store refuses;
// "cell:NAME:VALUE" writes VALUE into the shared cell NAME (to test coalescing).
var factEncoder = EncoderFunc(func(rec *kgo.Record, dst []store.Cell) ([]store.Cell, error) {
	v := string(rec.Value)
	if v == "bad" {
		return dst, errors.New("value is not a reading")
	}
	src := fmt.Sprintf("%s/%d@%d", rec.Topic, rec.Partition, rec.Offset)
	fam := "f"
	if strings.HasPrefix(v, "missing:") {
		fam = "missing"
	}
	if name, val, ok := strings.Cut(strings.TrimPrefix(v, "cell:"), ":"); ok && strings.HasPrefix(v, "cell:") {
		return append(dst, store.Cell{Table: "t", Row: []byte(name), Family: []byte(fam), Qualifier: []byte("q"), Timestamp: 1, Value: []byte(val)}), nil
	}
	return append(dst, store.Cell{Table: "t", Row: rec.Key, Family: []byte(fam), Qualifier: []byte(src), Timestamp: rec.Timestamp.UnixMilli(), Value: rec.Value}), nil
})

// checkingOffsets stores offsets in memory and fails the test if a commit covers a record whose
// cell has not landed (invariant 4).
type checkingOffsets struct {
	t     testing.TB
	store *memStore
	dead  func() map[string]bool
	mu    sync.Mutex
	off   map[string]map[int32]int64
	first map[string]map[int32]int64 // offset of the first record produced, per partition
}

func (c *checkingOffsets) Commit(_ context.Context, _ string, offsets map[string]map[int32]kgo.EpochOffset) error {
	_, landed := c.store.snapshot()
	dead := c.dead()
	c.mu.Lock()
	defer c.mu.Unlock()
	for t, ps := range offsets {
		for p, eo := range ps {
			for o := c.first[t][p]; o < eo.Offset; o++ {
				src := fmt.Sprintf("%s/%d@%d", t, p, o)
				if !landed[src] && !dead[src] {
					c.t.Errorf("commit of %s/%d at %d before record %s landed", t, p, eo.Offset, src)
				}
			}
			if c.off[t] == nil {
				c.off[t] = map[int32]int64{}
			}
			c.off[t][p] = eo.Offset
		}
	}
	return nil
}

func (c *checkingOffsets) Load(_ context.Context, _ string, parts map[string][]int32) (map[string]map[int32]int64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]map[int32]int64{}
	for t, ps := range parts {
		for _, p := range ps {
			if o, ok := c.off[t][p]; ok {
				if out[t] == nil {
					out[t] = map[int32]int64{}
				}
				out[t][p] = o
			}
		}
	}
	return out, nil
}

type cluster struct {
	name    string
	brokers []string
}

// clusters gives every scenario an in-process kfake broker and, when it runs, the real one.
func clusters(t *testing.T) []cluster {
	fake, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation(), kfake.DefaultNumPartitions(4))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fake.Close)
	out := []cluster{{"kfake", fake.ListenAddrs()}}
	if testing.Short() {
		return out
	}
	return append(out, cluster{"kafka", testenv.Kafka(t)})
}

func uniq(s string) string { return fmt.Sprintf("%s-%d", s, time.Now().UnixNano()) }

func createTopics(t *testing.T, brokers []string, parts int32, topics ...string) {
	t.Helper()
	createReplicatedTopics(t, brokers, parts, 1, topics...)
}

func createReplicatedTopics(t *testing.T, brokers []string, parts int32, replication int16, topics ...string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := kadm.NewClient(cl).CreateTopics(ctx, parts, replication, nil, topics...)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range resp.Sorted() {
		if r.Err != nil {
			t.Fatalf("create %s: %v", r.Topic, r.Err)
		}
	}
}

// produce writes values round-robin over the topic's partitions and returns each partition's first
// offset.
func produce(t *testing.T, brokers []string, topic string, values []string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	recs := make([]*kgo.Record, len(values))
	for i, v := range values {
		recs[i] = &kgo.Record{Key: []byte("e" + strconv.Itoa(i%7)), Value: []byte(v), Timestamp: time.UnixMilli(int64(1_700_000_000_000 + i))}
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

func consumeAll(t *testing.T, brokers []string, topic string, n int) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out []*kgo.Record
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d records from %s", len(out), n, topic)
		}
		out = append(out, fs.Records()...)
	}
	return out
}

func waitFor(t *testing.T, what string, limit time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type harness struct {
	t       *testing.T
	cfg     Config
	store   *memStore
	offsets *checkingOffsets
	reg     *prometheus.Registry
	sink    *FlushThenCommit
	cancel  context.CancelFunc
	errc    chan error
}

func start(t *testing.T, c cluster, ms *memStore, tune func(*Config)) *harness {
	t.Helper()
	in, dlq := uniq("in"), uniq("dlq")
	createTopics(t, c.brokers, 4, in, dlq)
	h := &harness{t: t, store: ms, reg: prometheus.NewRegistry()}
	h.offsets = &checkingOffsets{t: t, store: ms, dead: h.deadSet, off: map[string]map[int32]int64{},
		first: map[string]map[int32]int64{}}
	h.cfg = Config{
		Brokers:         c.brokers,
		Group:           uniq("g"),
		Topics:          []string{in},
		DeadLetterTopic: dlq,
		MaxBatchRecords: 200,
		FlushInterval:   50 * time.Millisecond,
		RetryBackoff:    10 * time.Millisecond,
		MaxRetryBackoff: 100 * time.Millisecond,
		Offsets:         h.offsets,
		Logger:          testLogger(t),
	}
	if tune != nil {
		tune(&h.cfg)
	}
	h.cfg.Metrics = NewMetrics(h.reg, "test")
	return h
}

// deadSet reads the dead-letter topic as it stands: a commit may cover a record only if its cell
// landed or it is already there.
func (h *harness) deadSet() map[string]bool {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(h.cfg.Brokers...))
	if err != nil {
		h.t.Error(err)
		return nil
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, h.cfg.DeadLetterTopic)
	if err != nil {
		h.t.Error(err)
		return nil
	}
	want := map[int32]kgo.Offset{}
	var n int64
	ends.Each(func(o kadm.ListedOffset) {
		want[o.Partition] = kgo.NewOffset().AtStart()
		n += o.Offset
	})
	out := map[string]bool{}
	if n == 0 {
		return out
	}
	cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{h.cfg.DeadLetterTopic: want})
	for int64(len(out)) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			h.t.Error("could not read the dead-letter topic")
			return out
		}
		fs.EachRecord(func(r *kgo.Record) { out[string(header(r, deadletter.HeaderSource))] = true })
	}
	return out
}

// waitFor is waitFor with the sink's state in the failure message.
func (h *harness) waitFor(what string, limit time.Duration, cond func() bool) {
	h.t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			_, landed := h.store.snapshot()
			h.t.Fatalf("timed out waiting for %s: %d records landed; %s", what, len(landed), h.diag())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// diag sums up the sink's metrics, for failure messages.
func (h *harness) diag() string {
	m := h.cfg.Metrics
	var inflight, building, held int
	var kafkaPaused map[string][]int32
	var buffered int64
	if h.sink != nil {
		kafkaPaused = h.sink.cl.PauseFetchPartitions(nil)
		buffered = h.sink.cl.BufferedFetchRecords()
		h.sink.mu.Lock()
		inflight, held = len(h.sink.inflight), countParts(h.sink.held)
		if h.sink.building != nil {
			building = h.sink.building.records
		}
		h.sink.mu.Unlock()
	}
	return fmt.Sprintf("records in %v, committed %v, writes %d, dead %v/%v, held %v (%d in the loop, client paused %v), buffered %d, in flight %d, building %d, assigned %v revoked %v lost %v",
		testutil.ToFloat64(m.records), testutil.ToFloat64(m.commits), h.store.writes.Load(),
		testutil.ToFloat64(m.dead.WithLabelValues("undecodable")), testutil.ToFloat64(m.dead.WithLabelValues("rejected")),
		testutil.ToFloat64(m.held), held, kafkaPaused, buffered, inflight, building,
		testutil.ToFloat64(m.rebalances.WithLabelValues("assigned")), testutil.ToFloat64(m.rebalances.WithLabelValues("revoked")),
		testutil.ToFloat64(m.rebalances.WithLabelValues("lost")))
}

func (h *harness) run() {
	h.t.Helper()
	s, err := NewFlushThenCommit(h.cfg, factEncoder, h.store)
	if err != nil {
		h.t.Fatal(err)
	}
	h.sink = s
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	h.errc = make(chan error, 1)
	go func() { h.errc <- s.Run(ctx) }()
}

func (h *harness) stop() {
	h.t.Helper()
	h.cancel()
	select {
	case err := <-h.errc:
		if err != nil {
			h.t.Fatalf("sink stopped with %v", err)
		}
	case <-time.After(60 * time.Second):
		h.t.Fatal("sink did not stop")
	}
}

func TestFlushThenCommitLandsEverythingOnceAndCommitsAfter(t *testing.T) {
	for _, c := range clusters(t) {
		t.Run(c.name, func(t *testing.T) {
			ms := newMemStore()
			h := start(t, c, ms, nil)
			var values []string
			for i := range 2000 {
				switch {
				case i%97 == 0:
					values = append(values, "bad")
				case i%131 == 0:
					values = append(values, "missing:"+strconv.Itoa(i))
				default:
					values = append(values, "v"+strconv.Itoa(i))
				}
			}
			produce(t, c.brokers, h.cfg.Topics[0], values)
			var nBad, nMissing int
			for _, v := range values {
				if v == "bad" {
					nBad++
				} else if strings.HasPrefix(v, "missing:") {
					nMissing++
				}
			}
			h.run()
			good := len(values) - nBad - nMissing
			h.waitFor("every good record to land", 60*time.Second, func() bool {
				_, landed := ms.snapshot()
				return len(landed) == good
			})
			dead := consumeAll(t, c.brokers, h.cfg.DeadLetterTopic, nBad+nMissing)
			stages := map[string]int{}
			for _, r := range dead {
				stage := string(header(r, deadletter.HeaderReason))
				stages[stage]++
				reason := string(header(r, deadletter.HeaderDetail))
				switch stage {
				case "undecodable":
					if string(r.Value) != "bad" || !strings.Contains(reason, "not a reading") {
						t.Fatalf("decode dead letter %q with reason %q", r.Value, reason)
					}
				case "rejected":
					if !strings.HasPrefix(string(r.Value), "missing:") || !strings.Contains(reason, "NoSuchColumnFamily") {
						t.Fatalf("write dead letter %q with reason %q", r.Value, reason)
					}
				default:
					t.Fatalf("dead letter with reason %q", stage)
				}
			}
			if stages["undecodable"] != nBad || stages["rejected"] != nMissing {
				t.Fatalf("dead letters by reason %v, want undecodable %d rejected %d", stages, nBad, nMissing)
			}
			h.waitFor("offsets committed to the end", 30*time.Second, func() bool {
				h.offsets.mu.Lock()
				defer h.offsets.mu.Unlock()
				var sum int64
				for _, ps := range h.offsets.off {
					for _, o := range ps {
						sum += o
					}
				}
				return sum == int64(len(values))
			})
			h.stop()
			versions, _ := ms.snapshot()
			for k, vs := range versions {
				if len(vs) != 1 {
					t.Fatalf("cell %q written %d times", k, len(vs))
				}
			}
			if got := testutil.ToFloat64(h.cfg.Metrics.dead.WithLabelValues("undecodable")); int(got) != nBad {
				t.Fatalf("dead_lettered_total{reason=undecodable} = %v, want %d", got, nBad)
			}
		})
	}
}

// TestFlushThenCommitHoldsWhileStoreIsDown keeps the store down while records arrive: the sink must
// hold its poll, keep its group membership (no revoke, no loss), commit nothing, and drain
// everything once the store is back.
func TestFlushThenCommitHoldsWhileStoreIsDown(t *testing.T) {
	for _, c := range clusters(t) {
		t.Run(c.name, func(t *testing.T) {
			ms := newMemStore()
			ms.down.Store(true)
			h := start(t, c, ms, func(cfg *Config) { cfg.MaxBatchRecords = 50 })
			values := make([]string, 1000)
			for i := range values {
				values[i] = "v" + strconv.Itoa(i)
			}
			produce(t, c.brokers, h.cfg.Topics[0], values)
			h.run()
			h.waitFor("the poll to be held", 30*time.Second, func() bool {
				return testutil.ToFloat64(h.cfg.Metrics.held) > 0
			})
			// Keep it down for a while: writes keep failing, the loop keeps polling.
			w0 := ms.writes.Load()
			h.waitFor("retries while down", 30*time.Second, func() bool { return ms.writes.Load() > w0+5 })
			h.offsets.mu.Lock()
			committed := len(h.offsets.off)
			h.offsets.mu.Unlock()
			if committed != 0 {
				t.Fatalf("offsets committed while the store was down: %v", h.offsets.off)
			}
			ms.down.Store(false)
			h.waitFor("lag to drain", 60*time.Second, func() bool {
				_, landed := ms.snapshot()
				return len(landed) == len(values)
			})
			h.waitFor("the poll to be released", 30*time.Second, func() bool {
				return testutil.ToFloat64(h.cfg.Metrics.held) == 0
			})
			// Leaving the group at stop revokes; before it, nothing may have.
			for _, kind := range []string{"revoked", "lost"} {
				if n := testutil.ToFloat64(h.cfg.Metrics.rebalances.WithLabelValues(kind)); n != 0 {
					t.Fatalf("%v partitions %s while the store was down", n, kind)
				}
			}
			h.stop()
			if got := testutil.ToFloat64(h.cfg.Metrics.failed.WithLabelValues("unavailable")); got == 0 {
				t.Fatal("no failed actions counted while the store was down")
			}
		})
	}
}

// TestFlushThenCommitCoalescesToNewest sends many values for one cell in one batch to a store that
// applies a batch's cells in reverse: only the newest may land, every time.
func TestFlushThenCommitCoalescesToNewest(t *testing.T) {
	for _, c := range clusters(t) {
		t.Run(c.name, func(t *testing.T) {
			ms := newMemStore()
			ms.reverse = true
			h := start(t, c, ms, func(cfg *Config) {
				cfg.MaxBatchRecords = 100_000
				cfg.FlushInterval = time.Hour // one batch, written at shutdown
				cfg.Offsets = nil             // superseded values never land: Kafka commits, unchecked
			})
			in := h.cfg.Topics[0]
			createTopics(t, c.brokers, 1, in+"-1")
			h.cfg.Topics = []string{in + "-1"}
			var values []string
			for i := range 50 {
				values = append(values, fmt.Sprintf("cell:x:%03d", i))
			}
			produce(t, c.brokers, in+"-1", values)
			h.run()
			waitFor(t, "records consumed", 30*time.Second, func() bool {
				return testutil.ToFloat64(h.cfg.Metrics.records) == float64(len(values))
			})
			h.stop()
			versions, _ := ms.snapshot()
			x := store.Cell{Table: "t", Row: []byte("x"), Family: []byte("f"), Qualifier: []byte("q"), Timestamp: 1}
			got := versions[cellKey(&x)]
			if len(got) != 1 || got[0] != "049" {
				t.Fatalf("cell x received %v, want only the newest value 049", got)
			}
		})
	}
}

func header(r *kgo.Record, key string) []byte {
	for _, h := range r.Headers {
		if h.Key == key {
			return h.Value
		}
	}
	return nil
}

// testLogger shows the sink's logs only with go test -v.
func testLogger(t *testing.T) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, nil)).With("test", t.Name())
	}
	return slog.New(slog.DiscardHandler)
}

// overlapStore fails the test when two concurrent writes carry the same cell, and records how many
// writes ran at once.
type overlapStore struct {
	*memStore
	t         *testing.T
	mu        sync.Mutex
	busy      map[string]bool
	running   int
	maxAtOnce int
}

func (o *overlapStore) Write(ctx context.Context, cells []store.Cell) ([]store.CellError, error) {
	o.mu.Lock()
	o.running++
	o.maxAtOnce = max(o.maxAtOnce, o.running)
	for i := range cells {
		k := cellKey(&cells[i])
		if o.busy[k] {
			o.t.Errorf("cell %q written by two writes at once", cells[i].Row)
		}
		o.busy[k] = true
	}
	o.mu.Unlock()
	// Hold the write until a second one runs beside it, so that writes the sink allows to overlap
	// do; one the sink holds back never comes, and the wait ends at its bound.
	for deadline := time.Now().Add(50 * time.Millisecond); time.Now().Before(deadline); {
		o.mu.Lock()
		both := o.running >= 2
		o.mu.Unlock()
		if both {
			break
		}
		time.Sleep(time.Millisecond)
	}
	failed, err := o.memStore.Write(ctx, cells)
	o.mu.Lock()
	for i := range cells {
		delete(o.busy, cellKey(&cells[i]))
	}
	o.running--
	o.mu.Unlock()
	return failed, err
}

// TestFlushThenCommitPipelinesOnlyDisjointBatches writes distinct cells (they may go two batches
// at once) and then one cell over and over (they may not), and checks every value landed in order.
func TestFlushThenCommitPipelinesOnlyDisjointBatches(t *testing.T) {
	c := clusters(t)[0]
	for _, shared := range []bool{false, true} {
		t.Run(fmt.Sprintf("shared=%v", shared), func(t *testing.T) {
			ms := &overlapStore{memStore: newMemStore(), t: t, busy: map[string]bool{}}
			h := start(t, c, ms.memStore, func(cfg *Config) {
				cfg.MaxBatchRecords = 50
				cfg.Offsets = nil
			})
			in := h.cfg.Topics[0] + "-1"
			createTopics(t, c.brokers, 1, in)
			h.cfg.Topics = []string{in}
			var values []string
			for i := range 2000 {
				if shared {
					values = append(values, fmt.Sprintf("cell:x:%05d", i))
				} else {
					values = append(values, fmt.Sprintf("cell:x%d:%05d", i, i))
				}
			}
			produce(t, c.brokers, in, values)
			s, err := NewFlushThenCommit(h.cfg, factEncoder, ms)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			errc := make(chan error, 1)
			go func() { errc <- s.Run(ctx) }()
			waitFor(t, "every record committed", 60*time.Second, func() bool {
				return testutil.ToFloat64(h.cfg.Metrics.commits) == float64(len(values))
			})
			cancel()
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
			versions, _ := ms.snapshot()
			if shared {
				x := store.Cell{Table: "t", Row: []byte("x"), Family: []byte("f"), Qualifier: []byte("q"), Timestamp: 1}
				vs := versions[cellKey(&x)]
				if len(vs) == 0 || vs[len(vs)-1] != "01999" {
					t.Fatalf("cell x ends with %v, want the last value 01999", vs[max(0, len(vs)-3):])
				}
				for i := 1; i < len(vs); i++ {
					if vs[i] < vs[i-1] {
						t.Fatalf("cell x went back from %s to %s", vs[i-1], vs[i])
					}
				}
			} else {
				if len(versions) != len(values) {
					t.Fatalf("%d cells landed, want %d", len(versions), len(values))
				}
				if ms.maxAtOnce < 2 {
					t.Fatalf("disjoint batches were never written at once (max %d)", ms.maxAtOnce)
				}
			}
		})
	}
}

// TestFlushThenCommitRebalanceLandsBeforeGivingUp runs a second member into the group while the
// first is busy: the first must land and commit what it holds before its partitions move, so
// every record lands, no commit passes an unwritten record, and nothing is written twice.
func TestFlushThenCommitRebalanceLandsBeforeGivingUp(t *testing.T) {
	for _, c := range clusters(t) {
		t.Run(c.name, func(t *testing.T) {
			ms := newMemStore()
			h := start(t, c, ms, func(cfg *Config) { cfg.MaxBatchRecords = 100 })
			values := make([]string, 3000)
			for i := range values {
				values[i] = "v" + strconv.Itoa(i)
			}
			produce(t, c.brokers, h.cfg.Topics[0], values[:1500])
			h.run()
			waitFor(t, "the first member to write", 30*time.Second, func() bool {
				_, landed := ms.snapshot()
				return len(landed) > 0
			})
			secondMetrics := NewMetrics(prometheus.NewRegistry(), "second")
			second, err := NewFlushThenCommit(func() Config {
				cfg := h.cfg
				cfg.Metrics = secondMetrics
				return cfg
			}(), factEncoder, ms)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			errc := make(chan error, 1)
			go func() { errc <- second.Run(ctx) }()
			produce(t, c.brokers, h.cfg.Topics[0], values[1500:])
			deadline := time.Now().Add(90 * time.Second)
			for {
				_, landed := ms.snapshot()
				if len(landed) == len(values) {
					break
				}
				if time.Now().After(deadline) {
					perPart := map[string]int{}
					for src := range landed {
						perPart[src[:strings.Index(src, "@")]]++
					}
					t.Fatalf("%d of %d records landed; per partition %v; first member assigned %v revoked %v lost %v; second assigned %v revoked %v",
						len(landed), len(values), perPart,
						testutil.ToFloat64(h.cfg.Metrics.rebalances.WithLabelValues("assigned")),
						testutil.ToFloat64(h.cfg.Metrics.rebalances.WithLabelValues("revoked")),
						testutil.ToFloat64(h.cfg.Metrics.rebalances.WithLabelValues("lost")),
						testutil.ToFloat64(secondMetrics.rebalances.WithLabelValues("assigned")),
						testutil.ToFloat64(secondMetrics.rebalances.WithLabelValues("revoked")))
				}
				time.Sleep(20 * time.Millisecond)
			}
			waitFor(t, "the second member to get partitions", 30*time.Second, func() bool {
				return testutil.ToFloat64(h.cfg.Metrics.rebalances.WithLabelValues("revoked")) > 0
			})
			cancel()
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
			h.stop()
			versions, _ := ms.snapshot()
			for k, vs := range versions {
				if len(vs) != 1 {
					t.Fatalf("cell %q written %d times across the rebalance", k, len(vs))
				}
			}
		})
	}
}

// TestFlushThenCommitCountsCellsTheTTLExpires feeds records older than the table's TTL: they are
// still written (HBase is the judge of expiry), and counted as expiring on arrival.
func TestFlushThenCommitCountsCellsTheTTLExpires(t *testing.T) {
	c := clusters(t)[0]
	ms := newMemStore()
	h := start(t, c, ms, func(cfg *Config) { cfg.TTL = 24 * time.Hour })
	// produce stamps records near 2023-11-14, far older than a day.
	produce(t, c.brokers, h.cfg.Topics[0], []string{"a", "b", "c"})
	h.run()
	waitFor(t, "records landed", 30*time.Second, func() bool {
		_, landed := ms.snapshot()
		return len(landed) == 3
	})
	h.stop()
	if got := testutil.ToFloat64(h.cfg.Metrics.expired); got != 3 {
		t.Fatalf("expired_on_arrival_total = %v, want 3", got)
	}
}

// brokenStore breaks the Store contract: it reports the failure of a cell it was not given.
type brokenStore struct{ *memStore }

func (b brokenStore) Write(ctx context.Context, cells []store.Cell) ([]store.CellError, error) {
	return []store.CellError{{Index: len(cells) + 7, Err: errors.New("no such cell"), Permanent: false}}, nil
}

// TestBrokenStoreContractIsFatal (DESIGN invariant 4): a store that breaks its contract makes Run
// return the error, instead of the sink silently committing nothing for ever.
func TestBrokenStoreContractIsFatal(t *testing.T) {
	c := clusters(t)[0]
	ms := newMemStore()
	h := start(t, c, ms, nil)
	produce(t, c.brokers, h.cfg.Topics[0], []string{"cell:a:1", "cell:b:2"})
	s, err := NewFlushThenCommit(h.cfg, factEncoder, brokenStore{ms})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = s.Run(ctx)
	if err == nil || ctx.Err() != nil || !strings.Contains(err.Error(), "store reported failure of cell") {
		t.Fatalf("Run returned %v (context %v), want the broken contract", err, ctx.Err())
	}
	if len(h.offsets.off) != 0 {
		t.Fatalf("offsets committed: %v", h.offsets.off)
	}
}

// TestFlushThenCommitCountsRecordsDeletedUnread stops a sink, lets the broker delete records after
// its commits (DeleteRecords, as retention does), and restarts it: the sink goes on from the log
// start, as Kafka's consumers do, but counts and logs what it never read, with offsets in Kafka
// and in an external store.
func TestFlushThenCommitCountsRecordsDeletedUnread(t *testing.T) {
	for _, c := range clusters(t) {
		for _, where := range []string{"kafka-offsets", "store-offsets"} {
			t.Run(c.name+"/"+where, func(t *testing.T) {
				ms := newMemStore()
				h := start(t, c, ms, func(cfg *Config) {
					if where == "kafka-offsets" {
						cfg.Offsets = nil
					}
				})
				in := h.cfg.Topics[0]
				values := make([]string, 400) // 100 per partition
				for i := range values {
					values[i] = "v" + strconv.Itoa(i)
				}
				produce(t, c.brokers, in, values)
				h.run()
				h.waitFor("the first records to be committed", 60*time.Second, func() bool {
					return testutil.ToFloat64(h.cfg.Metrics.commits) == 400
				})
				h.stop()

				produce(t, c.brokers, in, values) // offsets 100-199 of every partition
				cl, err := kgo.NewClient(kgo.SeedBrokers(c.brokers...))
				if err != nil {
					t.Fatal(err)
				}
				defer cl.Close()
				to := kadm.Offsets{}
				for p := range int32(4) {
					to.Add(kadm.Offset{Topic: in, Partition: p, At: 150, LeaderEpoch: -1})
				}
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				deleted, err := kadm.NewClient(cl).DeleteRecords(ctx, to)
				if err == nil {
					err = deleted.Error()
				}
				if err != nil {
					t.Fatalf("delete records: %v", err)
				}
				if where == "kafka-offsets" {
					// What abacus status shows of the stopped group: the loss to come.
					lags, err := OffsetsAdmin{Kafka: kadm.NewClient(cl)}.Show(ctx, h.cfg.Group, in)
					if err != nil {
						t.Fatal(err)
					}
					var lost, lag int64
					for _, l := range lags {
						lost, lag = lost+l.Deleted, lag+l.Lag
						if l.Start != 150 || l.Committed != 100 {
							t.Fatalf("show: %+v, want start 150 and committed 100", l)
						}
					}
					if lost != 200 || lag != 200 {
						t.Fatalf("show: %d deleted unread and lag %d, want 200 and 200", lost, lag)
					}
				}
				h.offsets.mu.Lock()
				h.offsets.first[in] = map[int32]int64{0: 150, 1: 150, 2: 150, 3: 150} // what is left to land
				h.offsets.mu.Unlock()

				h.run()
				h.waitFor("the records left to be committed", 60*time.Second, func() bool {
					return testutil.ToFloat64(h.cfg.Metrics.commits) == 400+200
				})
				h.stop()
				if got := testutil.ToFloat64(h.cfg.Metrics.deleted.WithLabelValues(in)); got != 200 {
					t.Fatalf("records_deleted_unread_total = %v, want 200 (50 per partition)", got)
				}
				_, landed := ms.snapshot()
				for p := range 4 {
					for o := 100; o < 200; o++ {
						src := fmt.Sprintf("%s/%d@%d", in, p, o)
						if landed[src] != (o >= 150) {
							t.Fatalf("record %s landed: %v", src, landed[src])
						}
					}
				}
			})
		}
	}
}
