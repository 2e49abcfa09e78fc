package querybench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/abacus-stream/abacus/examples/devices"
	"github.com/abacus-stream/abacus/hbase"
	"github.com/abacus-stream/abacus/internal/testenv/gate"
	"golang.org/x/sync/errgroup"
)

// OpenTSDB beside abacus: the same fleet, stored as OpenTSDB stores it (every reading a raw point
// of metric "temp", tagged with its entity and region) in tables of its own on the same HBase,
// and the same dashboard panels asked of its /api/query with downsampling. OpenTSDB has no
// windows stored, so every panel aggregates raw points at query time.

// otsdbPort is where the benchmark's TSD listens (loopback only).
const otsdbPort = 24242

// otsdbTables are the TSD's four tables for a dataset size, named after it so that a loaded size
// is reused as the abacus table is.
type otsdbTables struct{ data, uid, tree, meta, loaded string }

func (s size) otsdb() otsdbTables {
	base := fmt.Sprintf("bench_otsdb_e%d_d%d", s.entities, s.days)
	return otsdbTables{data: base, uid: base + "_uid", tree: base + "_tree", meta: base + "_meta", loaded: base + "_loaded"}
}

// readingsAt are the raw readings behind entity e's window at minute m, as OpenTSDB is given them:
// the window's count of readings, spread evenly over the minute, the first at the window's
// maximum and the others at its base temperature. (The abacus table's sums are count x base, so
// the two stores agree on counts and maxima, not on sums: the comparison is of the work, and
// each side's answers are checked against its own values.)
func readingsAt(s size, e, m int) (ts []int64, v []float64) {
	w := windowAt(e, m)
	base := w.sum / float64(w.count)
	start := s.start() + int64(m)*60_000
	for i := range int(w.count) {
		ts = append(ts, start+int64(i)*60_000/w.count)
		if i == 0 {
			v = append(v, w.max)
		} else {
			v = append(v, base)
		}
	}
	return ts, v
}

func readingSum(s size, e, m int) float64 {
	_, v := readingsAt(s, e, m)
	var sum float64
	for _, x := range v {
		sum += x
	}
	return sum
}

// tsd is a running TSD process.
type tsd struct {
	cmd  *exec.Cmd
	url  string
	logs string
}

// startTSD creates the TSD's tables when they are missing and starts OpenTSDB 2.4.1 from the
// classpath run.sh resolved from Maven Central, with the HBase at zk.
func startTSD(ctx context.Context, b *testing.B, c *hbase.Client, zk string, t otsdbTables) *tsd {
	cp := os.Getenv("ABACUS_OPENTSDB_CLASSPATH")
	if cp == "" {
		b.Skip("ABACUS_OPENTSDB_CLASSPATH is not set: bench/query/opentsdb/run.sh resolves OpenTSDB's jars and sets it")
	}
	families := map[string][]string{t.data: {"t"}, t.uid: {"id", "name"}, t.tree: {"t"}, t.meta: {"name"}}
	for _, name := range []string{t.data, t.uid, t.tree, t.meta} {
		if _, err := c.Admin().DescribeTable(ctx, name); err == nil {
			continue
		}
		spec := hbase.TableSpec{Name: name}
		for _, f := range families[name] {
			// As OpenTSDB's own create_table.sh: one version, no compression (the abacus table
			// has none either, so the storage figures compare like with like).
			spec.Families = append(spec.Families, hbase.FamilySpec{Name: f, Attributes: map[string]string{"VERSIONS": "1"}})
		}
		if err := c.Admin().CreateTable(ctx, spec); err != nil {
			b.Fatalf("create %s: %v", name, err)
		}
	}
	dir := b.TempDir()
	for _, d := range []string{"static", "cache"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			b.Fatal(err)
		}
	}
	conf := strings.Join([]string{
		fmt.Sprintf("tsd.network.port = %d", otsdbPort),
		"tsd.network.bind = 127.0.0.1",
		"tsd.http.staticroot = " + filepath.Join(dir, "static"),
		"tsd.http.cachedir = " + filepath.Join(dir, "cache"),
		"tsd.storage.hbase.zk_quorum = " + zk,
		"tsd.storage.hbase.zk_basedir = /hbase",
		"tsd.storage.hbase.data_table = " + t.data,
		"tsd.storage.hbase.uid_table = " + t.uid,
		"tsd.storage.hbase.tree_table = " + t.tree,
		"tsd.storage.hbase.meta_table = " + t.meta,
		"tsd.core.auto_create_metrics = true",
		// Grafana's tag_values asks /api/search/lookup, which reads the meta table: OpenTSDB
		// fills it only with TSUID tracking on (a meta cell put beside every data point).
		"tsd.core.meta.enable_tsuid_tracking = true",
		"tsd.http.request.enable_chunked = true",
		"tsd.http.request.max_chunk = 67108864",
		"tsd.http.query.allow_delete = false",
	}, "\n") + "\n"
	cf := filepath.Join(dir, "opentsdb.conf")
	if err := os.WriteFile(cf, []byte(conf), 0o644); err != nil {
		b.Fatal(err)
	}
	// OpenTSDB's jar ships a logback.xml at DEBUG for asynchbase, which logs every RPC's bytes:
	// that would be measured along with the queries.
	lb := filepath.Join(dir, "logback.xml")
	if err := os.WriteFile(lb, []byte(`<configuration><appender name="out" class="ch.qos.logback.core.ConsoleAppender">`+
		`<encoder><pattern>%d %level %logger{20} %msg%n</pattern></encoder></appender>`+
		`<root level="INFO"><appender-ref ref="out"/></root></configuration>`), 0o644); err != nil {
		b.Fatal(err)
	}
	logs := filepath.Join(dir, "tsd.log")
	lf, err := os.Create(logs)
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command("java", "-Xmx2g", "-Dlogback.configurationFile="+lb, "-cp", cp, "net.opentsdb.tools.TSDMain", "--config="+cf)
	cmd.Stdout, cmd.Stderr = lf, lf
	if err := cmd.Start(); err != nil {
		b.Fatalf("start the TSD: %v", err)
	}
	d := &tsd{cmd: cmd, url: fmt.Sprintf("http://127.0.0.1:%d", otsdbPort), logs: logs}
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(500 * time.Millisecond) {
		resp, err := http.Get(d.url + "/api/version")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return d
			}
		}
		if time.Now().After(deadline) || cmd.ProcessState != nil {
			d.stop()
			out, _ := os.ReadFile(logs)
			b.Fatalf("the TSD did not answer /api/version in 2 min: %v\n%s", err, tail(out, 4000))
		}
	}
}

func (d *tsd) stop() {
	_ = d.cmd.Process.Kill()
	_ = d.cmd.Wait()
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// loadTSD puts every reading of the dataset into the TSD through /api/put, unless a complete load
// of this size is there already (its marker table exists), and returns the points written.
func loadTSD(ctx context.Context, b *testing.B, c *hbase.Client, d *tsd, s size, t otsdbTables) int64 {
	if _, err := c.Admin().DescribeTable(ctx, t.loaded); err == nil {
		b.Logf("OpenTSDB tables %s are loaded already (%s exists)", t.data, t.loaded)
		return 0
	}
	type point struct {
		Metric    string            `json:"metric"`
		Timestamp int64             `json:"timestamp"`
		Value     float64           `json:"value"`
		Tags      map[string]string `json:"tags"`
	}
	var total atomic.Int64
	hc := &http.Client{Timeout: 5 * time.Minute}
	t0 := time.Now()
	g, gctx := errgroup.WithContext(ctx)
	// Two writers of 2,000 points: with more, the 1 GiB testenv HBase ran out of heap under the
	// TSD's puts (which include a meta cell per point and its own row compactions).
	g.SetLimit(2)
	for e := range s.entities {
		g.Go(func() error {
			tags := map[string]string{"entity": entityName(e), "region": devices.RegionOf(entityName(e))}
			var batch []point
			var resent atomic.Int64
			send := func() error {
				// sync: the TSD answers once HBase has the points. Without it, it answers when it
				// has queued them, and points it then failed to write were lost unnoticed (one
				// entity's last days, in a run on 2026-12-04). With it, it reports them failed
				// (a few per million here), and they are sent again, as a careful writer would.
				todo := batch
				for try := 0; len(todo) > 0; try++ {
					if try == 5 {
						return fmt.Errorf("put: %d points still failing after %d tries", len(todo), try)
					}
					body, _ := json.Marshal(todo)
					req, _ := http.NewRequestWithContext(gctx, http.MethodPost, d.url+"/api/put?details&sync&sync_timeout=120000", bytes.NewReader(body))
					resp, err := hc.Do(req)
					if err != nil {
						return err
					}
					out, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					var sum struct {
						Success, Failed int
						// Timeouts are points HBase did not confirm within the sync timeout
						// (1,000 entities' load, on two cores): listed in Errors too, and sent
						// again like the failed ones (a point written twice is the same cell).
						Timeouts int
						Errors   []struct {
							Datapoint struct {
								Metric    string
								Timestamp int64
								Value     json.RawMessage // the TSD echoes it as a string
								Tags      map[string]string
							}
						}
					}
					if err := json.Unmarshal(out, &sum); err != nil || (resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusBadRequest) ||
						sum.Success+sum.Failed+sum.Timeouts != len(todo) || len(sum.Errors) != sum.Failed+sum.Timeouts {
						return fmt.Errorf("put of %d points: status %d: %.300s", len(todo), resp.StatusCode, out)
					}
					total.Add(int64(sum.Success))
					todo = todo[:0:0]
					for _, e := range sum.Errors {
						p := e.Datapoint
						v, err := strconv.ParseFloat(strings.Trim(string(p.Value), `"`), 64)
						if err != nil {
							return fmt.Errorf("put: a failed point's value %s: %v", p.Value, err)
						}
						todo = append(todo, point{Metric: p.Metric, Timestamp: p.Timestamp, Value: v, Tags: p.Tags})
					}
					resent.Add(int64(len(todo)))
				}
				batch = batch[:0]
				return nil
			}
			defer func() {
				if n := resent.Load(); n > 0 {
					b.Logf("%s: %d points the TSD failed to write were sent again", entityName(e), n)
				}
			}()
			for m := range s.minutes() {
				ts, vs := readingsAt(s, e, m)
				for i := range ts {
					batch = append(batch, point{Metric: "temp", Timestamp: ts[i], Value: vs[i], Tags: tags})
				}
				if len(batch) >= 2000 {
					if err := send(); err != nil {
						return err
					}
				}
			}
			if len(batch) > 0 {
				return send()
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		b.Fatalf("load OpenTSDB: %v", err)
	}
	el := time.Since(t0)
	b.Logf("loaded %s: %d points in %s (%.0f points/s)", t.data, total.Load(), el.Round(time.Second), float64(total.Load())/el.Seconds())
	if err := c.Admin().CreateTable(ctx, hbase.TableSpec{Name: t.loaded, Families: []hbase.FamilySpec{{Name: "d"}}}); err != nil {
		b.Fatal(err)
	}
	return total.Load()
}

// tsdbQuery is an /api/query body as Grafana's OpenTSDB data source sends it, with any number of
// sub-queries, each a metric, aggregator, downsampler and filters.
func tsdbQuery(from, to time.Time, qs ...map[string]any) string {
	body, _ := json.Marshal(map[string]any{"start": from.UnixMilli(), "end": to.UnixMilli(), "queries": qs,
		"msResolution": false, "showQuery": true})
	return string(body)
}

func sub(aggregator, downsample string, filters ...map[string]any) map[string]any {
	q := map[string]any{"metric": "temp", "aggregator": aggregator, "downsample": downsample}
	if len(filters) > 0 {
		q["filters"] = filters
	}
	return q
}

// otsdbPanels are the abacus dashboard's OpenTSDB panels (panels) as they are asked of OpenTSDB
// itself: raw points downsampled at query time where abacus reads a set's windows. Each answer is
// checked against the loaded readings.
func (ex *expected) otsdbPanels(pick int) []panel {
	s := ex.s
	e := pick % s.entities
	ent := entityName(e)
	now := end
	ago := func(minutes int) time.Time { return now.Add(-time.Duration(minutes) * time.Minute) }
	lit := func(v string, group bool) map[string]any { return filter("literal_or", "entity", v, group) }
	var ps []panel
	post := func(name, body string, check func(code int, body []byte) error) {
		ps = append(ps, panel{name: name, method: http.MethodPost, path: "/api/query", body: body, check: check})
	}
	maxOf := func(x int) func(m int) float64 { return func(m int) float64 { return windowAt(x, m).max } }
	one := func(name string, span, width int, ds string, want func(m int) float64) {
		post(name, tsdbQuery(ago(span), now, sub("sum", ds, lit(ent, false))), func(code int, body []byte) error {
			ss, err := seriesOf(code, body, 1)
			if err != nil {
				return err
			}
			return ex.points(ss[0], span, width, 1e-9, want)
		})
	}
	one("tsdb 1 entity 1h (1m-avg)", 60, 1, "1m-max", maxOf(e))
	one("tsdb 1 entity 24h (1m-avg)", day, 1, "1m-max", maxOf(e))
	one("tsdb 1 entity 7d (10m-max)", s.minutes(), 10, "10m-max", func(m int) float64 { return maxOver(e, m, 10) })
	one("tsdb 1 entity 7d hourly set", s.minutes(), 60, "1h-sum", func(m int) float64 {
		var sum float64
		for i := range 60 {
			sum += readingSum(s, e, m+i)
		}
		return sum
	})
	post("tsdb 1 entity 24h quantiles", tsdbQuery(ago(day), now, sub("sum", "1m-p50", lit(ent, false)),
		sub("sum", "1m-p95", lit(ent, false)), sub("sum", "1m-p99", lit(ent, false))),
		func(code int, body []byte) error {
			ss, err := seriesOf(code, body, 3)
			if err != nil {
				return err
			}
			for _, sr := range ss {
				// One reading at the maximum and the rest at the base: every percentile lies
				// between the two; the point count is what is checked exactly.
				if err := ex.points(sr, day, 1, 1e9, func(int) float64 { return 0 }); err != nil {
					return err
				}
			}
			return nil
		})

	fifty, names := ex.fiftyOf(e)
	post("tsdb 50 entities 24h summed", tsdbQuery(ago(day), now, sub("sum", "1m-count", lit(strings.Join(names, "|"), false))),
		ex.countsOf(fifty))
	post("tsdb 50 entities 24h grouped", tsdbQuery(ago(day), now, sub("sum", "1m-max", lit(strings.Join(names, "|"), true))),
		ex.maximaOf(fifty, names))
	fleetCount := func(code int, body []byte) error {
		ss, err := seriesOf(code, body, 1)
		if err != nil {
			return err
		}
		return ex.points(ss[0], day, 1, 0, func(m int) float64 { return float64(ex.fleet.count[m-(s.minutes()-day)]) })
	}
	post("tsdb all entities 24h (wildcard)", tsdbQuery(ago(day), now, sub("sum", "1m-count", filter("wildcard", "entity", "*", false))), fleetCount)
	post("tsdb all entities 7d (wildcard, 1h-sum)", tsdbQuery(ago(s.minutes()), now, sub("sum", "1h-count", filter("wildcard", "entity", "*", false))),
		ex.weekCounts)
	post("tsdb fleet rollup 24h", tsdbQuery(ago(day), now, sub("sum", "1m-count")), fleetCount)
	post("tsdb region rollup 24h grouped", tsdbQuery(ago(day), now, sub("sum", "1m-sum", filter("wildcard", "region", "*", true))),
		func(code int, body []byte) error {
			ss, err := seriesOf(code, body, len(ex.regions))
			if err != nil {
				return err
			}
			for _, sr := range ss {
				region := sr.Tags["region"]
				if ex.regions[region] == nil {
					return fmt.Errorf("series tags %v", sr.Tags)
				}
				if err := ex.points(sr, day, 1, 1e-6, func(m int) float64 {
					var sum float64
					for x := range s.entities {
						if devices.RegionOf(entityName(x)) == region {
							sum += readingSum(s, x, m)
						}
					}
					return sum
				}); err != nil {
					return err
				}
			}
			return nil
		})
	return append(ps, lookupPanel("temp", min(s.entities, 1000)), ex.suggestPanel(e))
}

// BenchmarkOpenTSDB loads the dataset's readings into OpenTSDB 2.4.1 on the testenv HBase (once
// per size), then asks it the OpenTSDB panels of BenchmarkPanels from 1 and 16 concurrent
// dashboards, and prints the same table. Run by bench/query/opentsdb/run.sh, which resolves
// OpenTSDB's jars and measures both stores' bytes on disk.
func BenchmarkOpenTSDB(b *testing.B) {
	zk := gate.HBaseZooKeeper(b)
	ctx := context.Background()
	s := datasetSize()
	c, err := hbase.NewClient(ctx, hbase.Config{ZooKeeper: zk})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	t := s.otsdb()
	d := startTSD(ctx, b, c, zk, t)
	defer d.stop()
	if n := loadTSD(ctx, b, c, d, s, t); n > 0 {
		b.ReportMetric(float64(n), "points")
	}
	ex := newExpected(s)
	keep := panelFilter(b)
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: 5 * time.Minute}
	fetch := fetcher(ctx, hc, d.url)
	ask := asker(fetch)
	var names []string
	for _, p := range keep(ex.otsdbPanels(0)) {
		names = append(names, p.name)
		if _, err := ask(p); err != nil { // warm, as BenchmarkPanels
			out, _ := os.ReadFile(d.logs)
			b.Fatalf("%v\nTSD log:\n%s", err, tail(out, 3000))
		}
	}
	// OpenTSDB is measured, not tested: a wrong answer of its (a series cut short under load) is
	// counted and shown, where one of abacus's fails the run.
	lat, timeouts, wrong, err := measure(b, func(pick int) []panel { return keep(ex.otsdbPanels(pick)) }, fetch, true)
	if err != nil {
		b.Fatal(err)
	}
	// Flush both stores' tables to their files (a table's regions flush as they close), so that
	// run.sh measures bytes on disk rather than what sits in the memstore and the WAL.
	for _, name := range []string{t.data, t.meta, s.table()} {
		if _, err := c.Admin().DescribeTable(ctx, name); err != nil {
			continue // the abacus table of this size is not loaded: nothing to measure
		}
		if err := c.Admin().DisableTable(ctx, name); err != nil {
			b.Fatalf("disable %s (to flush it): %v", name, err)
		}
		if err := c.Admin().EnableTable(ctx, name); err != nil {
			b.Fatalf("enable %s: %v", name, err)
		}
	}
	fmt.Printf("\nOpenTSDB 2.4.1, tables %s: %d entities x %d days of raw readings; %d rounds per dashboard\n", t.data, s.entities, s.days, rounds())
	fmt.Printf("%-36s %9s %9s %9s %9s %s %s\n", "panel", "1:p50ms", "1:p99ms", "16:p50ms", "16:p99ms", "503s(1/16)", "wrong(1/16)")
	for _, n := range names {
		l1, l16 := lat[1][n], lat[16][n]
		fmt.Printf("%-36s %9.1f %9.1f %9.1f %9.1f %d/%d %d/%d\n", n, ms(percentile(l1, 0.5)), ms(percentile(l1, 0.99)), ms(percentile(l16, 0.5)), ms(percentile(l16, 0.99)),
			timeouts[1][n], timeouts[16][n], wrong[1][n], wrong[16][n])
	}
	fmt.Println()
	printRatios(b, names, resultsOf(lat))
}

// printRatios prints, when ABACUS_BENCH_RESULTS holds abacus's latencies of the same run
// (bench/query/opentsdb/run.sh), how many times faster abacus answered each panel: OpenTSDB's
// latency over abacus's, at p50 with 1 dashboard and at p99 with 16.
func printRatios(b *testing.B, names []string, tsdb results) {
	f := os.Getenv("ABACUS_BENCH_RESULTS")
	if f == "" {
		return
	}
	raw, err := os.ReadFile(f)
	if err != nil || len(raw) == 0 {
		b.Logf("no abacus latencies to compare with in %s (%v)", f, err)
		return
	}
	var ab results
	if err := json.Unmarshal(raw, &ab); err != nil {
		b.Fatalf("ABACUS_BENCH_RESULTS %s: %v", f, err)
	}
	fmt.Printf("abacus beside OpenTSDB, ms (ratio: OpenTSDB's latency over abacus's)\n")
	fmt.Printf("%-36s %9s %9s %7s %9s %9s %7s\n", "panel", "ab 1:p50", "ts 1:p50", "ratio", "ab 16:p99", "ts 16:p99", "ratio")
	for _, n := range names {
		a, ok := ab[n]
		if !ok {
			continue
		}
		t := tsdb[n]
		fmt.Printf("%-36s %9.1f %9.1f %6.1fx %9.1f %9.1f %6.1fx\n", n, a[0], t[0], t[0]/a[0], a[3], t[3], t[3]/a[3])
	}
	fmt.Println()
}
