package query

import (
	"context"
	"time"
)

// Page is one page of the windows of several entities: at most Options.Limit windows each and,
// for each entity the limit cut, the options of its next page. It is the one place that decides
// whether an answer was cut: a page that holds exactly Limit windows may be the last one, so
// callers (the HTTP API, the CLI) page on from Next, never from a full page.
type Page struct {
	// Windows are each entity's windows, in the order the options ask for.
	Windows map[string][]Window
	// Next holds, for each entity whose windows go on past the page, the options that read its
	// next page: the same selection with the bound in the reading direction moved past the page's
	// last window. An entity that the page holds whole has no entry.
	Next map[string]Options
}

// Truncated reports whether the limit cut any entity's windows.
func (p Page) Truncated() bool { return len(p.Next) > 0 }

// Page returns a page of the windows of several entities, each selected by o. It reads one window
// more than o.Limit per entity, which tells a cut answer from one that ends at the limit. With
// o.Limit 0 nothing is cut: the page holds every window and has no Next.
func (r *Reader) Page(ctx context.Context, set string, entities []string, o Options) (Page, error) {
	read := o
	if o.Limit > 0 {
		read.Limit = o.Limit + 1
	}
	res, err := r.Many(ctx, set, entities, read)
	if err != nil {
		return Page{}, err
	}
	p := Page{Windows: res}
	for e, ws := range res {
		if o.Limit == 0 || len(ws) <= o.Limit {
			continue
		}
		res[e] = ws[:o.Limit]
		if p.Next == nil {
			p.Next = map[string]Options{}
		}
		p.Next[e] = o.after(ws[o.Limit-1])
	}
	return p, nil
}

// after is o moved past last, the last window of a page in o's order. Window starts are whole
// milliseconds (the row key holds them so), so oldest first the next page starts 1 ms after last;
// newest first it ends before last's start, To being exclusive.
func (o Options) after(last Window) Options {
	next := o
	if o.OldestFirst {
		next.From = last.Start.Add(time.Millisecond)
	} else {
		next.To = last.Start
	}
	return next
}
