package opentsdb

import (
	"context"
	"errors"
	"sort"

	"github.com/abacus-stream/abacus/query"
)

type entitySet struct {
	list []string
	more bool // more entities matched than the limit
}

// entities resolves the entities of a metric that pass the filters on its tag key: entities a
// case-sensitive literal_or names are taken as named, with no read; otherwise entities are listed
// by skipping from one to the next in the table (query.Reader.ListEntities). With strict, more
// than limit entities, or a listing stopped by MaxEntityScan, is an error rather than a partial
// answer.
//
// The entities of a rollup are its keys, filtered on its dimension; a global rollup has one,
// query.GlobalKey, read without any filter (checkTagKeys has refused filters on other keys).
func (a *API) entities(ctx context.Context, met tsdbMetric, filters []tagFilter, limit int, strict bool) (entitySet, error) {
	if met.global() {
		return a.globalEntity(ctx, met, strict)
	}
	var ef []tagFilter
	var named []string
	hasNamed := false
	for _, f := range filters {
		if f.Tagk != met.key {
			continue
		}
		if f.Type == "not_key" {
			return entitySet{}, nil // every series of a keyed set has its key
		}
		ef = append(ef, f)
		if f.literals != nil {
			if !hasNamed {
				named, hasNamed = append([]string(nil), f.literals...), true
			} else {
				named = intersect(named, f.literals)
			}
		}
	}
	match := func(e string) bool {
		for _, f := range ef {
			if !f.match(e) {
				return false
			}
		}
		return true
	}
	var out entitySet
	if hasNamed {
		sort.Strings(named)
		for i, e := range named {
			if (i > 0 && named[i-1] == e) || !match(e) {
				continue
			}
			if !strict {
				// Listings answer only entities that exist.
				ws, err := met.topo.Reader.Windows(ctx, met.set, e, query.Options{Limit: 1, NoLive: true})
				if err != nil {
					return out, err
				}
				if len(ws) == 0 {
					continue
				}
			}
			out.list = append(out.list, e)
		}
		if len(out.list) > limit {
			out.list, out.more = out.list[:limit], true
		}
	} else {
		prefix := ""
		for _, f := range ef {
			if len(f.prefix) > len(prefix) {
				prefix = f.prefix
			}
		}
		list, more, err := met.topo.Reader.ListEntities(ctx, met.set,
			query.EntityOptions{Limit: limit, MaxRows: a.Limits.MaxEntityScan, Prefix: prefix, Match: match})
		if errors.Is(err, query.ErrEntityScanLimit) {
			if strict {
				return out, badRequest("the entity filter examined %d entities without finishing, the limit: name entities with literal_or, or give a wildcard a longer literal prefix", a.Limits.MaxEntityScan)
			}
			err = nil
		}
		if err != nil {
			return out, err
		}
		out.list, out.more = list, more
	}
	if strict && out.more {
		return out, badRequest("the entity filter matches more than %d entities, the limit of one sub-query: narrow it, or name entities with literal_or", limit)
	}
	return out, nil
}

// globalEntity is the one entity of a global rollup's metric; a listing (not strict) answers it
// only when it has windows, as listings answer only entities that exist.
func (a *API) globalEntity(ctx context.Context, met tsdbMetric, strict bool) (entitySet, error) {
	if !strict {
		ws, err := met.topo.Reader.Windows(ctx, met.set, query.GlobalKey, query.Options{Limit: 1, NoLive: true})
		if err != nil || len(ws) == 0 {
			return entitySet{}, err
		}
	}
	return entitySet{list: []string{query.GlobalKey}}, nil
}

func intersect(a, b []string) []string {
	in := map[string]bool{}
	for _, v := range b {
		in[v] = true
	}
	var out []string
	for _, v := range a {
		if in[v] {
			out = append(out, v)
		}
	}
	return out
}
