package querybench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/abacus-stream/abacus/app"
	"github.com/abacus-stream/abacus/hbase"
	"github.com/abacus-stream/abacus/internal/testenv/gate"
	"github.com/abacus-stream/abacus/keyindex"
	"github.com/abacus-stream/abacus/query"
	"github.com/abacus-stream/abacus/query/httpapi"
	"github.com/abacus-stream/abacus/schema"
	"github.com/abacus-stream/abacus/store"
	"github.com/abacus-stream/abacus/store/hbasestore"
)

// countingSource is the HBase store as the query server reads it, counting what the scans
// return. The client counts RPCs per server (hbase.Client.ServerStats) but not bytes, so the
// bytes here are those of the cells HBase returned (row, family, qualifier, value and 8 bytes of
// timestamp per cell), not what went over the wire.
type countingSource struct {
	*hbasestore.Store
	bytes, cells atomic.Int64
	hideIndex    bool // the key index table reads as missing: listings walk the aggregates table
}

func (c *countingSource) Scan(ctx context.Context, spec store.ScanSpec, fn func(row []byte, cells []store.Cell) bool) error {
	if c.hideIndex && strings.HasSuffix(spec.Table, "_keys") {
		return fmt.Errorf("bench: %s hidden (ABACUS_BENCH_KEY_INDEX=off): %w", spec.Table, store.ErrNoSuchTable)
	}
	return c.Store.Scan(ctx, spec, func(row []byte, cells []store.Cell) bool {
		var n int64
		for _, x := range cells {
			n += int64(len(x.Row) + len(x.Family) + len(x.Qualifier) + len(x.Value) + 8)
		}
		c.bytes.Add(n)
		c.cells.Add(int64(len(cells)))
		return fn(row, cells)
	})
}

func rpcs(c *hbase.Client) int64 {
	var n int64
	for _, s := range c.ServerStats() {
		n += s.Requests
	}
	return n
}

// rounds is how many times each dashboard sends every panel: ABACUS_BENCH_ROUNDS, default 100
// (a p99 of 100 samples is their second slowest).
func rounds() int {
	if n, err := strconv.Atoi(os.Getenv("ABACUS_BENCH_ROUNDS")); err == nil && n > 0 {
		return n
	}
	return 100
}

// refreshPick is what each round adds to a dashboard's pick of entities: by default each round
// asks other entities (as many people's dashboards do, and what a cache helps least);
// ABACUS_BENCH_PICKS=refresh asks each dashboard's own entities at every round, as a dashboard
// that refreshes does.
func refreshPick() int {
	if os.Getenv("ABACUS_BENCH_PICKS") == "refresh" {
		return 0
	}
	return 104729
}

// panelFilter keeps the panels whose name matches ABACUS_BENCH_PANELS (a regular expression;
// all when unset), so that one slow panel can be measured or profiled on its own.
func panelFilter(b testing.TB) func([]panel) []panel {
	re, err := regexp.Compile(os.Getenv("ABACUS_BENCH_PANELS"))
	if err != nil {
		b.Fatalf("ABACUS_BENCH_PANELS: %v", err)
	}
	return func(ps []panel) []panel {
		return slices.DeleteFunc(ps, func(p panel) bool { return !re.MatchString(p.name) })
	}
}

func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(p*float64(len(s))+0.5) - 1
	return s[max(0, min(i, len(s)-1))]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// ensureKeyIndex rebuilds the key index of a dataset loaded before the loader wrote one.
func ensureKeyIndex(b testing.TB, ctx context.Context, st *hbasestore.Store, s size) {
	if ok, err := keyindex.Complete(ctx, st, s.table(), family); err != nil || ok {
		if err != nil {
			b.Fatal(err)
		}
		return
	}
	agg := schema.TableLayout{Name: s.table(), Family: family, SaltBuckets: buckets}
	if err := st.EnsureTable(ctx, schema.KeyIndexLayout(agg)); err != nil {
		b.Fatal(err)
	}
	t0 := time.Now()
	stats, err := keyindex.Rebuild(ctx, st, agg, buckets, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("key index of %s rebuilt: %d keys from %d reads in %s", s.table(), stats.Keys, stats.Reads, time.Since(t0).Round(time.Millisecond))
}

// panelBench is the query server of the panel benchmarks over the loaded dataset, and what they
// ask it with.
type panelBench struct {
	c     *hbase.Client
	src   *countingSource
	ex    *expected
	keep  func([]panel) []panel
	fetch func(panel) (time.Duration, answer, error)
	ask   func(panel) (time.Duration, error)
	close func()
}

// newPanelBench serves the dataset of size s that BenchmarkLoad loaded (it fails b when there is
// none) through the query server's real HTTP handler, on an HBase client of its own.
func newPanelBench(b testing.TB, s size) *panelBench {
	q := gate.HBaseZooKeeper(b)
	ctx := context.Background()
	c, err := hbase.NewClient(ctx, hbase.Config{ZooKeeper: q})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := c.Admin().DescribeTable(ctx, s.loadedTable()); err != nil {
		c.Close()
		b.Fatalf("dataset %s not loaded (run BenchmarkLoad with the same ABACUS_BENCH_ENTITIES and ABACUS_BENCH_DAYS): %v", s.table(), err)
	}
	st, err := hbasestore.New(c, hbasestore.Config{})
	if err != nil {
		b.Fatal(err)
	}
	src := &countingSource{Store: st, hideIndex: os.Getenv("ABACUS_BENCH_KEY_INDEX") == "off"}
	if !src.hideIndex {
		ensureKeyIndex(b, ctx, st, s)
	}
	r, err := query.NewReader(ctx, src, s.table(), family)
	if err != nil {
		b.Fatal(err)
	}
	if n, err := strconv.Atoi(os.Getenv("ABACUS_BENCH_MAX_SCANS")); err == nil {
		r = r.WithMaxScans(n) // the query server's query.max_scans
	}
	if os.Getenv("ABACUS_BENCH_CACHE") != "off" {
		// As the query server does by default; its clock at the dataset's end, so that the last
		// hour of the dataset is read from HBase at every request, as a live one would be.
		size, _ := strconv.ParseInt(os.Getenv("ABACUS_BENCH_CACHE_BYTES"), 10, 64) // query.cache_bytes; 0: its default
		c := query.NewCache(size)
		c.Now = func() time.Time { return end }
		r = r.WithCache(c)
	}
	topo, err := fleetTopology()
	if err != nil {
		b.Fatal(err)
	}
	srv := &httpapi.Server{Topologies: []query.Served{{Name: topoName, Sets: app.ServedSets(topo.Sets()), Reader: r}},
		Logger: slog.New(slog.DiscardHandler), Now: func() time.Time { return end },
		NoCoarser: os.Getenv("ABACUS_BENCH_COARSER") == "off"}
	hs := httptest.NewServer(srv.HandlerWithDashboard())
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	fetch := fetcher(ctx, hc, hs.URL)
	return &panelBench{c: c, src: src, ex: newExpected(s), keep: panelFilter(b), fetch: fetch, ask: asker(fetch),
		close: func() { hs.Close(); c.Close() }}
}

// BenchmarkPanels asks the loaded dataset (BenchmarkLoad, which must have run) every panel of
// panels() through the query server's real HTTP handler, first one panel at a time to count what
// each reads from HBase, then from 1 and from 16 concurrent dashboards, each sending every panel
// in turn, rounds() times, warm (every panel is asked once before the clock starts). It prints a
// table of p50 and p99 per panel.
func BenchmarkPanels(b *testing.B) {
	s := datasetSize()
	pb := newPanelBench(b, s)
	defer pb.close()
	ex, keep, ask, src, c := pb.ex, pb.keep, pb.ask, pb.src, pb.c

	type cost struct{ bytes, cells, rpcs int64 }
	costs := map[string]cost{}
	names := []string{}
	for _, p := range keep(ex.panels(0)) {
		names = append(names, p.name)
		if _, err := ask(p); err != nil { // warm: the first read of each range comes from disk
			b.Fatal(err)
		}
		b0, c0, r0 := src.bytes.Load(), src.cells.Load(), rpcs(c)
		if _, err := ask(p); err != nil {
			b.Fatal(err)
		}
		costs[p.name] = cost{src.bytes.Load() - b0, src.cells.Load() - c0, rpcs(c) - r0}
	}

	lat, timeouts, _, err := measure(b, func(pick int) []panel { return keep(ex.panels(pick)) }, pb.fetch, false)
	if err != nil {
		b.Fatal(err)
	}

	writeResults(b, lat)
	fmt.Printf("\ndataset %s: %d entities x %d days of minute windows, hourly, per region (%d) and fleet-wide; %d rounds per dashboard\n",
		s.table(), s.entities, s.days, len(ex.regions), rounds())
	fmt.Printf("%-36s %9s %9s %9s %9s %10s %8s %6s %s\n", "panel", "1:p50ms", "1:p99ms", "16:p50ms", "16:p99ms", "KB-read", "cells", "rpcs", "503s(1/16)")
	for _, n := range names {
		l1, l16 := lat[1][n], lat[16][n]
		k := costs[n]
		fmt.Printf("%-36s %9.1f %9.1f %9.1f %9.1f %10.1f %8d %6d %d/%d\n", n, ms(percentile(l1, 0.5)), ms(percentile(l1, 0.99)),
			ms(percentile(l16, 0.5)), ms(percentile(l16, 0.99)), float64(k.bytes)/1024, k.cells, k.rpcs,
			timeouts[1][n], timeouts[16][n])
	}
	fmt.Println()
}

// answer is what a panel's request came back with.
type answer struct {
	code int
	body []byte
}

// fetcher returns the function that sends a panel to the server at base and times it until the
// whole answer is read; it does not look at the answer.
func fetcher(ctx context.Context, hc *http.Client, base string) func(panel) (time.Duration, answer, error) {
	return func(p panel) (time.Duration, answer, error) {
		var body io.Reader
		if p.body != "" {
			body = strings.NewReader(p.body)
		}
		req, err := http.NewRequestWithContext(ctx, p.method, base+p.path, body)
		if err != nil {
			return 0, answer{}, err
		}
		if p.body != "" {
			req.Header.Set("Content-Type", "application/json") // as Grafana sends it
		}
		t0 := time.Now()
		resp, err := hc.Do(req)
		if err != nil {
			return 0, answer{}, err
		}
		out, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		took := time.Since(t0)
		if err != nil {
			return 0, answer{}, err
		}
		return took, answer{resp.StatusCode, out}, nil
	}
}

// errTimedOut marks the server's own timeout (a 503), an answer measure counts rather than
// stops at.
var errTimedOut = errors.New("status 503")

// verify checks a panel's answer: a 503 is an error whatever the panel expects.
func verify(p panel, a answer) error {
	if a.code == http.StatusServiceUnavailable {
		return fmt.Errorf("panel %q: %w: %.2000s", p.name, errTimedOut, a.body)
	}
	if err := p.check(a.code, a.body); err != nil {
		return fmt.Errorf("panel %q: %w", p.name, err)
	}
	return nil
}

// results are a run's latencies per panel, ms: p50 and p99 at 1 and at 16 dashboards.
type results map[string][4]float64

func resultsOf(lat map[int]map[string][]time.Duration) results {
	out := results{}
	for n, l1 := range lat[1] {
		l16 := lat[16][n]
		out[n] = [4]float64{ms(percentile(l1, 0.5)), ms(percentile(l1, 0.99)), ms(percentile(l16, 0.5)), ms(percentile(l16, 0.99))}
	}
	return out
}

// writeResults keeps abacus's latencies in the file ABACUS_BENCH_RESULTS names, when it names
// one, for BenchmarkOpenTSDB to print beside its own (bench/query/opentsdb/run.sh runs both).
func writeResults(b *testing.B, lat map[int]map[string][]time.Duration) {
	f := os.Getenv("ABACUS_BENCH_RESULTS")
	if f == "" {
		return
	}
	out, err := json.Marshal(resultsOf(lat))
	if err == nil {
		err = os.WriteFile(f, out, 0o644)
	}
	if err != nil {
		b.Fatalf("ABACUS_BENCH_RESULTS: %v", err)
	}
}

// asker returns the function that sends a panel, times it, and checks the answer.
func asker(fetch func(panel) (time.Duration, answer, error)) func(panel) (time.Duration, error) {
	return func(p panel) (time.Duration, error) {
		took, a, err := fetch(p)
		if err != nil {
			return 0, err
		}
		return took, verify(p, a)
	}
}

// sample is one timed answer of measure, kept to be checked after the clock stops: its request
// and what the answer hashed to. The answer itself is kept only for the first answer of each
// request, while they add up to less than keptAnswers bytes (16 dashboards' answers over 100
// rounds would be gigabytes).
type sample struct {
	p    panel
	took time.Duration
	code int
	sum  uint64
	size int
	body []byte
}

// keptAnswers bounds the bytes of the answers measure keeps to check after the clock; a request
// whose first answer was not kept is asked again then.
const keptAnswers = 512 << 20

// request names what a panel asks: two panels alike in it must be answered alike.
func (p panel) request() string { return p.method + " " + p.path + "\n" + p.body }

// sum hashes what of an answer must be the same every time its request is asked.
func (p panel) sum(body []byte) uint64 {
	if p.steady != nil {
		body = p.steady(body)
	}
	return maphash.Bytes(answerSeed, body)
}

var answerSeed = maphash.MakeSeed()

// measure asks the panels of panelsOf from 1 and from 16 concurrent dashboards, each sending
// every panel in turn rounds() times, each round with panels of its own pick so that the
// dashboards do not all read the same rows. It returns the latencies per dashboard count and
// panel, and how many answers were 503s; any other wrong answer is its error, unless wrongCounted
// (for a system under comparison, not under test: OpenTSDB), which counts them in wrong instead
// and logs the first of each panel.
//
// The answers are checked after the clock stops, not as they come: checking means decoding every
// answer (a fleet panel's is megabytes of JSON), and on this machine's two cores the checks of 16
// dashboards took as much CPU as the server they measured, whose latency they then were. While
// the clock runs each answer is only read and hashed (the first answer of each request is kept,
// within keptAnswers); after it, that answer is checked (or, when it was not kept, the request is
// asked once more and that answer is), and every other timed answer to the request must be byte
// for byte the same.
func measure(b testing.TB, panelsOf func(pick int) []panel, fetch func(panel) (time.Duration, answer, error), wrongCounted bool) (lat map[int]map[string][]time.Duration, timeouts, wrong map[int]map[string]int, err error) {
	lat = map[int]map[string][]time.Duration{}
	timeouts = map[int]map[string]int{}
	wrong = map[int]map[string]int{}
	for _, dashboards := range []int{1, 16} {
		lat[dashboards] = map[string][]time.Duration{}
		timeouts[dashboards] = map[string]int{}
		wrong[dashboards] = map[string]int{}
		var mu sync.Mutex
		var wg sync.WaitGroup
		errs := make(chan error, dashboards)
		var samples []sample
		kept, seen := 0, map[string]bool{}
		t0 := time.Now()
		n := 0
		for d := range dashboards {
			wg.Go(func() {
				for round := range rounds() {
					ps := panelsOf(d*7919 + round*refreshPick())
					mu.Lock()
					n = len(ps)
					mu.Unlock()
					for _, p := range ps {
						took, a, err := fetch(p)
						if err != nil {
							errs <- fmt.Errorf("panel %q: %w", p.name, err)
							return
						}
						x := sample{p: p, took: took, code: a.code, sum: p.sum(a.body), size: len(a.body)}
						key := p.request()
						mu.Lock()
						if !seen[key] && kept+len(a.body) <= keptAnswers {
							x.body = a.body
							kept += len(a.body)
						}
						seen[key] = true
						samples = append(samples, x)
						mu.Unlock()
					}
				}
			})
		}
		wg.Wait()
		select {
		case err := <-errs:
			return nil, nil, nil, err
		default:
		}
		b.Logf("%d dashboards: %d rounds of %d panels each in %s", dashboards, rounds(), n, time.Since(t0).Round(time.Millisecond))
		t1 := time.Now()
		checked := map[string]sample{} // per request, its first answer, or the answer asked again, checked
		checkErr := map[string]error{}
		asked := 0
		for _, x := range samples {
			name := x.p.name
			lat[dashboards][name] = append(lat[dashboards][name], x.took)
			if x.code == http.StatusServiceUnavailable {
				// The server's own timeout is an answer the table must show, not a reason to stop
				// measuring the other panels.
				timeouts[dashboards][name]++
				continue
			}
			key := x.p.request()
			ref, ok := checked[key]
			switch {
			case !ok && x.body != nil:
				ref = x
				checked[key], checkErr[key] = ref, verify(x.p, answer{x.code, x.body})
			case !ok:
				took, a, err := fetch(x.p)
				if err != nil {
					return nil, nil, nil, fmt.Errorf("panel %q, asked again to check it: %w", name, err)
				}
				asked++
				ref = sample{p: x.p, took: took, code: a.code, sum: x.p.sum(a.body), size: len(a.body)}
				checked[key], checkErr[key] = ref, verify(x.p, a)
			}
			err := checkErr[key]
			if err == nil && (x.code != ref.code || x.sum != ref.sum) {
				err = fmt.Errorf("panel %q: answered %d with %d bytes, where another time it answered %d with %d bytes, which the check passed",
					name, x.code, x.size, ref.code, ref.size)
			}
			if err == nil {
				continue
			}
			if !wrongCounted {
				return nil, nil, nil, fmt.Errorf("%d dashboards: %w", dashboards, err)
			}
			if wrong[dashboards][name]++; wrong[dashboards][name] == 1 {
				b.Logf("%d dashboards: wrong answer, counted: %v", dashboards, err)
			}
		}
		b.Logf("%d dashboards: %d answers of %d requests checked in %s (%d asked again: their first answer was not kept)",
			dashboards, len(samples), len(checked), time.Since(t1).Round(time.Millisecond), asked)
	}
	return lat, timeouts, wrong, nil
}
