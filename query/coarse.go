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
	cr, ok := coarseRead(c, o)
	if !ok {
		return r.Columns(ctx, set, entity, o)
	}
	coarse, err := r.Columns(ctx, c.Set, entity, cr.co)
	if err != nil {
		return nil, err
	}
	p := cr.plan(coarse)
	finer := make([]*Columns, len(p.gaps))
	for i, fo := range p.gaps {
		if finer[i], err = r.Columns(ctx, set, entity, fo); err != nil {
			return nil, err
		}
	}
	return cr.merge(entity, set, p, finer), nil
}

// manyCoarsened is CoarsenedColumns for several entities (no limit, newest first), each read of
// the coarser set, then of the finer set, batched (batchRead).
func (r *Reader) manyCoarsened(ctx context.Context, set string, c Coarse, entities []string, o Options) ([]*Columns, error) {
	cr, ok := coarseRead(c, o)
	if !ok {
		return r.manyBatched(ctx, set, entities, o)
	}
	reads := make([]entityRead, len(entities))
	for i, e := range entities {
		reads[i] = entityRead{e, cr.co}
	}
	coarse, err := r.batchRead(ctx, c.Set, reads)
	if err != nil {
		return nil, err
	}
	plans := make([]coarsePlan, len(entities))
	reads = reads[:0]
	for i, e := range entities {
		plans[i] = cr.plan(coarse[i])
		for _, fo := range plans[i].gaps {
			reads = append(reads, entityRead{e, fo})
		}
	}
	fine, err := r.batchRead(ctx, set, reads)
	if err != nil {
		return nil, err
	}
	out := make([]*Columns, len(entities))
	for i, e := range entities {
		n := len(plans[i].gaps)
		out[i] = cr.merge(e, set, plans[i], fine[:n])
		fine = fine[n:]
	}
	return out, nil
}

// coarsened is a coarsened read's range: c's whole windows in [lo, hi), of size ms.
type coarsened struct {
	c        Coarse
	o        Options
	co       Options // the read of c's windows
	size     int64
	from, to int64
	lo, hi   int64
	asked    []string
}

// coarseRead is the coarsened read of o through c; false when o cannot be read so (no range, a
// limit, a range that holds no whole window of c).
func coarseRead(c Coarse, o Options) (coarsened, bool) {
	size := c.Size.Milliseconds()
	if size <= 0 || o.From.IsZero() || o.To.IsZero() || o.Limit != 0 {
		return coarsened{}, false
	}
	cr := coarsened{c: c, o: o, size: size, from: o.From.UnixMilli(), to: o.To.UnixMilli(), asked: o.Aggregates}
	cr.lo, cr.hi = ceilTo(cr.from, size), floorTo(cr.to, size)
	if cr.lo >= cr.hi {
		return coarsened{}, false
	}
	if len(cr.asked) == 0 {
		cr.asked = c.Aggregates
	}
	// Up to just past the last start of c's windows in range, not to hi: a cache reads the part
	// of a range it does not keep, and [hi-size+1, hi) can hold no window of c.
	cr.co = Options{From: time.UnixMilli(cr.lo), To: time.UnixMilli(cr.hi - cr.size + 1), NoLive: true, Aggregates: o.Aggregates, Budget: o.Budget}
	return cr, true
}

// coarsePlan is an entity's coarsened read once its coarser windows are read: those it uses, and
// the reads of the finer set for the rest.
type coarsePlan struct {
	coarse *Columns
	used   map[int64]bool
	gaps   []Options
}

// plan keeps the coarser windows that answer for their period (final, whole, holding every
// aggregate asked) and says what the finer set must answer: the range's edges, and every period
// without a usable window (up to maxGapScans reads, then one read over them all).
func (cr coarsened) plan(coarse *Columns) coarsePlan {
	askedCols := make([]int, len(cr.asked))
	for i, n := range cr.asked {
		askedCols[i] = coarse.Column(n)
	}
	usable := func(i int) bool {
		s := coarse.starts[i]
		if !coarse.Final(i) || s%cr.size != 0 || coarse.ends[i]-s != cr.size {
			return false
		}
		for _, k := range askedCols {
			if k < 0 || coarse.cols[k].cells[i].kind == 0 {
				return false
			}
		}
		return true
	}
	p := coarsePlan{coarse: coarse.filter(usable), used: map[int64]bool{}}
	for i := range p.coarse.Len() {
		p.used[p.coarse.starts[i]] = true
	}
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
	add(cr.from, cr.lo)
	for s := cr.lo; s < cr.hi; s += cr.size {
		if !p.used[s] {
			add(s, s+cr.size)
		}
	}
	add(cr.hi, cr.to)
	if len(gaps) > maxGapScans {
		gaps = []span{{gaps[0].from, gaps[len(gaps)-1].to}}
	}
	for _, g := range gaps {
		fo := cr.o
		fo.OldestFirst, fo.Limit = false, 0
		fo.From, fo.To = time.UnixMilli(g.from), time.UnixMilli(g.to)
		p.gaps = append(p.gaps, fo)
	}
	return p
}

// merge joins the coarser windows used and the finer set's answers to the gaps (in order), less
// the finer windows inside a period a coarser window answers.
func (cr coarsened) merge(entity, set string, p coarsePlan, finer []*Columns) *Columns {
	for i, ws := range finer {
		finer[i] = ws.filter(func(k int) bool { s := ws.starts[k]; return !p.used[s-mod(s, cr.size)] })
	}
	// The gaps are in order and apart, and no finer window left lies in a coarser one's period:
	// the two merge by start.
	fine := concat(entity, set, finer...)
	coarse := p.coarse
	if coarse.Len() == 0 {
		return fine
	}
	out := newColumns(entity, set, nil)
	out.coarser = cr.c.Set
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
	return out
}

// ManyCoarsened is Coarsened for several entities (in the order given), as Many reads them.
func (r *Reader) ManyCoarsened(ctx context.Context, set string, c Coarse, entities []string, o Options) (map[string][]Window, error) {
	return r.byEntity(ctx, set, &c, entities, o)
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
