package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"html"
	"image"
	"image/png"
	"io"
	"io/fs"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/abacus-stream/abacus/query"
	"github.com/abacus-stream/abacus/query/internal/querytest"
	"github.com/abacus-stream/abacus/store"
	"github.com/abacus-stream/abacus/totals"
)

// dashboardEntities are seeded by seedRecent; the page charts them all by default (it picks the
// first five entities of the set when the URL names none).
var dashboardEntities = []string{"store-berlin", "store-lisbon", "store-oslo"}

// seedRecent writes 45 minute windows ending at the current minute for each dashboard entity, so
// that the page's default range (the last hour) shows them: the two newest are still open, and
// store-oslo has no windows 20 to 24 minutes ago (a gap). It returns a live window for store-berlin
// for the current minute, to be served as the processors' open state.
func seedRecent(t *testing.T, st store.Writer, table string, buckets int) fakeLive {
	t.Helper()
	now := time.Now().Truncate(time.Minute)
	var recs []totals.Record
	values := func(k int64, phase float64) []totals.Value {
		x := float64(k)
		count := int64(60 + 35*math.Sin(x/6+phase) + float64((k*7)%11))
		return []totals.Value{
			{Name: "count", Kind: totals.KindInt, Int: count},
			{Name: "max", Kind: totals.KindFloat, Float: float64(count)/3 + 0.25},
			{Name: "p", Kind: totals.KindQuantiles, Quantiles: []totals.Quantile{
				{Q: 0.5, Value: 20 + 5*math.Cos(x/4+phase)}, {Q: 0.99, Value: 80 + 30*math.Sin(x/5+phase)}}},
		}
	}
	for n, e := range dashboardEntities {
		for k := int64(45); k >= 1; k-- {
			if e == "store-oslo" && k >= 20 && k <= 24 {
				continue
			}
			start := now.Add(-time.Duration(k) * time.Minute).UnixMilli()
			recs = append(recs, totals.Record{Topology: "t", Set: "minute", Entity: e, Start: start, End: start + minute,
				Final: k > 2, Revision: uint64(100 - k), Values: values(k, float64(n)*1.7)})
		}
	}
	querytest.WriteTotals(t, st, table, buckets, recs)
	live := map[string]totals.Value{}
	for _, v := range values(0, 0) {
		live[v.Name] = v
	}
	return fakeLive{"minute/store-berlin": {{Entity: "store-berlin", Set: "minute", Start: now, End: now.Add(time.Minute),
		Revision: 7, Values: live}}}
}

// dashboardServer serves the API and the dashboard over the embedded cell store.
func dashboardServer(t *testing.T) *httptest.Server {
	t.Helper()
	st, table := querytest.CellStore(t)
	live := seedRecent(t, st, table, 4)
	srv := &Server{Topologies: []query.Served{{Name: "t",
		Sets:   []query.ServedSet{{Name: "minute", Window: "tumbling 1m0s", Aggregates: []string{"count", "max", "p"}}},
		Reader: newReader(t, st, table).WithLive(live)}}}
	ts := httptest.NewServer(srv.HandlerWithDashboard())
	t.Cleanup(ts.Close)
	return ts
}

func TestDashboardAssets(t *testing.T) {
	ts := dashboardServer(t)
	get := func(path string, hdr ...string) (*http.Response, string) {
		req, _ := http.NewRequest(http.MethodGet, ts.URL+path, nil)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	resp, body := get("/")
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") ||
		!strings.Contains(body, `id="plotted"`) || !strings.Contains(resp.Header.Get("Content-Security-Policy"), "script-src 'self'") {
		t.Fatalf("GET /: %d %v", resp.StatusCode, resp.Header)
	}
	// The page must not load anything from another origin: everything is embedded.
	if m := regexp.MustCompile(`(?:src|href)="(?:https?:)?//`).FindString(body); m != "" {
		t.Fatalf("index.html loads from another origin: %s", m)
	}
	for path, ctype := range map[string]string{
		"/app.js": "text/javascript", "/app.css": "text/css",
		"/vendor/uplot/uPlot.iife.min.js": "text/javascript", "/vendor/uplot/uPlot.min.css": "text/css",
		"/vendor/uplot/LICENSE": "text/plain",
	} {
		resp, body := get(path)
		if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), ctype) || len(body) == 0 {
			t.Fatalf("GET %s: %d %q", path, resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		if resp, _ := get(path, "If-None-Match", resp.Header.Get("ETag")); resp.StatusCode != http.StatusNotModified {
			t.Fatalf("GET %s with its ETag: %d, want 304", path, resp.StatusCode)
		}
	}
	for _, path := range []string{"/vendor/update-uplot.sh", "/README.md", "/nope.js", "/../dashboard.go"} {
		if resp, _ := get(path); resp.StatusCode != http.StatusNotFound {
			t.Fatalf("GET %s: %d, want 404", path, resp.StatusCode)
		}
	}
	// The API still answers beside the page.
	if resp, body := get("/api/v1/topologies"); resp.StatusCode != 200 || !strings.Contains(body, `"minute"`) {
		t.Fatalf("API under the dashboard: %d %s", resp.StatusCode, body)
	}
}

// TestDashboardModules follows the page's scripts from index.html as a browser would, without one:
// uPlot is a classic script ahead of the modules (they read it as a global), every module that app.js
// imports, directly or not, is served as JavaScript (a browser refuses a module that is not), and
// every module in web/ is imported, so none is left behind unused.
func TestDashboardModules(t *testing.T) {
	ts := dashboardServer(t)
	get := func(p string) (*http.Response, string) {
		resp, err := http.Get(ts.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	_, index := get("/")
	var scripts []string
	for _, m := range regexp.MustCompile(`<script([^>]*)>`).FindAllStringSubmatch(index, -1) {
		if !strings.Contains(m[1], `type="application/json"`) {
			scripts = append(scripts, strings.TrimSpace(m[1]))
		}
	}
	if want := []string{`src="vendor/uplot/uPlot.iife.min.js"`, `type="module" src="app.js"`}; strings.Join(scripts, "|") != strings.Join(want, "|") {
		t.Fatalf("index.html loads scripts %q, want %q", scripts, want)
	}

	// Imports open a line (so that none in a comment counts) and name a relative path: a bare
	// specifier would need an import map.
	importRe := regexp.MustCompile(`(?ms)^import\s[^;]*?\sfrom\s*'([^']*)';`)
	seen := map[string]bool{"app.js": true}
	for queue := []string{"app.js"}; len(queue) > 0; queue = queue[1:] {
		name := queue[0]
		resp, body := get("/" + name)
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/javascript; charset=utf-8" {
			t.Fatalf("GET /%s: %d %q", name, resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		for _, m := range importRe.FindAllStringSubmatch(body, -1) {
			if !strings.HasPrefix(m[1], "./") || !strings.HasSuffix(m[1], ".js") {
				t.Fatalf("%s imports %q: want a relative path to a .js file", name, m[1])
			}
			if dep := path.Join(path.Dir(name), m[1]); !seen[dep] {
				seen[dep] = true
				queue = append(queue, dep)
			}
		}
	}
	err := fs.WalkDir(webFiles, "web", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".js") || strings.HasPrefix(p, "web/vendor/") {
			return err
		}
		if name := strings.TrimPrefix(p, "web/"); !seen[name] {
			t.Errorf("%s is embedded but no module imports it", p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) < 2 {
		t.Fatalf("app.js imports nothing: %v", seen)
	}
}

const chromiumPath = "/usr/bin/chromium"

// headless runs Debian's Chromium headless on a fresh profile with the given extra arguments and
// returns its standard output. It skips the test when Chromium is not installed, unless
// ABACUS_REQUIRE_SERVICES=1 (testenv/run-tests.sh installs it), where that is a failure.
func headless(t *testing.T, args ...string) []byte {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		if os.Getenv("ABACUS_REQUIRE_SERVICES") == "1" {
			t.Fatalf("%s is missing and ABACUS_REQUIRE_SERVICES=1: install Debian's chromium (apt-get install chromium); testenv/run-tests.sh does when it runs as root", chromiumPath)
		}
		t.Skipf("%s is not installed: the dashboard's browser test needs Debian's chromium package (apt-get install chromium)", chromiumPath)
	}
	home := t.TempDir() // a fresh profile and home: nothing from a developer's browser, nothing left behind
	base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-extensions",
		"--user-data-dir=" + filepath.Join(home, "profile"), "--window-size=1280,900", "--force-device-scale-factor=1",
		"--hide-scrollbars", "--virtual-time-budget=8000"}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, chromiumPath, append(base, args...)...)
	cmd.Env = append(os.Environ(), "HOME="+home, "XDG_CONFIG_HOME="+home, "XDG_CACHE_HOME="+home, "TZ=UTC")
	cmd.WaitDelay = 10 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium %v: %v\n%s", args, err, stderr.String())
	}
	return stdout.Bytes()
}

type plottedPoint struct {
	Start int64   `json:"start"`
	Value float64 `json:"value"`
	Final bool    `json:"final"`
	Live  bool    `json:"live"`
}

type plotted struct {
	Topology  string                    `json:"topology"`
	Set       string                    `json:"set"`
	Aggregate string                    `json:"aggregate"`
	Quantile  *string                   `json:"quantile"`
	Entities  []string                  `json:"entities"`
	Series    map[string][]plottedPoint `json:"series"`
}

var (
	plottedRe   = regexp.MustCompile(`(?s)<script type="application/json" id="plotted">(.*?)</script>`)
	stateRe     = regexp.MustCompile(`<body data-state="(\w+)"`)
	drawnRe     = regexp.MustCompile(`id="chart" data-points-drawn="(\d+)"`)
	errorRe     = regexp.MustCompile(`(?s)<div class="alert" id="error" role="alert"( hidden="")?>(.*?)<button`)
	stripTagsRe = regexp.MustCompile(`<[^>]*>`)
	tbodyRe     = regexp.MustCompile(`(?s)<table id="latest">.*?<tbody>(.*?)</tbody>`)
)

// page is what the test reads from the DOM that Chromium dumps after the page settled.
type page struct {
	state, errText string
	plotted        *plotted
	drawn          int
	rows           int    // rows of the latest values table
	firstRow       string // its first row's HTML
}

func loadPage(t *testing.T, pageURL string) page {
	t.Helper()
	dom := string(headless(t, "--dump-dom", pageURL))
	var p page
	if m := stateRe.FindStringSubmatch(dom); m != nil {
		p.state = m[1]
	}
	if m := errorRe.FindStringSubmatch(dom); m != nil && m[1] == "" {
		p.errText = strings.Join(strings.Fields(html.UnescapeString(stripTagsRe.ReplaceAllString(m[2], " "))), " ")
	}
	m := plottedRe.FindStringSubmatch(dom)
	if m == nil {
		t.Fatalf("no plotted data in the page's DOM:\n%.3000s", dom)
	}
	if err := json.Unmarshal([]byte(html.UnescapeString(m[1])), &p.plotted); err != nil {
		t.Fatalf("plotted data %q: %v", m[1], err)
	}
	if m := drawnRe.FindStringSubmatch(dom); m != nil {
		fmt.Sscan(m[1], &p.drawn)
	}
	if m := tbodyRe.FindStringSubmatch(dom); m != nil {
		rows := strings.Split(m[1], "<tr>")[1:]
		p.rows = len(rows)
		if len(rows) > 0 {
			p.firstRow = rows[0]
		}
	}
	return p
}

// apiPoints asks the API for the windows the page should chart and turns them into points: the
// aggregate's value (or the given quantile of it) per window, oldest first.
func apiPoints(t *testing.T, base string, entities []string, agg, quantile, from string) map[string][]plottedPoint {
	t.Helper()
	q := url.Values{"topology": {"t"}, "set": {"minute"}, "entity": {strings.Join(entities, ",")}, "from": {from}, "limit": {"5000"}}
	resp, err := http.Get(base + "/api/v1/windows?" + q.Encode())
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Entities map[string][]struct {
			Start  int64                      `json:"start"`
			Final  bool                       `json:"final"`
			Live   bool                       `json:"live"`
			Values map[string]json.RawMessage `json:"values"`
		} `json:"entities"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || resp.StatusCode != 200 {
		t.Fatalf("API windows: %d %v", resp.StatusCode, err)
	}
	out := map[string][]plottedPoint{}
	for _, e := range entities {
		pts := []plottedPoint{}
		ws := body.Entities[e]
		for i := len(ws) - 1; i >= 0; i-- { // newest first from the API; the chart runs oldest first
			w := ws[i]
			var v float64
			if quantile != "" {
				var qs map[string]float64
				if err := json.Unmarshal(w.Values[agg], &qs); err != nil {
					t.Fatalf("%s of %s: %v", agg, e, err)
				}
				v = qs[quantile]
			} else if err := json.Unmarshal(w.Values[agg], &v); err != nil {
				t.Fatalf("%s of %s: %v", agg, e, err)
			}
			pts = append(pts, plottedPoint{Start: w.Start, Value: v, Final: w.Final, Live: w.Live})
		}
		out[e] = pts
	}
	return out
}

func comparePlotted(t *testing.T, got *plotted, want map[string][]plottedPoint) {
	t.Helper()
	if got == nil {
		t.Fatal("the page plotted nothing")
	}
	if len(got.Series) != len(want) {
		t.Fatalf("page plots %d series (%v), the API returned %d entities", len(got.Series), got.Entities, len(want))
	}
	for e, w := range want {
		g, ok := got.Series[e]
		if !ok {
			t.Fatalf("page plots no series for %s", e)
		}
		if len(g) != len(w) {
			t.Fatalf("%s: page plots %d points, the API returned %d", e, len(g), len(w))
		}
		for i := range w {
			if g[i] != w[i] {
				t.Fatalf("%s point %d: page plots %+v, the API returned %+v", e, i, g[i], w[i])
			}
		}
	}
}

// TestDashboardInChromium opens the dashboard in headless Chromium and checks that the chart holds
// exactly the points the API returns, for the default view and for a quantile, that an error from
// the API reaches the user in words, and takes a screenshot.
func TestDashboardInChromium(t *testing.T) {
	ts := dashboardServer(t)

	// Default view: the first topology, set and aggregate, the set's entities, the last hour.
	p := loadPage(t, ts.URL+"/")
	if p.state != "ready" || p.errText != "" {
		t.Fatalf("default view: state %q, error %q", p.state, p.errText)
	}
	if p.plotted.Aggregate != "count" || p.plotted.Quantile != nil || strings.Join(p.plotted.Entities, ",") != strings.Join(dashboardEntities, ",") {
		t.Fatalf("default view charts %s of %v", p.plotted.Aggregate, p.plotted.Entities)
	}
	want := apiPoints(t, ts.URL, dashboardEntities, "count", "", "-1h")
	comparePlotted(t, p.plotted, want)
	total, open, live := 0, 0, 0
	for _, pts := range want {
		total += len(pts)
		for _, pt := range pts {
			if pt.Live {
				live++
			} else if !pt.Final {
				open++
			}
		}
	}
	// 45 windows each, a gap of 5 for store-oslo, store-berlin's live window: all seeded windows are in view.
	if total != 3*45-5+1 || open != 3*2 || live != 1 {
		t.Fatalf("API returned %d points (%d open, %d live): the seeded windows are not all in the default range", total, open, live)
	}
	if p.drawn != total {
		t.Fatalf("chart drew %d points in view, want %d", p.drawn, total)
	}
	// The table of latest values: a row per entity, store-berlin's newest window live.
	if p.rows != len(dashboardEntities) || !strings.Contains(p.firstRow, "store-berlin") || !strings.Contains(p.firstRow, `badge live`) {
		t.Fatalf("latest values table: %d rows, first %q", p.rows, p.firstRow)
	}

	// A quantile of one entity, chosen through the URL.
	p = loadPage(t, ts.URL+"/?agg=p&q=0.99&entity=store-lisbon&range=6h&live=0")
	if p.state != "ready" || p.plotted.Quantile == nil || *p.plotted.Quantile != "0.99" {
		t.Fatalf("quantile view: state %q, plotted %+v", p.state, p.plotted)
	}
	comparePlotted(t, p.plotted, apiPoints(t, ts.URL, []string{"store-lisbon"}, "p", "0.99", "-6h"))

	// The API refuses the range: the page says so, naming what was wrong.
	p = loadPage(t, ts.URL+"/?entity=store-berlin&from=yesterday")
	if p.state != "error" || !strings.Contains(p.errText, "start of the time range") || !strings.Contains(p.errText, "yesterday") {
		t.Fatalf("bad range: state %q, error shown %q", p.state, p.errText)
	}

	// Screenshot of the default view.
	dir := os.Getenv("ABACUS_TEST_ARTIFACTS")
	if dir == "" {
		dir = t.TempDir()
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	shot := filepath.Join(dir, "dashboard.png")
	_ = os.Remove(shot)
	headless(t, "--screenshot="+shot, ts.URL+"/")
	t.Logf("dashboard screenshot: %s (set ABACUS_TEST_ARTIFACTS to keep it)", shot)
	checkScreenshot(t, shot)
}

// checkScreenshot asserts that the screenshot is a full-size PNG with a drawn chart in it: many
// colours, and lines in the first three series colours (format.js's palette), not only their swatches.
func checkScreenshot(t *testing.T, file string) {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatalf("no screenshot: %v", err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("screenshot is not a PNG: %v", err)
	}
	if b := img.Bounds(); b.Dx() != 1280 || b.Dy() != 900 {
		t.Fatalf("screenshot is %v, want 1280x900", b)
	}
	colours := map[uint32]bool{}
	series := [][3]int{{0x25, 0x63, 0xeb}, {0xe8, 0x59, 0x0c}, {0x0e, 0x9f, 0x6e}}
	near := make([]int, len(series))
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl := pixelRGB(img, x, y)
			colours[uint32(r)<<16|uint32(g)<<8|uint32(bl)] = true
			for i, c := range series {
				if absInt(r-c[0]) <= 12 && absInt(g-c[1]) <= 12 && absInt(bl-c[2]) <= 12 {
					near[i]++
				}
			}
		}
	}
	if len(colours) < 100 {
		t.Fatalf("screenshot has %d colours: nothing much drawn", len(colours))
	}
	for i, n := range near {
		if n < 300 {
			t.Fatalf("screenshot has %d pixels of series %d's colour: its line is not drawn", n, i)
		}
	}
}

func pixelRGB(img image.Image, x, y int) (int, int, int) {
	r, g, b, _ := img.At(x, y).RGBA()
	return int(r >> 8), int(g >> 8), int(b >> 8)
}

func absInt(v int) int {
	if v < 0 {
		return -v
	}
	return v
}
