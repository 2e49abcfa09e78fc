package opentsdb

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/abacus-stream/abacus/query"
	"github.com/abacus-stream/abacus/query/internal/querytest"
)

// FuzzTSDBTime: the OpenTSDB API's time parameters never panic, and what tsdbTime accepts as
// relative lies before now. Its seeds and corpus are FuzzParseTime's of package query, whose
// inputs both APIs meet.
func FuzzTSDBTime(f *testing.F) {
	for _, s := range []string{"", "-6h", "1700000000000", "2026-11-30T12:00:00Z", "2026-11-30T12:00:00.5+02:00", "1h-ago",
		"9223372036854775807y-ago", "1364410924.250", "2026/11/30-12:00:00", "2026/11/30 12:00", "now", "-9223372036854775808ns", "1e9"} {
		f.Add(s)
	}
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, v string) {
		tt, err := tsdbTime(v, now, time.UTC)
		if err == nil && strings.HasSuffix(strings.TrimSpace(v), "-ago") && tt.After(now) {
			t.Fatalf("tsdbTime(%q) = %v, after now", v, tt)
		}
	})
}

// fuzzStore is an embedded store with a few windows: querytest.SeedTSDB's.
func fuzzStore(f *testing.F) (querytest.Store, string) {
	st, table := querytest.CellStore(f)
	querytest.SeedTSDB(f, st, table, 4)
	return st, table
}

// fuzzTSDBHandler is the OpenTSDB API over fuzzStore, with the default limits but a short
// timeout.
func fuzzTSDBHandler(f *testing.F) http.Handler {
	st, table := fuzzStore(f)
	return tsdbMux(&API{
		Topologies: []query.Served{{Name: "devices", Sets: []query.ServedSet{{Name: "minute", Aggregates: []string{"count", "mean", "temp_q"}}, {Name: "hour", Aggregates: []string{"count"}}},
			Reader: newReader(f, st, table)}},
		Now:    func() time.Time { return t0.Add(2 * time.Hour) },
		Limits: Limits{Timeout: 5 * time.Second},
	})
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

// FuzzOpenTSDBParams sends arbitrary query strings (GET) and bodies (POST) to the OpenTSDB
// endpoints Grafana calls.
func FuzzOpenTSDBParams(f *testing.F) {
	for _, s := range []struct{ q, body string }{
		{"start=1h-ago&m=sum:1m-avg:devices.minute.count{entity=*}", ""},
		{"start=2026/11/30-10:00:00&end=2026/11/30-11:00&m=avg:5m-max-zero:rate{counter,100,0}:devices.minute.mean{entity=literal_or(device-001|device-002)}&arrays", ""},
		{"m=devices.minute.temp_q{entity=device-001,quantile=0.5}", ""},
		{"", `{"start":"1h-ago","queries":[{"metric":"devices.minute.count","aggregator":"sum","downsample":"0all-sum","filters":[{"type":"wildcard","tagk":"entity","filter":"dev*","groupBy":true}]}]}`},
		{"", `{"start":1,"end":99999999999999,"queries":[{"metric":"devices.hour.count","aggregator":"p99","tags":{"entity":"regexp(^d.*)"},"rateOptions":{"counter":true}}],"showQuery":true,"timezone":"Europe/Berlin"}`},
		{"type=tagv&q=dev&max=3", ""},
		{"m=devices.minute.count{entity=device-0*}&limit=2", `{"m":"*"}`},
		{"start=9223372036854775807y-ago&m=sum:devices.minute.count", `[1,2]`},
	} {
		f.Add(s.q, []byte(s.body))
	}
	h := fuzzTSDBHandler(f)
	f.Fuzz(func(t *testing.T, rawQuery string, body []byte) {
		for _, path := range []string{"/api/query", "/api/search/lookup", "/api/suggest"} {
			get := httptest.NewRequest("GET", "http://abacus"+path, nil)
			get.URL.RawQuery = rawQuery
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, get)
			answerOK(t, "GET "+path+"?"+rawQuery, rec)

			post := httptest.NewRequest("POST", "http://abacus"+path, bytes.NewReader(body))
			post.URL.RawQuery = rawQuery
			rec = httptest.NewRecorder()
			h.ServeHTTP(rec, post)
			answerOK(t, "POST "+path+"?"+rawQuery+" "+string(body), rec)
		}
	})
}
