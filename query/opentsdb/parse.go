package opentsdb

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// tsdbRequest is one /api/query request, from a JSON body or a query string.
type tsdbRequest struct {
	start, end time.Time
	ms         bool // timestamps in milliseconds (msResolution)
	arrays     bool // data points as [[t, v], ...] (OpenTSDB 2.4, Grafana's version 2.4 mode)
	showQuery  bool // echo each sub-query with its index (Grafana's version 2.3 mode maps results by it)
	queries    []subQuery
}

type subQuery struct {
	index        int
	metric       string
	aggregator   string
	downsample   *downsampleSpec
	dsText       string
	rate         bool
	rateOptions  rateOptions
	filters      []tagFilter
	tags         map[string]string // as given, for the echo
	explicitTags bool
}

type rateOptions struct {
	Counter    bool     `json:"counter"`
	CounterMax *float64 `json:"counterMax,omitempty"`
	ResetValue *float64 `json:"resetValue,omitempty"`
	DropResets bool     `json:"dropResets"`
}

// subQueryJSON is a sub-query as Grafana and other clients send it. Fields abacus does not know
// (Grafana sends its whole query model: refId, alias, hide, ...) are ignored.
type subQueryJSON struct {
	Metric       string         `json:"metric"`
	Aggregator   string         `json:"aggregator"`
	Downsample   string         `json:"downsample"`
	Rate         bool           `json:"rate"`
	RateOptions  *rateOptions   `json:"rateOptions"`
	Tags         map[string]any `json:"tags"`
	Filters      []tagFilter    `json:"filters"`
	ExplicitTags bool           `json:"explicitTags"`
	TSUIDs       []string       `json:"tsuids"`
}

// parseQuery reads an /api/query request from its query string or its JSON body, as OpenTSDB
// takes either, and refuses what abacus cannot answer (writes, calendar downsampling, UIDs) rather
// than answer something else.
func (a *API) parseQuery(r *http.Request) (*tsdbRequest, error) {
	q, body, err := params(r, a.MaxBodyBytes)
	if err != nil {
		return nil, err
	}
	req := &tsdbRequest{}
	if err := req.parseFlags(q, body); err != nil {
		return nil, err
	}
	if err := req.parseRange(q, body, a.Now(), a.Limits.MaxRange); err != nil {
		return nil, err
	}
	if req.queries, err = parseSubQueries(q, body); err != nil {
		return nil, err
	}
	if len(req.queries) == 0 {
		return nil, badRequest("no sub-query: give queries (JSON body) or m= (query string)")
	}
	if len(req.queries) > a.Limits.MaxSubQueries {
		return nil, badRequest("%d sub-queries, more than the limit of %d", len(req.queries), a.Limits.MaxSubQueries)
	}
	return req, nil
}

// parseFlags reads the request's boolean parameters. One that asks for what abacus does not do
// (delete, calendar downsampling) is refused when true rather than ignored: ignoring it would
// answer something other than what was asked.
func (req *tsdbRequest) parseFlags(q url.Values, body map[string]json.RawMessage) error {
	var err error
	if req.ms, err = boolParam(q, body, "msResolution", "ms"); err != nil {
		return err
	}
	if req.arrays, err = boolParam(q, body, "arrays"); err != nil {
		return err
	}
	if req.showQuery, err = boolParam(q, body, "showQuery", "show_query"); err != nil {
		return err
	}
	for _, refused := range []string{"delete", "useCalendar", "use_calendar"} {
		if on, err := boolParam(q, body, refused); err != nil || on {
			if err == nil {
				err = badRequest("parameter %s: abacus does not support it (it only reads, and downsamples on UTC boundaries)", refused)
			}
			return err
		}
	}
	return nil
}

// parseRange reads start (required) and end (default now), in the request's timezone for the
// forms that have none, and bounds the range by maxRange.
func (req *tsdbRequest) parseRange(q url.Values, body map[string]json.RawMessage, now time.Time, maxRange time.Duration) error {
	loc := time.UTC
	if tz, ok, err := param(q, body, "timezone", "tz"); err != nil {
		return err
	} else if ok && tz != "" {
		if loc, err = time.LoadLocation(tz); err != nil {
			return badRequest("parameter timezone: %v", err)
		}
	}
	start, ok, err := param(q, body, "start")
	if err != nil {
		return err
	}
	if !ok || start == "" {
		return badRequest("parameter start: required (e.g. 1h-ago, seconds or milliseconds since the epoch, 2026/11/30-12:00:00)")
	}
	if req.start, err = tsdbTime(start, now, loc); err != nil {
		return badRequest("parameter start: %v", err)
	}
	req.end = now
	if end, ok, err := param(q, body, "end"); err != nil {
		return err
	} else if ok && end != "" {
		if req.end, err = tsdbTime(end, now, loc); err != nil {
			return badRequest("parameter end: %v", err)
		}
	}
	if !req.end.After(req.start) {
		return badRequest("end %s is not after start %s", req.end.UTC().Format(time.RFC3339), req.start.UTC().Format(time.RFC3339))
	}
	if span := req.end.Sub(req.start); span > maxRange {
		return badRequest("the range from start to end is %s, longer than the limit of %s: ask for a shorter range", span.Round(time.Second), maxRange)
	}
	return nil
}

// parseSubQueries reads the sub-queries: a JSON array in the body, then m= parameters in the query
// string, numbered in that order.
func parseSubQueries(q url.Values, body map[string]json.RawMessage) ([]subQuery, error) {
	var out []subQuery
	if raw, ok := body["queries"]; ok {
		var list []json.RawMessage
		if err := json.Unmarshal(raw, &list); err != nil {
			return nil, badRequest("parameter queries: want an array of sub-queries: %v", err)
		}
		for i, item := range list {
			var sq subQueryJSON
			if err := json.Unmarshal(item, &sq); err != nil {
				return nil, badRequest("queries[%d]: %v", i, err)
			}
			s, err := sq.compile(i)
			if err != nil {
				return nil, err
			}
			out = append(out, s)
		}
	}
	for _, m := range q["m"] {
		s, err := parseM(m, len(out))
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	if len(q["tsuid"])+len(q["tsuids"]) > 0 {
		return nil, badRequest("tsuid queries are not supported: abacus has no UIDs; query by metric")
	}
	return out, nil
}

func (sq subQueryJSON) compile(index int) (subQuery, error) {
	if len(sq.TSUIDs) > 0 {
		return subQuery{}, badRequest("queries[%d]: tsuid queries are not supported: abacus has no UIDs; query by metric", index)
	}
	s := subQuery{index: index, metric: strings.TrimSpace(sq.Metric), aggregator: sq.Aggregator, rate: sq.Rate,
		explicitTags: sq.ExplicitTags, tags: map[string]string{}}
	if s.metric == "" {
		return s, badRequest("queries[%d]: metric is required", index)
	}
	if sq.RateOptions != nil {
		s.rateOptions = *sq.RateOptions
	}
	if err := s.setDownsample(sq.Downsample); err != nil {
		return s, err
	}
	// Tags are group-by filters, as OpenTSDB 2.2 and later read them.
	keys := make([]string, 0, len(sq.Tags))
	for k := range sq.Tags {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v, ok := sq.Tags[k].(string)
		if !ok {
			return s, badRequest("queries[%d]: tag %s: want a string value, got %v", index, k, sq.Tags[k])
		}
		s.tags[k] = v
		f, err := tagValueFilter(k, v, true)
		if err != nil {
			return s, err
		}
		s.filters = append(s.filters, f)
	}
	for _, f := range sq.Filters {
		c, err := newTagFilter(f.Type, f.Tagk, f.Filter, f.GroupBy)
		if err != nil {
			return s, err
		}
		s.filters = append(s.filters, c)
	}
	return s, nil
}

// tagValueFilter reads a tag value of the tags map or of m= braces: * (any), a|b (any of),
// type(expression), or an exact value.
func tagValueFilter(k, v string, groupBy bool) (tagFilter, error) {
	if i := strings.IndexByte(v, '('); i > 0 && strings.HasSuffix(v, ")") && isFilterType(v[:i]) {
		return newTagFilter(v[:i], k, v[i+1:len(v)-1], groupBy)
	}
	if v == "*" {
		return newTagFilter("wildcard", k, "*", groupBy)
	}
	return newTagFilter("literal_or", k, v, groupBy)
}

func isFilterType(s string) bool { _, ok := filterDocs[s]; return ok }

func (s *subQuery) setDownsample(text string) error {
	if text == "" {
		return nil
	}
	ds, err := parseDownsample(text)
	if err != nil {
		return badRequest("queries[%d]: downsample %q: %v", s.index, text, err)
	}
	s.downsample, s.dsText = ds, text
	return nil
}

// parseM reads a query-string sub-query:
// <aggregator>:[<downsample>:][rate[{counter[,max[,reset]]}]:][explicit_tags:]<metric>[{group-by tags}][{other tags}]
func parseM(m string, index int) (subQuery, error) {
	s := subQuery{index: index, tags: map[string]string{}}
	bad := func(format string, args ...any) error {
		return badRequest("parameter m=%s: %s", m, fmt.Sprintf(format, args...))
	}
	agg, rest, ok := strings.Cut(m, ":")
	if !ok {
		return s, bad("want <aggregator>:<metric>")
	}
	s.aggregator = agg
	rest, err := s.parseMOptions(rest, bad)
	if err != nil {
		return s, err
	}
	name, braces := rest, ""
	if i := strings.IndexByte(rest, '{'); i >= 0 {
		name, braces = rest[:i], rest[i:]
	}
	if name == "" {
		return s, bad("no metric")
	}
	s.metric = name
	return s, s.parseMTags(braces, bad)
}

// parseMOptions reads the options between the aggregator and the metric, in any order (rate,
// explicit_tags, a downsample), and returns what follows them.
func (s *subQuery) parseMOptions(rest string, bad func(string, ...any) error) (string, error) {
	for {
		switch {
		case strings.HasPrefix(rest, "rate{") || strings.HasPrefix(rest, "rate:"):
			s.rate = true
			rest = rest[len("rate"):]
			if strings.HasPrefix(rest, "{") {
				end := strings.IndexByte(rest, '}')
				if end < 0 {
					return rest, bad("rate options have no closing }")
				}
				if err := s.rateOptions.parse(rest[1:end], bad); err != nil {
					return rest, err
				}
				rest = rest[end+1:]
			}
			rest = strings.TrimPrefix(rest, ":")
			continue
		case strings.HasPrefix(rest, "explicit_tags:"):
			s.explicitTags = true
			rest = rest[len("explicit_tags:"):]
			continue
		}
		end := strings.IndexAny(rest, ":{")
		if end < 0 || rest[end] != ':' {
			return rest, nil
		}
		if err := s.setDownsample(rest[:end]); err != nil {
			return rest, err
		}
		rest = rest[end+1:]
	}
}

// parse reads the rate options of m=: counter[,max[,reset]], where an empty max or reset keeps
// OpenTSDB's default.
func (o *rateOptions) parse(text string, bad func(string, ...any) error) error {
	opts := strings.Split(text, ",")
	o.Counter = opts[0] == "counter"
	for i, opt := range opts[1:] {
		if opt == "" {
			continue
		}
		v, err := strconv.ParseFloat(opt, 64)
		if err != nil {
			return bad("rate option %q is not a number", opt)
		}
		if i == 0 {
			o.CounterMax = &v
		} else {
			o.ResetValue = &v
		}
	}
	return nil
}

// parseMTags reads the tag groups after the metric: the first {...} holds group-by filters, the
// second the filters that only select.
func (s *subQuery) parseMTags(braces string, bad func(string, ...any) error) error {
	for group := 0; braces != ""; group++ {
		if group > 1 || braces[0] != '{' {
			return bad("want at most two {...} tag groups after the metric")
		}
		end := tagGroupEnd(braces)
		if end < 0 {
			return bad("a { has no closing }")
		}
		for _, kv := range splitTop(braces[1:end], ',') {
			if kv == "" {
				continue
			}
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				return bad("tag %q is not <tagk>=<value>", kv)
			}
			f, err := tagValueFilter(k, v, group == 0)
			if err != nil {
				return err
			}
			s.filters = append(s.filters, f)
			if group == 0 {
				s.tags[k] = v
			}
		}
		braces = braces[end+1:]
	}
	return nil
}

// tagGroupEnd is the index of the } that closes the tag group braces starts with, or -1: a } inside
// a filter's parentheses (regexp(a{1,3})) does not close it.
func tagGroupEnd(braces string) int {
	end := strings.IndexByte(braces, '}')
	for end >= 0 && strings.Count(braces[:end], "(") > strings.Count(braces[:end], ")") {
		next := strings.IndexByte(braces[end+1:], '}')
		if next < 0 {
			return -1
		}
		end += next + 1
	}
	return end
}

var (
	relTime = regexp.MustCompile(`^(\d+)(ms|s|m|h|d|w|n|y)-ago$`)
	unixTS  = regexp.MustCompile(`^(\d+)(?:\.(\d{1,3}))?$`)
)

// tsdbTime reads a time as OpenTSDB does: relative (1h-ago; units ms s m h d w n y, with n = 30
// days and y = 365 days), Unix seconds (up to 10 digits) or milliseconds (more), seconds with a
// fraction (1364410924.250), yyyy/MM/dd[-HH:mm[:ss]] (or with a space) in loc, "now", and also
// RFC 3339.
func tsdbTime(v string, now time.Time, loc *time.Location) (time.Time, error) {
	v = strings.TrimSpace(v)
	if v == "now" {
		return now, nil
	}
	if m := relTime.FindStringSubmatch(v); m != nil {
		n, err := strconv.ParseInt(m[1], 10, 64)
		if err != nil {
			return time.Time{}, err
		}
		d, _ := unitDuration(m[2])
		if n > int64(math.MaxInt64/d) {
			return time.Time{}, fmt.Errorf("%q is too far in the past", v)
		}
		return now.Add(-time.Duration(n) * d), nil
	}
	if m := unixTS.FindStringSubmatch(v); m != nil {
		n, err := strconv.ParseInt(m[1], 10, 64)
		if err != nil {
			return time.Time{}, fmt.Errorf("%q: %v", v, err)
		}
		if m[2] != "" {
			frac, _ := strconv.Atoi((m[2] + "00")[:3])
			return time.UnixMilli(n*1000 + int64(frac)), nil
		}
		if len(m[1]) <= 10 {
			return time.Unix(n, 0), nil
		}
		return time.UnixMilli(n), nil
	}
	for _, layout := range []string{"2006/01/02-15:04:05", "2006/01/02 15:04:05", "2006/01/02-15:04", "2006/01/02 15:04", "2006/01/02"} {
		if t, err := time.ParseInLocation(layout, v, loc); err == nil {
			return t, nil
		}
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, nil
	}
	return time.Time{}, fmt.Errorf("%q is not a relative time (1h-ago), Unix seconds or milliseconds, or yyyy/MM/dd-HH:mm:ss", v)
}

func unitDuration(u string) (time.Duration, bool) {
	switch u {
	case "ms":
		return time.Millisecond, true
	case "s":
		return time.Second, true
	case "m":
		return time.Minute, true
	case "h":
		return time.Hour, true
	case "d":
		return 24 * time.Hour, true
	case "w":
		return 7 * 24 * time.Hour, true
	case "n":
		return 30 * 24 * time.Hour, true
	case "y":
		return 365 * 24 * time.Hour, true
	}
	return 0, false
}
