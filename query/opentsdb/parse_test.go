package opentsdb

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"
)

func TestTSDBTimeForms(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	cet, _ := time.LoadLocation("Europe/Berlin")
	for in, want := range map[string]time.Time{
		"1h-ago":               now.Add(-time.Hour),
		"90s-ago":              now.Add(-90 * time.Second),
		"500ms-ago":            now.Add(-500 * time.Millisecond),
		"2w-ago":               now.Add(-14 * 24 * time.Hour),
		"1n-ago":               now.Add(-30 * 24 * time.Hour),
		"1y-ago":               now.Add(-365 * 24 * time.Hour),
		"now":                  now,
		"1364410924":           time.Unix(1364410924, 0),
		"1364410924250":        time.UnixMilli(1364410924250),
		"1364410924.25":        time.UnixMilli(1364410924250),
		"2026/11/30-10:00:00":  time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC),
		"2026/11/30 10:30":     time.Date(2026, 11, 30, 10, 30, 0, 0, time.UTC),
		"2026/11/30":           time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC),
		"2026-11-30T10:00:00Z": time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC),
	} {
		got, err := tsdbTime(in, now, time.UTC)
		if err != nil || !got.Equal(want) {
			t.Errorf("%s: %v %v, want %v", in, got, err, want)
		}
	}
	if got, _ := tsdbTime("2026/11/30-10:00", now, cet); !got.Equal(time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)) {
		t.Errorf("formatted time in Europe/Berlin: %v", got)
	}
	for _, bad := range []string{"", "1h", "-1h", "yesterday", "2026/13/01", "1x-ago"} {
		if _, err := tsdbTime(bad, now, time.UTC); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestDownsampleAndRate(t *testing.T) {
	for in, want := range map[string]string{
		"1m-avg": "60000 avg none", "5m-sum-zero": "300000 sum zero", "500ms-max-nan": "500 max nan",
		"0all-count": "0 count none", "2h-p95-null": "7200000 p95 null", "1d-min": "86400000 min none", "30s-": "30000 avg none",
	} {
		ds, err := parseDownsample(in)
		if err != nil || fmt.Sprintf("%d %s %s", ds.interval, ds.agg, ds.fill) != want {
			t.Errorf("%s: %+v %v, want %s", in, ds, err, want)
		}
	}
	for _, bad := range []string{"1m", "m-avg", "1m-none", "1m-avg-linear", "1x-avg", "1dc-sum", "0m-avg"} {
		if _, err := parseDownsample(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	pts := []point{{0, 1}, {1000, 2}, {5000, 4}, {9000, 8}}
	ds, _ := parseDownsample("2s-sum-null")
	got := downsample(pts, ds, 0, 10_000)
	var b strings.Builder
	for _, p := range got {
		fmt.Fprintf(&b, "%d:%v ", p.t, p.v)
	}
	if b.String() != "0:3 2000:NaN 4000:4 6000:NaN 8000:8 10000:NaN " {
		t.Fatalf("2s-sum-null: %s", b.String())
	}
	ds, _ = parseDownsample("0all-max")
	if got := downsample(pts, ds, -5, 10_000); len(got) != 1 || got[0] != (point{-5, 8}) {
		t.Fatalf("0all-max: %v", got)
	}
	// Counter rate: a reset rolls over at counterMax, or is dropped.
	ctr := []point{{0, 10}, {1000, 30}, {2000, 5}}
	max100 := 100.0
	if got := rate(ctr, rateOptions{Counter: true, CounterMax: &max100}); len(got) != 2 || got[0].v != 20 || got[1].v != 75 {
		t.Fatalf("counter rate: %v", got)
	}
	if got := rate(ctr, rateOptions{Counter: true, DropResets: true}); len(got) != 1 {
		t.Fatalf("counter rate dropping resets: %v", got)
	}
	reset := 50.0
	if got := rate(ctr, rateOptions{Counter: true, CounterMax: &max100, ResetValue: &reset}); got[1].v != 0 {
		t.Fatalf("counter rate past the reset value: %v", got)
	}
	// Percentile estimates on 1..10 and on 15, 20, 35, 40, 50.
	ten := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	five := []float64{15, 20, 35, 40, 50}
	for _, c := range []struct {
		v        []float64
		q        float64
		estimate int
		want     float64
	}{{ten, 0.5, 0, 5.5}, {ten, 0.9, 0, 9.9}, {ten, 0.99, 0, 10}, {ten, 0.5, 7, 5.5}, {ten, 0.9, 7, 9.1}, {ten, 0.5, 3, 5},
		{five, 0.4, 3, 20}, {five, 0.5, 3, 20}, {five, 0.3, 3, 20}, {five, 0.4, 7, 29}, {five, 0.4, 0, 26}} {
		if got := percentile(c.v, c.q, c.estimate); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("percentile %v of %v (estimate %d): %v, want %v", c.q, c.v, c.estimate, got, c.want)
		}
	}
}

func TestParseM(t *testing.T) {
	for in, want := range map[string]string{
		"sum:devices.minute.count":                                                      "sum devices.minute.count  false []",
		"avg:1m-avg:devices.minute.count{entity=*}":                                     "avg devices.minute.count 1m-avg false [wildcard(entity=*,true)]",
		"sum:rate{counter,100,5}:explicit_tags:m{entity=a|b}{quantile=regexp(0\\.9.*)}": "sum m  true [literal_or(entity=a|b,true) regexp(quantile=0\\.9.*,false)]",
		"max:5m-max-zero:rate:m{entity=wildcard(dev*),final=true}":                      "max m 5m-max-zero true [wildcard(entity=dev*,true) literal_or(final=true,true)]",
		"sum:m{}{entity=regexp(d{1,3})}":                                                "sum m  false [regexp(entity=d{1,3},false)]",
	} {
		s, err := parseM(in, 0)
		if err != nil {
			t.Errorf("%s: %v", in, err)
			continue
		}
		var fs []string
		for _, f := range s.filters {
			fs = append(fs, fmt.Sprintf("%s(%s=%s,%v)", f.Type, f.Tagk, f.Filter, f.GroupBy))
		}
		if got := fmt.Sprintf("%s %s %s %v [%s]", s.aggregator, s.metric, s.dsText, s.rate, strings.Join(fs, " ")); got != want {
			t.Errorf("%s:\n got %s\nwant %s", in, got, want)
		}
	}
	s, _ := parseM("sum:rate{counter,100,5}:explicit_tags:m", 0)
	if !s.rateOptions.Counter || *s.rateOptions.CounterMax != 100 || *s.rateOptions.ResetValue != 5 || !s.explicitTags {
		t.Errorf("rate options: %+v", s)
	}
	for _, bad := range []string{"sum", "sum:", "sum:m{entity}", "sum:m{entity=a", "sum:m{a=b}{c=d}{e=f}", "sum:1m-foo:m"} {
		if _, err := parseM(bad, 0); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
