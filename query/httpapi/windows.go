package httpapi

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/abacus-stream/abacus/query"
	"github.com/abacus-stream/abacus/query/internal/jsonnum"
	"github.com/abacus-stream/abacus/totals"
)

func (s *Server) topologies(_ http.ResponseWriter, _ *http.Request) (int, any) {
	type topo struct {
		Name string            `json:"name"`
		Sets []query.ServedSet `json:"sets"`
	}
	out := struct {
		Topologies []topo `json:"topologies"`
	}{Topologies: []topo{}}
	for _, t := range s.Topologies {
		sets := make([]query.ServedSet, len(t.Sets))
		for i, set := range t.Sets {
			set.Dimension = set.KeyName() // an entity set always says its dimension
			sets[i] = set
		}
		out.Topologies = append(out.Topologies, topo{t.Name, sets})
	}
	return http.StatusOK, out
}

// pick finds the topology and set a request names; topology may be left out when there is one.
func (s *Server) pick(r *http.Request) (*query.Served, *query.ServedSet, int, any) {
	q := r.URL.Query()
	name := q.Get("topology")
	var t *query.Served
	switch {
	case name == "" && len(s.Topologies) == 1:
		t = &s.Topologies[0]
	case name == "":
		code, body := badParam("topology", "required: %d topologies are served", len(s.Topologies))
		return nil, nil, code, body
	default:
		for i := range s.Topologies {
			if s.Topologies[i].Name == name {
				t = &s.Topologies[i]
			}
		}
		if t == nil {
			code, body := badParam("topology", "no topology %q", name)
			return nil, nil, code, body
		}
	}
	set := q.Get("set")
	if set == "" {
		code, body := badParam("set", "required")
		return nil, nil, code, body
	}
	for i := range t.Sets {
		if t.Sets[i].Name == set {
			return t, &t.Sets[i], 0, nil
		}
	}
	code, body := badParam("set", "topology %q has no aggregate set %q", t.Name, set)
	return nil, nil, code, body
}

// windowJSON is a window as the API returns it. Values are numbers, or for quantiles an object of
// quantile to value, or for user-defined aggregations base64 bytes.
type windowJSON struct {
	Start     int64          `json:"start"` // ms since the epoch
	End       int64          `json:"end"`
	StartTime string         `json:"start_time"`
	Final     bool           `json:"final"`
	Live      bool           `json:"live"`
	Revision  uint64         `json:"revision"`
	Values    map[string]any `json:"values"`
}

// appendWindowsJSON appends c's windows (newest first unless oldestFirst) as a JSON array of
// windowJSON, byte for byte what encoding/json writes of them (map keys in order, HTML-safe
// names, floats in its form, NaN and infinities as null, custom values in base64), without a
// map or an interface per window: a page of 20 entities' days is 28,800 windows.
func appendWindowsJSON(b []byte, c *query.Columns, oldestFirst bool) []byte {
	names := c.Aggregates()
	order := make([]int, len(names))
	quoted := make([][]byte, len(names))
	keys := make([]quantileKeys, len(names))
	for k, name := range names {
		order[k] = k
		quoted[k], _ = json.Marshal(name) // a string always marshals
	}
	slices.SortFunc(order, func(x, y int) int { return strings.Compare(names[x], names[y]) })
	b = append(b, '[')
	n := c.Len()
	for k := range n {
		i := k
		if !oldestFirst {
			i = n - 1 - k
		}
		if k > 0 {
			b = append(b, ',')
		}
		start := c.StartMilli(i)
		b = append(b, `{"start":`...)
		b = strconv.AppendInt(b, start, 10)
		b = append(b, `,"end":`...)
		b = strconv.AppendInt(b, c.EndMilli(i), 10)
		b = append(b, `,"start_time":"`...)
		b = time.UnixMilli(start).UTC().AppendFormat(b, time.RFC3339)
		b = append(b, `","final":`...)
		b = strconv.AppendBool(b, c.Final(i))
		b = append(b, `,"live":`...)
		b = strconv.AppendBool(b, c.Live(i))
		b = append(b, `,"revision":`...)
		b = strconv.AppendUint(b, c.Revision(i), 10)
		b = append(b, `,"values":{`...)
		first := true
		for _, col := range order {
			v, ok := c.Value(col, i)
			if !ok {
				continue
			}
			if !first {
				b = append(b, ',')
			}
			first = false
			b = append(append(b, quoted[col]...), ':')
			b = appendValueJSON(b, v, &keys[col])
		}
		b = append(b, "}}"...)
	}
	return append(b, ']')
}

// appendValueJSON appends a value as the API writes it: a number, for quantiles an object of
// quantile to value, for a user-defined aggregation its bytes in base64. keys remembers the
// quantiles' keys of the values before (a column's windows share them).
func appendValueJSON(b []byte, v totals.Value, keys *quantileKeys) []byte {
	switch v.Kind {
	case totals.KindInt:
		return strconv.AppendInt(b, v.Int, 10)
	case totals.KindFloat:
		return jsonnum.Append(b, v.Float)
	case totals.KindQuantiles:
		keys.of(v.Quantiles)
		b = append(b, '{')
		for n, i := range keys.order {
			if n > 0 {
				b = append(b, ',')
			}
			b = append(append(append(b, '"'), keys.keys[i]...), `":`...)
			b = jsonnum.Append(b, v.Quantiles[i].Value)
		}
		return append(b, '}')
	}
	if v.Bytes == nil {
		return append(b, "null"...)
	}
	b = append(b, '"')
	b = base64.StdEncoding.AppendEncode(b, v.Bytes)
	return append(b, '"')
}

// quantileKeys are a list of quantiles as JSON object keys, in the order encoding/json writes a
// map of them: sorted, and of equal keys only the last (a map keeps the last). A column's windows
// mostly share their list, so the formatting and sorting is done once for them.
type quantileKeys struct {
	qs    []float64
	keys  []string
	order []int // indices into the list, in the order written
}

// of makes k the keys of qs, unless they are already.
func (k *quantileKeys) of(qs []totals.Quantile) {
	if len(qs) == len(k.qs) {
		same := true
		for i, q := range qs {
			if q.Q != k.qs[i] { // a NaN never matches: its keys are made again
				same = false
				break
			}
		}
		if same {
			return
		}
	}
	k.qs, k.keys, k.order = k.qs[:0], k.keys[:0], k.order[:0]
	for i, q := range qs {
		k.qs = append(k.qs, q.Q)
		k.keys = append(k.keys, strconv.FormatFloat(q.Q, 'f', -1, 64))
		k.order = append(k.order, i)
	}
	slices.SortStableFunc(k.order, func(x, y int) int { return strings.Compare(k.keys[x], k.keys[y]) })
	out := k.order[:0]
	for n, i := range k.order {
		if n+1 < len(k.order) && k.keys[k.order[n+1]] == k.keys[i] {
			continue
		}
		out = append(out, i)
	}
	k.order = out
}

// windowsJSON is the answer of /api/v1/windows.
type windowsJSON struct {
	Topology string `json:"topology"`
	Set      string `json:"set"`
	// Dimension is what the keys of Entities are (query.ServedSet.Dimension): "entity", a rollup's
	// dimension, or "" for a global rollup, whose one key is "all".
	Dimension string `json:"dimension"`
	// Entities are each entity's windows, a JSON array of windowJSON (appendWindowsJSON).
	Entities map[string]json.RawMessage `json:"entities"`
	// Truncated says that the limit cut at least one entity's windows; Next gives, for each
	// such entity, the from and to (ms) of the next page: windows go on past the last one
	// returned, in the order asked for.
	Truncated bool                        `json:"truncated"`
	Next      map[string]map[string]int64 `json:"next,omitempty"`
}

// windows answers a page of the windows of entities of a set. Every answer is bounded (entities,
// range, windows): without a limit each entity gets its share of MaxWindows, and the answer says
// where the next page starts.
//
// A rollup set is read as an entity set whose entities are its keys: entity=eu-west, or under the
// set's dimension name, region=eu-west (one of the two, not both; the dimension name is not taken
// when it is one of the API's own parameters, such as set or from). A global rollup needs no
// entity: it reads its one key, "all", the only entity it accepts.
func (s *Server) windows(_ http.ResponseWriter, r *http.Request) (int, any) {
	t, set, code, body := s.pick(r)
	if t == nil {
		return code, body
	}
	q := r.URL.Query()
	entities, code, body := s.windowsKeys(q, set)
	if code != 0 {
		return code, body
	}
	var o query.Options
	if code, body := s.windowsRange(q, &o); code != 0 {
		return code, body
	}
	if code, body := s.windowsLimit(q, &o, len(entities)); code != 0 {
		return code, body
	}
	if code, body := windowsOrderAndLive(q, &o); code != 0 {
		return code, body
	}
	page, err := t.Reader.PageColumns(r.Context(), set.Name, entities, o)
	if err != nil {
		return s.windowsFailed(r, set.Name, err)
	}
	out := pageJSON(t.Name, set.Name, page, o.OldestFirst)
	out.Dimension = set.KeyName()
	return http.StatusOK, rawJSON(out.appendJSON(nil))
}

// windowsParams are the parameters of /api/v1/windows other than the keys: a dimension with one
// of these names is asked for as entity.
var windowsParams = map[string]bool{"topology": true, "set": true, "from": true, "to": true, "limit": true, "order": true, "live": true}

// windowsKeys reads the keys a windows request asks for: the entity parameter, or the rollup's
// dimension name, or for a global rollup its one key.
func (s *Server) windowsKeys(q url.Values, set *query.ServedSet) ([]string, int, any) {
	param := "entity"
	entities := entityList(q["entity"])
	if dim := set.KeyName(); dim != query.EntityDimension && dim != "" && !windowsParams[dim] {
		if byDim := entityList(q[dim]); len(byDim) > 0 {
			if len(entities) > 0 {
				code, body := badParam(dim, "give the keys of set %q as %s or as entity, not both", set.Name, dim)
				return nil, code, body
			}
			param, entities = dim, byDim
		}
	}
	if set.Global() {
		for _, e := range entities {
			if e != query.GlobalKey {
				code, body := badParam(param, "set %q is a global rollup: its one key is %q, not %q (leave entity out)", set.Name, query.GlobalKey, e)
				return nil, code, body
			}
		}
		return []string{query.GlobalKey}, 0, nil
	}
	if len(entities) == 0 {
		what := "required (repeat it or separate entities with commas)"
		if set.Rollup {
			what = fmt.Sprintf("required: the %s keys of rollup %q, as entity or %s (repeat it or separate keys with commas)", set.Dimension, set.Name, set.Dimension)
		}
		code, body := badParam(param, "%s", what)
		return nil, code, body
	}
	if n, most := len(entities), s.Limits.MaxEntities; n > most {
		code, body := badParam(param, "%d entities asked for, over the limit of %d (%s)", n, most, limitMaxEntities)
		return nil, code, body
	}
	return entities, 0, nil
}

// entityList reads the entity parameters, each one entity or several separated by commas.
func entityList(values []string) []string {
	var entities []string
	for _, e := range values {
		for _, part := range strings.Split(e, ",") {
			if part != "" {
				entities = append(entities, part)
			}
		}
	}
	return entities
}

// windowsRange reads from and to into o, refusing a range longer than MaxRange; an open-ended
// range counts up to now, so that "from a year ago" cannot ask for more than a bounded one.
func (s *Server) windowsRange(q url.Values, o *query.Options) (int, any) {
	var err error
	if o.From, err = s.parseTime(q.Get("from")); err != nil {
		return badParam("from", "%v", err)
	}
	if o.To, err = s.parseTime(q.Get("to")); err != nil {
		return badParam("to", "%v", err)
	}
	if !o.From.IsZero() && !o.To.IsZero() && !o.From.Before(o.To) {
		return badParam("to", "must be after from")
	}
	if !o.From.IsZero() {
		to := o.To
		if to.IsZero() {
			to = s.Now()
		}
		if span := to.Sub(o.From); span > s.Limits.MaxRange {
			return badParam("from", "from..to spans %s, over the limit of %s (%s)", span.Round(time.Second), s.Limits.MaxRange, limitMaxRange)
		}
	}
	return 0, nil
}

// windowsLimit reads limit into o, within MaxWindows for the whole answer.
func (s *Server) windowsLimit(q url.Values, o *query.Options, entities int) (int, any) {
	most := s.Limits.MaxWindows
	v := q.Get("limit")
	if v == "" {
		// Without a limit the answer is still bounded: each entity gets its share, and
		// truncated/next say where the next page starts.
		o.Limit = max(1, most/entities)
		return 0, nil
	}
	var err error
	if o.Limit, err = strconv.Atoi(v); err != nil || o.Limit < 1 || o.Limit > most {
		return badParam("limit", "want a whole number from 1 to %d (%s), got %q", most, limitMaxWindows, v)
	}
	if o.Limit*entities > most {
		return badParam("limit", "%d windows for each of %d entities is %d, over the limit of %d windows per answer (%s)",
			o.Limit, entities, o.Limit*entities, most, limitMaxWindows)
	}
	return 0, nil
}

// windowsOrderAndLive reads order and live into o.
func windowsOrderAndLive(q url.Values, o *query.Options) (int, any) {
	switch q.Get("order") {
	case "", "newest":
	case "oldest":
		o.OldestFirst = true
	default:
		return badParam("order", "want newest or oldest, got %q", q.Get("order"))
	}
	switch q.Get("live") {
	case "", "true", "1":
	case "false", "0":
		o.NoLive = true
	default:
		return badParam("live", "want true or false, got %q", q.Get("live"))
	}
	return 0, nil
}

// windowsFailed answers a read that failed: the request's fault is a 400; running out of the
// request's time says which limit to ask within; anything else is the store's and is logged.
func (s *Server) windowsFailed(r *http.Request, set string, err error) (int, any) {
	if errors.Is(err, query.ErrInvalid) {
		return http.StatusBadRequest, apiError{Error: err.Error()}
	}
	if errors.Is(err, context.DeadlineExceeded) && r.Context().Err() != nil {
		return http.StatusServiceUnavailable, apiError{Error: fmt.Sprintf(
			"the request took longer than its limit of %s (%s): ask for fewer entities or a shorter range", s.Limits.RequestTimeout, limitRequestTimeout)}
	}
	s.Logger.Error("windows query failed", "set", set, "err", err)
	return http.StatusServiceUnavailable, apiError{Error: err.Error()}
}

// appendJSON appends the answer as encoding/json's Encoder writes it (without its newline): an
// Encoder compacts every json.RawMessage it writes, a scan of each entity's windows that took
// most of the CPU of answering them (bench/query's profile of 16 dashboards: 2.2 of 2.7 s of
// writing the answers).
func (w windowsJSON) appendJSON(b []byte) []byte {
	b = append(b, `{"topology":`...)
	b = appendJSONString(b, w.Topology)
	b = append(b, `,"set":`...)
	b = appendJSONString(b, w.Set)
	b = append(b, `,"dimension":`...)
	b = appendJSONString(b, w.Dimension)
	b = append(b, `,"entities":`...)
	if w.Entities == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '{')
		for i, e := range slices.Sorted(maps.Keys(w.Entities)) {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, e)
			b = append(b, ':')
			b = append(b, w.Entities[e]...)
		}
		b = append(b, '}')
	}
	b = append(b, `,"truncated":`...)
	b = strconv.AppendBool(b, w.Truncated)
	if len(w.Next) > 0 {
		b = append(b, `,"next":{`...)
		for i, e := range slices.Sorted(maps.Keys(w.Next)) {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, e)
			b = append(b, ":{"...)
			for j, k := range slices.Sorted(maps.Keys(w.Next[e])) {
				if j > 0 {
					b = append(b, ',')
				}
				b = appendJSONString(b, k)
				b = append(b, ':')
				b = strconv.AppendInt(b, w.Next[e][k], 10)
			}
			b = append(b, '}')
		}
		b = append(b, '}')
	}
	return append(b, '}')
}

// appendJSONString appends s as encoding/json writes a string (HTML characters escaped).
func appendJSONString(b []byte, s string) []byte {
	q, _ := json.Marshal(s) // a string always marshals
	return append(b, q...)
}

// pageJSON is a page as /api/v1/windows answers it: each next page as the from and to (ms) to ask
// with, a bound left out where the request had none.
func pageJSON(topology, set string, p query.ColumnsPage, oldestFirst bool) windowsJSON {
	out := windowsJSON{Topology: topology, Set: set, Entities: map[string]json.RawMessage{}, Truncated: p.Truncated()}
	for e, c := range p.Columns {
		out.Entities[e] = appendWindowsJSON(nil, c, oldestFirst)
	}
	for e, next := range p.Next {
		page := map[string]int64{}
		if !next.From.IsZero() {
			page["from"] = next.From.UnixMilli()
		}
		if !next.To.IsZero() {
			page["to"] = next.To.UnixMilli()
		}
		if out.Next == nil {
			out.Next = map[string]map[string]int64{}
		}
		out.Next[e] = page
	}
	return out
}

// entities lists entities that have windows in a set, scanning at most maxRows rows: meant for
// pickers on small and medium tables, not for enumerating a large one. For a rollup they are its
// keys (the answer's dimension says what they are), for a global rollup its one key "all".
func (s *Server) entities(_ http.ResponseWriter, r *http.Request) (int, any) {
	t, set, code, body := s.pick(r)
	if t == nil {
		return code, body
	}
	limit := 100
	if v := r.URL.Query().Get("limit"); v != "" {
		var err error
		if limit, err = strconv.Atoi(v); err != nil || limit < 1 || limit > s.Limits.MaxEntityList {
			return badParam("limit", "want a whole number from 1 to %d (%s), got %q", s.Limits.MaxEntityList, limitMaxEntityList, v)
		}
	}
	list, truncated, err := t.Reader.Entities(r.Context(), set.Name, query.EntityOptions{Limit: limit})
	if err != nil {
		return http.StatusServiceUnavailable, apiError{Error: err.Error()}
	}
	return http.StatusOK, map[string]any{"entities": list, "truncated": truncated, "dimension": set.KeyName()}
}

func (s *Server) parseTime(v string) (time.Time, error) { return query.ParseTime(v, s.Now()) }
