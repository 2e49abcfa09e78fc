package opentsdb

import (
	"regexp"
	"strings"
)

// The tag filters of the OpenTSDB-compatible API (OpenTSDB 2.2 and later): what each filter type
// matches, and what it tells the listing of entities (a literal prefix, or entities named outright)
// so that a filter does not have to look at every entity of a table.

// filterDoc is how /api/config/filters describes a filter type.
type filterDoc struct {
	Examples    string `json:"examples"`
	Description string `json:"description"`
}

// filterDocs is what /api/config/filters lists: the filter types abacus evaluates. Grafana takes
// the keys as the filter types it offers.
var filterDocs = map[string]filterDoc{
	"literal_or":      {`entity=literal_or(device-001|device-002)`, "Exact values separated by |, case sensitive. Names entities directly: no listing of entities."},
	"iliteral_or":     {`entity=iliteral_or(DEVICE-001)`, "Exact values separated by |, ignoring case."},
	"not_literal_or":  {`entity=not_literal_or(device-001)`, "Every value but these, case sensitive."},
	"not_iliteral_or": {`entity=not_iliteral_or(device-001)`, "Every value but these, ignoring case."},
	"wildcard":        {`entity=wildcard(device-0*)`, "Glob with * (case sensitive); * alone matches every value. A literal prefix before the first * narrows the listing of entities."},
	"iwildcard":       {`entity=iwildcard(DEVICE-0*)`, "Glob with *, ignoring case."},
	"regexp":          {`entity=regexp(device-0[0-4].*)`, "RE2 regular expression, matched anywhere in the value unless anchored."},
	"not_key":         {`quantile=not_key()`, "Series that do not have the tag key (e.g. the non-quantile metrics)."},
}

// tagFilter is one OpenTSDB filter on a tag key.
type tagFilter struct {
	Type    string `json:"type"`
	Tagk    string `json:"tagk"`
	Filter  string `json:"filter"`
	GroupBy bool   `json:"groupBy"`
	match   func(v string) bool
	// prefix is a literal every matching value starts with ("" when unknown): it narrows the
	// listing of entities.
	prefix string
	// literals are the exact values a case-sensitive literal_or names: entities are read
	// directly, without listing.
	literals []string
}

func newTagFilter(typ, tagk, expr string, groupBy bool) (tagFilter, error) {
	f := tagFilter{Type: typ, Tagk: tagk, Filter: expr, GroupBy: groupBy}
	// Which tag keys exist depends on the metric (a rollup's series have its dimension, a global
	// rollup's none): checkTagKeys judges the key once the metric is known.
	if tagk == "" {
		return f, badRequest("No such name for 'tagk': '' (a filter needs a tag key)")
	}
	values := strings.Split(expr, "|")
	set := func(fold bool) map[string]bool {
		m := map[string]bool{}
		for _, v := range values {
			if fold {
				v = strings.ToLower(v)
			}
			m[v] = true
		}
		return m
	}
	switch typ {
	case "literal_or":
		m := set(false)
		f.match = func(v string) bool { return m[v] }
		f.literals = values
	case "iliteral_or":
		m := set(true)
		f.match = func(v string) bool { return m[strings.ToLower(v)] }
	case "not_literal_or":
		m := set(false)
		f.match = func(v string) bool { return !m[v] }
	case "not_iliteral_or":
		m := set(true)
		f.match = func(v string) bool { return !m[strings.ToLower(v)] }
	case "wildcard", "iwildcard":
		if !strings.Contains(expr, "*") {
			return f, badRequest("filter %s(%s) on %s: a wildcard filter needs at least one *", typ, expr, tagk)
		}
		fold := typ == "iwildcard"
		pat := expr
		if fold {
			pat = strings.ToLower(pat)
		} else {
			f.prefix = pat[:strings.IndexByte(pat, '*')]
		}
		parts := strings.Split(pat, "*")
		f.match = func(v string) bool {
			if fold {
				v = strings.ToLower(v)
			}
			return globMatch(parts, v)
		}
	case "regexp":
		re, err := regexp.Compile(expr)
		if err != nil {
			return f, badRequest("filter regexp(%s) on %s: %v", expr, tagk, err)
		}
		if strings.HasPrefix(expr, "^") { // unanchored, a match may start anywhere in the value
			f.prefix, _ = re.LiteralPrefix()
		}
		f.match = re.MatchString
	case "not_key":
		f.match = nil // evaluated on the series' keys (matchSeries)
	default:
		return f, badRequest("unknown filter type %q (/api/config/filters lists those abacus has)", typ)
	}
	return f, nil
}

// globMatch matches v against a pattern split at its *s.
func globMatch(parts []string, v string) bool {
	if len(parts) == 1 {
		return v == parts[0]
	}
	if !strings.HasPrefix(v, parts[0]) {
		return false
	}
	v = v[len(parts[0]):]
	last := parts[len(parts)-1]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(v, p)
		if i < 0 {
			return false
		}
		v = v[i+len(p):]
	}
	return strings.HasSuffix(v, last) && len(v) >= len(last)
}

// matchSeries reports whether a series' tags pass every filter (final, a pseudo key on data
// points, is left to the points). With explicit, the series must have no tag key beyond the
// filters'.
func matchSeries(filters []tagFilter, tags map[string]string, explicit bool) bool {
	keys := map[string]bool{}
	for _, f := range filters {
		if f.Tagk == tagFinal {
			continue
		}
		keys[f.Tagk] = true
		v, ok := tags[f.Tagk]
		if f.Type == "not_key" {
			if ok {
				return false
			}
			continue
		}
		if !ok || !f.match(v) {
			return false
		}
	}
	if explicit {
		for k := range tags {
			if !keys[k] {
				return false
			}
		}
	}
	return true
}

// splitTop splits s at sep outside parentheses, so that regexp(a{1,3}) or literal_or(a|b) stay
// whole.
func splitTop(s string, sep byte) []string {
	var out []string
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '(':
			depth++
		case ')':
			if depth > 0 {
				depth--
			}
		case sep:
			if depth == 0 {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	return append(out, s[start:])
}
