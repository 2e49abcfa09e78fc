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
	cp, err := r.PageColumns(ctx, set, entities, o)
	if err != nil {
		return Page{}, err
	}
	p := Page{Windows: make(map[string][]Window, len(cp.Columns)), Next: cp.Next}
	for e, c := range cp.Columns {
		p.Windows[e] = c.Windows(o.OldestFirst)
	}
	return p, nil
}

// ColumnsPage is a Page as Columns: for callers that write the windows out (the HTTP API) rather
// than keep them.
type ColumnsPage struct {
	// Columns are each entity's windows, oldest first (the options' order says which the limit
	// kept).
	Columns map[string]*Columns
	// Next is Page.Next.
	Next map[string]Options
}

// Truncated reports whether the limit cut any entity's windows.
func (p ColumnsPage) Truncated() bool { return len(p.Next) > 0 }

// PageColumns is Page, as Columns.
func (r *Reader) PageColumns(ctx context.Context, set string, entities []string, o Options) (ColumnsPage, error) {
	read := o
	if o.Limit > 0 {
		read.Limit = o.Limit + 1
	}
	res, err := r.ManyColumns(ctx, set, nil, entities, read)
	if err != nil {
		return ColumnsPage{}, err
	}
	p := ColumnsPage{Columns: make(map[string]*Columns, len(entities))}
	for i, e := range entities {
		c := res[i]
		if o.Limit > 0 && c.Len() > o.Limit {
			c = c.cut(o.Limit, o.OldestFirst)
			last := c.starts[0] // the page's last window in o's order
			if o.OldestFirst {
				last = c.starts[c.Len()-1]
			}
			if p.Next == nil {
				p.Next = map[string]Options{}
			}
			p.Next[e] = o.after(last)
		}
		p.Columns[e] = c
	}
	return p, nil
}

// after is o moved past the window starting at last (unix ms), the last window of a page in o's
// order. Window starts are whole milliseconds (the row key holds them so), so oldest first the
// next page starts 1 ms after last; newest first it ends before last's start, To being exclusive.
func (o Options) after(last int64) Options {
	next := o
	if o.OldestFirst {
		next.From = time.UnixMilli(last + 1)
	} else {
		next.To = time.UnixMilli(last)
	}
	return next
}
