package sinks

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/abacus-stream/abacus/hbase"
	"github.com/abacus-stream/abacus/internal/chaos/stream"
	"github.com/abacus-stream/abacus/internal/testenv"
	"github.com/abacus-stream/abacus/query"
	"github.com/abacus-stream/abacus/query/httpapi"
	"github.com/abacus-stream/abacus/store/hbasestore"
)

// queryTimeout is the query server's request timeout in the watch: a read stuck on a dead or
// paused region server must come back as a 503 within it (and a little slack).
const queryTimeout = 10 * time.Second

// queryWatch asks the query API, over HTTP and through a client of its own (as a query server
// process has), for windows of the pipeline's aggregate table again and again while a test breaks
// HBase. Each answer is either a 200 that holds every final window an earlier answer held, with the
// same values (finals never change, so a window missing is a partial answer presented as whole),
// or a 503 within the timeout; anything else is an error.
type queryWatch struct {
	t    *testing.T
	srv  *httptest.Server
	stop chan struct{}
	done chan struct{}

	mu          sync.Mutex
	finals      map[string]string // "set/key/start" -> the values of a final window, as JSON
	ok, refused int               // 200s, 503s
	slowest     time.Duration
	problems    []string
}

// watchQueries starts a queryWatch on p's aggregate table.
func watchQueries(t *testing.T, p *pipeline) *queryWatch {
	t.Helper()
	hc, err := hbase.NewClient(setupCtx(t), testenv.HBaseConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hc.Close() })
	st, err := hbasestore.New(hc, hbasestore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := query.NewReader(setupCtx(t), st, p.aggTable, "d")
	if err != nil {
		t.Fatal(err)
	}
	var sets []query.ServedSet
	for _, s := range p.topo.Sets() {
		sets = append(sets, query.ServedSet{Name: s.Name, Window: s.Window.String(), Aggregates: s.Aggregations,
			Rollup: s.Rollup, Dimension: s.Dimension})
	}
	srv := &httpapi.Server{Topologies: []query.Served{{Name: p.topo.Name(), Sets: sets, Reader: r}},
		Limits: httpapi.Limits{RequestTimeout: queryTimeout}, Logger: testLogger(t)}
	w := &queryWatch{t: t, srv: httptest.NewServer(srv.Handler()), stop: make(chan struct{}), done: make(chan struct{}),
		finals: map[string]string{}}
	t.Cleanup(w.srv.Close)
	go w.run()
	return w
}

func (w *queryWatch) run() {
	defer close(w.done)
	from := strconv.FormatInt(time.Now().Add(-4*24*time.Hour).UnixMilli(), 10)
	var entities []string
	for i := range 10 {
		entities = append(entities, fmt.Sprintf("ent-%03d", i*17))
	}
	asks := []url.Values{
		{"set": {stream.SetTumble}, "entity": entities, "from": {from}},
		{"set": {stream.SetGlobal}, "from": {from}},
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-w.stop:
			return
		case <-tick.C:
		}
		w.ask(asks[i%len(asks)])
	}
}

// ask sends one request and checks its answer.
func (w *queryWatch) ask(q url.Values) {
	start := time.Now()
	resp, err := http.Get(w.srv.URL + httpapi.APIPrefix + "/windows?" + q.Encode())
	took := time.Since(start)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.slowest = max(w.slowest, took)
	if err != nil {
		w.problem("request %v: %v", q, err)
		return
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if took > queryTimeout+3*time.Second {
		w.problem("%s answered %d after %v, past the %v timeout", q.Get("set"), resp.StatusCode, took, queryTimeout)
	}
	switch resp.StatusCode {
	case http.StatusServiceUnavailable:
		w.refused++
		if !bytes.Contains(body, []byte(`"error"`)) {
			w.problem("503 without an error message: %s", body)
		}
		return
	case http.StatusOK:
	default:
		w.problem("%s answered %d: %s", q.Get("set"), resp.StatusCode, body)
		return
	}
	var ans struct {
		Truncated bool `json:"truncated"`
		Entities  map[string][]struct {
			Start  int64           `json:"start"`
			Final  bool            `json:"final"`
			Values json.RawMessage `json:"values"`
		} `json:"entities"`
	}
	if err := json.Unmarshal(body, &ans); err != nil {
		w.problem("undecodable 200: %v", err)
		return
	}
	if ans.Truncated {
		w.problem("%s answer truncated: the watch asks for less than a page", q.Get("set"))
	}
	w.ok++
	set := q.Get("set")
	held := map[string]bool{}
	for key, ws := range ans.Entities {
		for _, win := range ws {
			k := fmt.Sprintf("%s/%s/%d", set, key, win.Start)
			held[k] = true
			if !win.Final {
				continue
			}
			if was, ok := w.finals[k]; ok && was != string(win.Values) {
				w.problem("final window %s changed from %s to %s", k, was, win.Values)
			}
			w.finals[k] = string(win.Values)
		}
	}
	for k := range w.finals {
		if len(k) > len(set) && k[:len(set)+1] == set+"/" && !held[k] {
			w.problem("final window %s, in an earlier answer, missing from a 200 answer", k)
		}
	}
}

// problem records a failed check (w.mu held); the first few are kept.
func (w *queryWatch) problem(format string, args ...any) {
	if len(w.problems) < 20 {
		w.problems = append(w.problems, fmt.Sprintf(format, args...))
	}
}

// finish stops the watch and fails the test on any bad answer, or if none was whole.
func (w *queryWatch) finish() {
	w.t.Helper()
	close(w.stop)
	<-w.done
	w.ask(url.Values{"set": {stream.SetGlobal}, "from": {strconv.FormatInt(time.Now().Add(-4*24*time.Hour).UnixMilli(), 10)}})
	w.mu.Lock()
	defer w.mu.Unlock()
	w.t.Logf("queries during the test: %d answered whole, %d refused with 503, slowest %v, %d final windows followed",
		w.ok, w.refused, w.slowest.Round(time.Millisecond), len(w.finals))
	for _, p := range w.problems {
		w.t.Errorf("query API: %s", p)
	}
	if w.ok == 0 {
		w.t.Error("the query API never answered whole")
	}
}
