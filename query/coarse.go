package query

import (
	"context"
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
	cs, err := r.CoarsenedColumns(ctx, set, c, entity, o)
	if err != nil {
		return nil, err
	}
	return cs.Windows(o.OldestFirst), nil
}

// CoarsenedColumns is Coarsened, as Columns (oldest first).
func (r *Reader) CoarsenedColumns(ctx context.Context, set string, c Coarse, entity string, o Options) (*Columns, error) {
	size := c.Size.Milliseconds()
	if size <= 0 || o.From.IsZero() || o.To.IsZero() || o.Limit != 0 {
		return r.Columns(ctx, set, entity, o)
	}
	from, to := o.From.UnixMilli(), o.To.UnixMilli()
	lo, hi := ceilTo(from, size), floorTo(to, size)
	if lo >= hi {
		return r.Columns(ctx, set, entity, o)
	}
	asked := o.Aggregates
	if len(asked) == 0 {
		asked = c.Aggregates
	}
	// Up to just past the last start of c's windows in range, not to hi: a cache reads the part
	// of a range it does not keep, and [hi-size+1, hi) can hold no window of c.
	co := Options{From: time.UnixMilli(lo), To: time.UnixMilli(hi - size + 1), NoLive: true, Aggregates: o.Aggregates, Budget: o.Budget}
	coarse, err := r.Columns(ctx, c.Set, entity, co)
	if err != nil {
		return nil, err
	}
	askedCols := make([]int, len(asked))
	for i, n := range asked {
		askedCols[i] = coarse.Column(n)
	}
	usable := func(i int) bool {
		s := coarse.starts[i]
		if !coarse.Final(i) || s%size != 0 || coarse.ends[i]-s != size {
			return false
		}
		for _, k := range askedCols {
			if k < 0 || coarse.cols[k].cells[i].kind == 0 {
				return false
			}
		}
		return true
	}
	used := map[int64]bool{}
	coarse = coarse.filter(usable)
	for i := range coarse.Len() {
		used[coarse.starts[i]] = true
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
	var finer []*Columns
	for _, g := range gaps {
		fo.From, fo.To = time.UnixMilli(g.from), time.UnixMilli(g.to)
		ws, err := r.Columns(ctx, set, entity, fo)
		if err != nil {
			return nil, err
		}
		finer = append(finer, ws.filter(func(i int) bool { s := ws.starts[i]; return !used[s-mod(s, size)] }))
	}
	// The gaps are in order and apart, and no finer window left lies in a coarser one's period:
	// the two merge by start.
	fine := concat(entity, set, finer...)
	if coarse.Len() == 0 {
		return fine, nil
	}
	out := newColumns(entity, set, nil)
	out.coarser = c.Set
	out.grow(coarse.Len() + fine.Len())
	cm, fm := out.columnMap(coarse), out.columnMap(fine)
	for i, j := 0, 0; i < coarse.Len() || j < fine.Len(); {
		if j == fine.Len() || (i < coarse.Len() && coarse.starts[i] < fine.starts[j]) {
			out.addFrom(coarse, i, cm)
			out.flags[len(out.flags)-1] |= flagCoarser
			i++
		} else {
			out.addFrom(fine, j, fm)
			j++
		}
	}
	return out, nil
}

// ManyCoarsened is Coarsened for several entities (in the order given), as Many reads them.
func (r *Reader) ManyCoarsened(ctx context.Context, set string, c Coarse, entities []string, o Options) (map[string][]Window, error) {
	return r.byEntity(ctx, entities, func(ctx context.Context, e string) ([]Window, error) { return r.Coarsened(ctx, set, c, e, o) })
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
