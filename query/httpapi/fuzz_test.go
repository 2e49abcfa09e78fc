package httpapi

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/abacus-stream/abacus/query"
	"github.com/abacus-stream/abacus/query/internal/querytest"
)

// fuzzHandler is a query server over a few windows (querytest.Seed), through Secure as app serves
// it, with the default limits but a short request timeout.
func fuzzHandler(f *testing.F) http.Handler {
	st, table := querytest.CellStore(f)
	querytest.Seed(f, st, table, 4)
	srv := &Server{
		Topologies: []query.Served{{Name: "t", Sets: []query.ServedSet{{Name: "minute", Aggregates: []string{"count", "max", "p"}}}, Reader: newReader(f, st, table)}},
		Now:        func() time.Time { return t0.Add(2 * time.Hour) },
		Limits:     Limits{RequestTimeout: 5 * time.Second},
	}
	return srv.Secure(srv.HandlerWithDashboard())
}

// answerOK checks an answer to a hostile request: a client mistake is a 4xx, never a 5xx (the
// server failing) and never a panic; the body is JSON.
func answerOK(t *testing.T, req string, rec *httptest.ResponseRecorder) {
	t.Helper()
	if rec.Code >= 500 {
		t.Fatalf("%s: %d %s", req, rec.Code, rec.Body)
	}
	if ct := rec.Header().Get("Content-Type"); strings.HasPrefix(ct, "application/json") && !json.Valid(rec.Body.Bytes()) {
		t.Fatalf("%s: %d with a body that is not JSON: %q", req, rec.Code, rec.Body)
	}
}

// FuzzAPIParams sends arbitrary query strings to /api/v1/windows and /api/v1/entities.
func FuzzAPIParams(f *testing.F) {
	for _, s := range []string{"set=minute&entity=ab1,ab12&limit=2", "set=minute&entity=ab1&from=-1h&to=0&order=oldest&live=false",
		"topology=t&set=minute&entity=a&from=0&to=1", "set=minute&entity=" + strings.Repeat("e,", 120), "set=minute&limit=10000",
		"set=minute&entity=ab1&limit=99999999999999999999", "set=%zz&entity=ab1", "set=minute&entity=ab1&from=2026-11-30T12:00:00Z"} {
		f.Add(s)
	}
	h := fuzzHandler(f) // one topology: topology may be left out
	f.Fuzz(func(t *testing.T, rawQuery string) {
		for _, path := range []string{"/api/v1/windows", "/api/v1/entities"} {
			req := httptest.NewRequest("GET", "http://abacus"+path, nil)
			req.URL.RawQuery = rawQuery
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			answerOK(t, path+"?"+rawQuery, rec)
		}
	})
}
