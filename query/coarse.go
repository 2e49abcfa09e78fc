package query

import (
	"context"
	"slices"
	"time"
)

// Coarse is a coarser form of a set (topology AggregateSet.Coarser): its tumbling windows are
// Size long, and each final one is the merge of the finer set's windows inside it.
type Coarse struct {
	Set  string
	Size time.Duration
	// Aggregates are the set's aggregations: a window that lacks one the read asks (added to
	// the set while the window was open, so absent from it) is not used.
	Aggregates []string
}

// maxGapScans is how many separate ranges of the finer set a coarsened read scans; past it, one
// scan covers them all and drops what the coarser windows answer (an entity with a gap every
// other hour would otherwise cost a scan per gap).
const maxGapScans = 4

// Coarsened returns the windows of one entity of set, as Windows does (From and To are needed),
// except that each whole window of c in [From, To) that is final and holds every aggregate asked
// takes the place of set's windows inside it: a week of minute windows summed by the hour is 168
// rows, not 10,080. The answer is for callers that merge windows into buckets that are multiples
// of c.Size with an aggregator the windows' aggregation merges by (a sum of counts or sums, a min
// of mins, a max of maxes, the last of lasts): what they compute is then the same either way. The
// rest (the edges of the range, the periods c has no usable window for: before it was added to
// the topology, still open, or with no event) is read from set.
func (r *Reader) Coarsened(ctx context.Context, set string, c Coarse, entity string, o Options) ([]Window, error) {
	size := c.Size.Milliseconds()
	if size <= 0 || o.From.IsZero() || o.To.IsZero() || o.Limit != 0 {
		return r.Windows(ctx, set, entity, o)
	}
	from, to := o.From.UnixMilli(), o.To.UnixMilli()
	lo, hi := ceilTo(from, size), floorTo(to, size)
	if lo >= hi {
		return r.Windows(ctx, set, entity, o)
	}
	asked := o.Aggregates
	if len(asked) == 0 {
		asked = c.Aggregates
	}
	// Up to just past the last start of c's windows in range, not to hi: a cache reads the part
	// of a range it does not keep, and [hi-size+1, hi) can hold no window of c. Both reads run
	// newest first, as rows are stored (OldestFirst is an HBase reversed scan, which seeks back
	// row by row); the answer is sorted at the end.
	co := Options{From: time.UnixMilli(lo), To: time.UnixMilli(hi - size + 1), NoLive: true, Aggregates: o.Aggregates, Budget: o.Budget}
	coarse, err := r.Windows(ctx, c.Set, entity, co)
	if err != nil {
		return nil, err
	}
	var out []Window
	used := map[int64]bool{}
	for _, w := range coarse {
		s := w.Start.UnixMilli()
		if !w.Final || s%size != 0 || w.End.UnixMilli()-s != size || !hasAll(w, asked) {
			continue
		}
		used[s] = true
		out = append(out, w)
	}
	// The ranges the finer set answers: the edges, and every period without a usable window.
	type span struct{ from, to int64 }
	var gaps []span
	add := func(f, t int64) {
		if f >= t {
			return
		}
		if n := len(gaps); n > 0 && gaps[n-1].to == f {
			gaps[n-1].to = t
			return
		}
		gaps = append(gaps, span{f, t})
	}
	add(from, lo)
	for s := lo; s < hi; s += size {
		if !used[s] {
			add(s, s+size)
		}
	}
	add(hi, to)
	if len(gaps) > maxGapScans {
		gaps = []span{{gaps[0].from, gaps[len(gaps)-1].to}}
	}
	fo := o
	fo.OldestFirst, fo.Limit = false, 0
	for _, g := range gaps {
		fo.From, fo.To = time.UnixMilli(g.from), time.UnixMilli(g.to)
		ws, err := r.Windows(ctx, set, entity, fo)
		if err != nil {
			return nil, err
		}
		for _, w := range ws {
			if s := w.Start.UnixMilli(); !used[s-mod(s, size)] {
				out = append(out, w)
			}
		}
	}
	slices.SortStableFunc(out, func(a, b Window) int {
		if o.OldestFirst {
			return a.Start.Compare(b.Start)
		}
		return b.Start.Compare(a.Start)
	})
	return out, nil
}

// ManyCoarsened is Coarsened for several entities (in the order given), as Many reads them.
func (r *Reader) ManyCoarsened(ctx context.Context, set string, c Coarse, entities []string, o Options) (map[string][]Window, error) {
	return r.byEntity(ctx, entities, func(ctx context.Context, e string) ([]Window, error) { return r.Coarsened(ctx, set, c, e, o) })
}

// hasAll reports whether w holds every aggregate named.
func hasAll(w Window, names []string) bool {
	for _, n := range names {
		if _, ok := w.Values[n]; !ok {
			return false
		}
	}
	return true
}

// mod is x mod m in [0, m), for times before 1970 too.
func mod(x, m int64) int64 {
	r := x % m
	if r < 0 {
		r += m
	}
	return r
}

func floorTo(x, m int64) int64 { return x - mod(x, m) }

func ceilTo(x, m int64) int64 {
	if r := mod(x, m); r != 0 {
		return x - r + m
	}
	return x
}
