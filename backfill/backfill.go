// Package backfill computes aggregate windows from the facts table: the history of a set added
// after its events went by (an aggregation fixed is such a set too, under a new name).
//
// The facts sink keeps every raw event in HBase with its entity, event time and source position
// (partition and offset). Backfill reads them back, puts each source partition's events in offset
// order, which is the order the processor read them in, and runs the processor's own engine over
// them in memory: the topology's decoder, Where, types, windows and aggregations, with the same
// lateness decisions (an event is late by its own partition's earlier events, so the same events
// are late as live). The finals of the windows asked for go through the aggregates sink's encoder
// (sinks.AggregatesEncoder) to the aggregates table and its key index: a cell written here is the
// cell the live path writes for that window, byte for byte.
//
// What the live path decided from the wall clock is not replayed: a partition's idle advance made
// the events that came after it late by a clock, which backfill, reading all of them at once, does
// not have. At the end of the facts backfill closes what is still open as an idle partition would.
//
// Rollup sets (keyed by anything but the entity) are backfilled too: the run holds every
// partition, and their partials and progress cross partitions through a loop in memory, as
// through the loop topic live. Topologies of more than one source are not backfilled yet: a fact
// does not record its source topic.
package backfill

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/abacus-stream/abacus/internal/engine"
	"github.com/abacus-stream/abacus/internal/plan"
	"github.com/abacus-stream/abacus/partitioner"
	"github.com/abacus-stream/abacus/schema"
	"github.com/abacus-stream/abacus/sinks"
	"github.com/abacus-stream/abacus/state"
	"github.com/abacus-stream/abacus/store"
	"github.com/abacus-stream/abacus/topology"
	"github.com/abacus-stream/abacus/totals"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Options say what to backfill, from where, and to where.
type Options struct {
	// Topology is the topology whose sets are backfilled, as the processor runs it.
	Topology *topology.Topology
	// Sets are the names of the sets to write.
	Sets []string
	// Live is, per source partition, the processor's record of it (read from the group table):
	// each set's live start and grace, and the partition's stream time. A window belongs to the
	// processor unless it started before the set's live start on the entity's partition; backfill
	// writes only the others, once that stream time has closed them (every event the processor
	// counts for them is then in the facts table). A set the processor ran from the group's start
	// is the processor's alone: backfill refuses it.
	Live []*state.Partition
	// From and Until, when set, bound the windows written further: those that start at or after
	// From and end at or before Until. An Until past every window backfill may write is refused,
	// naming the live start.
	From, Until time.Time
	// Partitions is the source topic's partition count (default: as many as Live has). Every
	// fact must be in the partition goka's partitioner gives its entity.
	Partitions int
	// Share, when Of is above 1, makes this run one of Of workers: it runs the source
	// partitions p with p % Of == Index, and the others run the rest. An entity's windows need
	// only its own partition's facts, in offset order; a rollup needs every partition's, so a
	// shared run refuses rollup sets.
	Share Share

	// Facts reads the facts table, FactsTable, family Family.
	Facts      store.Reader
	FactsTable string
	Family     string
	// Out receives the cells, made as Encoder makes them (its Table, Family, SaltBuckets and key
	// index settings: the aggregates sink's own). Each run encodes with an encoder of its own
	// with these settings: one that stopped on an error must not be taken to have written the
	// key index rows it had encoded.
	Out     store.Writer
	Encoder *sinks.AggregatesEncoder
	// BatchCells bounds the cells of one write (default 2000).
	BatchCells int
	// MemoryBytes bounds the facts held in memory (default 512 MiB); the others go to files in
	// a folder under TempDir (default the system's), removed at the end.
	MemoryBytes int64
	TempDir     string
	// Progress, if set, is told of each stage's progress.
	Progress func(Progress)
	// Checkpoints, if set, is where the run saves its progress and resumes from.
	Checkpoints *Checkpoints
	// Tables are the topology's tables (topology.NewTable), which its joins look up by event
	// time, as the processor does: open them as the processor group's (tables.OpenAll with its
	// group), whose versions topics hold every version the live run read; a *tables.Memory for
	// tables kept elsewhere. Required when the topology has tables.
	Tables engine.Tables
}

// Share is a worker's share of a backfill: the source partitions p with p % Of == Index.
type Share struct{ Index, Of int }

// mine reports whether partition p is the share's.
func (s Share) mine(p int32) bool { return s.Of <= 1 || int(p)%s.Of == s.Index }

// Progress is what a run has done so far.
type Progress struct {
	Stage        string // "read" (the facts table), "run" (the engine over them) or "done"
	Facts        int64  // facts read (for windows in range and the events after them)
	Applied      int64  // facts run through the engine, of Facts
	Partitions   int    // source partitions whose facts have all run
	Windows      int64  // finals written
	Cells        int64  // cells written (windows and key index rows)
	Undecodable  int64  // facts whose row or qualifier could not be read
	DeadLetters  int64  // facts the engine refused for these sets (counted, not sent to the dead-letter topic)
	NotClosed    int64  // windows before the live start that the processor has not closed yet: run again later
	OutsideRange int64  // facts too early to touch a window in range
	OtherShares  int64  // facts of partitions other workers run (Share)
	OnDisk       int64  // facts that did not fit in MemoryBytes, written to files and read back
	Resumed      int64  // facts run before the checkpoint this run resumed from, not run again
	Checkpoints  int    // checkpoints saved
	Parallel     bool   // the partitions ran side by side (entity sets only, more than one core)
	ReadRanges   int    // salt buckets of the facts table scanned side by side (1: one scan)
}

// Summary is what a run did.
type Summary = Progress

// Run backfills the sets of opts and returns what it did.
func Run(ctx context.Context, opts Options) (Summary, error) {
	b, err := prepare(opts)
	if err != nil {
		return Summary{}, err
	}
	defer b.facts.close()
	if err := b.read(ctx); err != nil {
		return b.sum, err
	}
	b.report("read")
	resume, err := b.loadCheckpoint(ctx)
	if err != nil {
		return b.sum, err
	}
	var cancel context.CancelFunc
	b.wctx, cancel = context.WithCancel(ctx)
	defer cancel()
	b.w = startWriter(b.wctx, b.opts.Out, b.enc.EpochCells)
	err = b.runAll(ctx, resume)
	if err == nil {
		err = b.flush(ctx)
	}
	if err != nil {
		cancel()
	}
	err = errors.Join(err, b.w.close())
	b.sum.Cells = b.cellsBefore + b.w.cells.Load()
	if err == nil {
		err = b.doneCheckpoint(ctx)
	}
	if err != nil {
		return b.sum, err
	}
	b.sum.Stage = "done"
	b.report("done")
	return b.sum, nil
}

// backfill is one run.
type backfill struct {
	opts     Options
	plan     *plan.Plan // the topology's, reduced to the sets asked for
	want     map[string]bool
	from     int64 // ms; windows start at or after
	until    int64 // ms; windows end at or before
	readFrom int64 // ms; facts earlier than this touch no window in range
	facts    *facts
	last     int64     // the latest event time read
	live     [][]owner // per set of plan, per partition
	enc      *sinks.AggregatesEncoder
	w        *writer
	wctx     context.Context // the writers'
	// cellsBefore counts the cells of the writers before w (one per checkpoint) and of the run
	// resumed from.
	cellsBefore int64
	// emitMu, while workers run partitions side by side, guards what they share: the encoder,
	// the batch and the counts of emit.
	emitMu   *sync.Mutex
	cpSlot   int   // the checkpoint row's slot holding the last checkpoint
	cpStamp  int64 // the checkpoint cells' last timestamp
	entities map[string]string
	// nextReport is the count of facts read at which read reports its progress next.
	nextReport int64
	nParts     int
	dec        totals.Decoder
	batch      []store.Cell
	sum        Summary
}

// fact is one event read back from the facts table.
type fact struct {
	offset int64
	entity string
	time   int64
	value  []byte
}

func prepare(opts Options) (*backfill, error) {
	p := plan.Of(opts.Topology)
	if p == nil {
		return nil, errors.New("backfill: topology is nil or zero (make it with topology.Builder.Build)")
	}
	var errs []error
	if len(p.Sources) != 1 {
		errs = append(errs, fmt.Errorf("backfill: topology %s has %d sources; backfill reads topologies of one (a fact does not record its source topic)", p.Name, len(p.Sources)))
	}
	if len(p.Tables) > 0 && opts.Tables == nil {
		errs = append(errs, fmt.Errorf("backfill: topology %s joins tables, and no Tables were given (open them as the processor group's: tables.OpenAll)", p.Name))
	}
	if opts.Facts == nil || opts.FactsTable == "" || opts.Family == "" {
		errs = append(errs, errors.New("backfill: no facts table to read (Facts, FactsTable, Family)"))
	}
	if opts.Out == nil || opts.Encoder == nil {
		errs = append(errs, errors.New("backfill: nowhere to write (Out, Encoder)"))
	} else if err := opts.Encoder.Check(); err != nil {
		errs = append(errs, fmt.Errorf("backfill: %w", err))
	}
	if !opts.From.IsZero() && !opts.Until.IsZero() && !opts.From.Before(opts.Until) {
		errs = append(errs, fmt.Errorf("backfill: the range from %s until %s is empty", opts.From.Format(time.RFC3339), opts.Until.Format(time.RFC3339)))
	}
	if opts.Partitions < 0 {
		errs = append(errs, fmt.Errorf("backfill: %d partitions", opts.Partitions))
	}
	if opts.Share.Of > 1 && (opts.Share.Index < 0 || opts.Share.Index >= opts.Share.Of) || opts.Share.Of < 0 {
		errs = append(errs, fmt.Errorf("backfill: share %d of %d: the index must be from 0 to %d", opts.Share.Index, opts.Share.Of, opts.Share.Of-1))
	}
	want := map[string]bool{}
	for _, s := range opts.Sets {
		want[s] = true
	}
	byName := map[string]*plan.Set{}
	for _, s := range p.Sets {
		byName[s.Name] = s
	}
	var names []string
	for s := range want {
		names = append(names, s)
	}
	slices.Sort(names)
	for _, s := range names {
		set := byName[s]
		switch {
		case set != nil && opts.Share.Of > 1 && p.Sources[set.Source].Repartition:
			errs = append(errs, fmt.Errorf("backfill: set %q takes re-keyed events, which cross partitions: one run must do it all (no Share)", s))
		case set != nil && set.Rollup != nil && opts.Share.Of > 1:
			errs = append(errs, fmt.Errorf("backfill: set %q is a rollup: it takes every partition's share, so one run must do it all (no Share)", s))
		case set == nil:
			var known []string
			for _, k := range p.Sets {
				known = append(known, k.Name)
			}
			errs = append(errs, fmt.Errorf("backfill: topology %s has no set %q (it has %s)", p.Name, s, strings.Join(known, ", ")))
		}
	}
	if len(want) == 0 {
		errs = append(errs, errors.New("backfill: name the sets to backfill (Sets)"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	reduced := reduce(p, want)
	b := &backfill{opts: opts, plan: reduced, want: want, from: minInt64, until: maxInt64,
		nParts: opts.Partitions, entities: map[string]string{}}
	if !opts.From.IsZero() {
		b.from = opts.From.UnixMilli()
	}
	if !opts.Until.IsZero() {
		b.until = opts.Until.UnixMilli()
	}
	if err := b.owners(); err != nil {
		return nil, err
	}
	e := opts.Encoder
	b.enc = &sinks.AggregatesEncoder{Table: e.Table, Family: e.Family, SaltBuckets: e.SaltBuckets,
		KeyIndex: e.KeyIndex, KeyIndexTTL: e.KeyIndexTTL, KeyIndexCache: e.KeyIndexCache}
	b.readFrom = b.from
	for _, s := range reduced.Sets {
		if s.Window.Size() == 0 { // sessions merge back as far as their events reach
			b.readFrom = minInt64
			break
		}
		// An event this early still reaches no window in range; its lateness never decides one
		// there either (it moves its partition's watermark below every window that is).
		if b.from != minInt64 {
			b.readFrom = min(b.readFrom, b.from-s.Window.Size()-s.Grace)
		}
	}
	if b.opts.BatchCells <= 0 {
		b.opts.BatchCells = 2000
	}
	if b.opts.MemoryBytes <= 0 {
		b.opts.MemoryBytes = 512 << 20
	}
	b.facts = newFacts(b.opts.MemoryBytes, b.opts.TempDir)
	return b, nil
}

const (
	minInt64 = math.MinInt64
	maxInt64 = math.MaxInt64
)

// owners reads, from the processor's partition records, from when each set is the processor's
// on each partition, and refuses what backfill may not write.
func (b *backfill) owners() error {
	if b.nParts == 0 {
		b.nParts = len(b.opts.Live)
	}
	if len(b.opts.Live) == 0 || len(b.opts.Live) != b.nParts {
		return fmt.Errorf("backfill: the processor's records of %d partitions, for a source of %d: backfill must know which windows the processor owns", len(b.opts.Live), b.nParts)
	}
	var errs []error
	b.live = make([][]owner, len(b.plan.Sets))
	for i, set := range b.plan.Sets {
		if !b.want[set.Name] {
			continue // a finer set run for a coarser one: none of its windows is written
		}
		b.live[i] = make([]owner, b.nParts)
		lastEnd := int64(minInt64) // the end of the latest window backfill may write
		latest, latestPart := int64(minInt64), 0
		fromStart := 0
		for p, rec := range b.opts.Live {
			var g *state.SetGrace
			if rec != nil {
				for j := range rec.Graces {
					if rec.Graces[j].Set == set.Name {
						g = &rec.Graces[j]
					}
				}
			}
			switch {
			case g == nil:
				errs = append(errs, fmt.Errorf("backfill: set %q does not run on partition %d yet: deploy the topology with it, then backfill what came before", set.Name, p))
				continue
			}
			closed := int64(minInt64) // a partition with no stream time yet has closed nothing
			if st := max(rec.StreamTime, rec.IdleStreamTime); st != minInt64 {
				closed = st - max(g.Grace, set.Grace)
			}
			b.live[i][p] = owner{liveFrom: g.LiveFrom, closed: closed}
			if g.LiveFrom == minInt64 {
				// The partition ran the set from its first event (from the group's start, or it had
				// none when the set came): every window of it there is the processor's.
				fromStart++
				continue
			}
			lastEnd = max(lastEnd, lastWindowEnd(set, g.LiveFrom))
			if g.LiveFrom > latest {
				latest, latestPart = g.LiveFrom, p
			}
		}
		if fromStart == b.nParts {
			errs = append(errs, fmt.Errorf("backfill: set %q ran from the processor group's start on every partition: every window of it is the processor's", set.Name))
		}
		if set.Rollup != nil && len(errs) == 0 {
			// A rollup window takes every partition's share: the owner gives it no total when it
			// started before any partition ran the set, and it is closed once every partition
			// closed it.
			all := owner{liveFrom: minInt64, closed: maxInt64}
			for _, o := range b.live[i] {
				all.liveFrom, all.closed = max(all.liveFrom, o.liveFrom), min(all.closed, o.closed)
			}
			for p := range b.live[i] {
				b.live[i][p] = all
			}
		}
		if b.until != maxInt64 && b.until > lastEnd && lastEnd != minInt64 {
			errs = append(errs, fmt.Errorf("backfill: set %q: later windows are the processor's (it runs the set from %s on partition %d); backfill until %s at the latest", set.Name,
				stamp(latest), latestPart, stamp(lastEnd)))
		}
	}
	return errors.Join(errs...)
}

func stamp(ms int64) string { return time.UnixMilli(ms).UTC().Format(time.RFC3339Nano) }

// owner is what a partition's record says of one set: windows that start before liveFrom are
// backfill's, once they end at or before closed.
type owner struct{ liveFrom, closed int64 }

// lastWindowEnd is the end of the last window of set that starts before liveFrom.
func lastWindowEnd(set *plan.Set, liveFrom int64) int64 {
	if set.Window.Size() == 0 {
		return liveFrom // sessions: as far as the live start
	}
	ws := set.Window.Assign(liveFrom-1, nil)
	end := liveFrom
	for _, w := range ws {
		end = max(end, w.End)
	}
	return end
}

// reduce returns a copy of p that runs only the sets in want, and the finer sets of the coarser
// ones among them (a coarser set takes what its finer set took: plan.Set.Finer), whose windows
// are not written: the engine then spends nothing on the others, and no rollup partial crosses
// partitions.
func reduce(p *plan.Plan, want map[string]bool) *plan.Plan {
	run := maps.Clone(want)
	for _, s := range p.Sets {
		if want[s.Name] {
			for f := s.Finer; f != nil; f = f.Finer {
				run[f.Name] = true
			}
		}
	}
	out := *p
	out.Sets = nil
	index := map[uint16]uint16{}
	for _, s := range p.Sets {
		if !run[s.Name] {
			continue
		}
		c := *s
		c.Index = uint16(len(out.Sets))
		index[s.Index] = c.Index
		out.Sets = append(out.Sets, &c)
	}
	for _, c := range out.Sets {
		if c.Finer != nil {
			c.Finer = out.Sets[index[c.Finer.Index]] // a finer set comes before its coarser ones
		}
	}
	out.Sources = nil
	for _, src := range p.Sources {
		c := *src
		c.Sets = nil
		for _, i := range src.Sets {
			if j, ok := index[i]; ok {
				c.Sets = append(c.Sets, j)
			}
		}
		out.Sources = append(out.Sources, &c)
	}
	return &out
}

// readers is how many salt buckets of the facts table are scanned at once: the table is
// pre-split on its buckets, so each scan keeps one region (of those a bucket has) busy.
const readers = 4

// read scans the facts table and keeps, per source partition, the facts late enough to matter.
// The facts' order does not matter (each partition's are put back in offset order), so a table
// of several salt buckets is scanned bucket by bucket, readers at once, into one collector.
func (b *backfill) read(ctx context.Context) error {
	spec := store.ScanSpec{Table: b.opts.FactsTable, Family: b.opts.Family}
	var rerr error
	collect := func(row []byte, cells []store.Cell) bool {
		entity, t, err := schema.ParseFactRow(row)
		if err != nil {
			b.sum.Undecodable += int64(len(cells))
			return true
		}
		// Every row of an entity names it again: one copy is kept.
		if e, ok := b.entities[entity]; ok {
			entity = e
		} else {
			b.entities[entity] = entity
		}
		if t < b.readFrom {
			b.sum.OutsideRange += int64(len(cells))
			return true
		}
		for _, c := range cells {
			_, part, offset, err := schema.ParseFactQualifier(c.Qualifier)
			if err != nil {
				b.sum.Undecodable++
				continue
			}
			if !b.opts.Share.mine(part) {
				b.sum.OtherShares++
				continue
			}
			if !b.plan.Sources[0].Repartition {
				if q := partitioner.Partition([]byte(entity), int32(b.nParts)); q != part || int(part) >= b.nParts {
					rerr = fmt.Errorf("backfill: entity %q was in source partition %d, where goka's partitioner puts it in %d of %d: say the source topic's partition count", entity, part, q, b.nParts)
					return false
				}
			} else if int(part) >= b.nParts {
				rerr = fmt.Errorf("backfill: facts name partition %d of the source, which has %d", part, b.nParts)
				return false
			}
			if rerr = b.facts.add(part, fact{offset: offset, entity: entity, time: t, value: c.Value}); rerr != nil {
				return false
			}
			b.last = max(b.last, t)
			b.sum.Facts++
			b.sum.OnDisk = b.facts.written
		}
		if b.sum.Facts >= b.nextReport {
			b.nextReport = b.sum.Facts + progressEvery
			b.report("read")
		}
		return ctx.Err() == nil
	}
	var err error
	if buckets := b.factBuckets(ctx); buckets > 1 {
		b.sum.ReadRanges = buckets
		err = scanBuckets(ctx, b.opts.Facts, spec, buckets, collect)
	} else {
		b.sum.ReadRanges = 1
		err = b.opts.Facts.Scan(ctx, spec, collect)
	}
	b.entities = nil
	if err == nil {
		err = rerr
	}
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		return fmt.Errorf("backfill: read facts table %s: %w", b.opts.FactsTable, err)
	}
	return nil
}

// emit takes a totals record of the engine: a final of a window in range goes to the table.
func (b *backfill) emit(ctx context.Context, part int32, value []byte) error {
	r, err := b.dec.Decode(value)
	if err != nil {
		return fmt.Errorf("backfill: the engine wrote a totals record this version cannot read: %w", err)
	}
	if !r.Final || !b.want[r.Set] || r.Start < b.from || r.End > b.until {
		return nil
	}
	o := b.live[b.plan.SetByName(r.Set).Index][part]
	if r.Start >= o.liveFrom {
		return nil // the processor's
	}
	if r.End > o.closed {
		b.sum.NotClosed++ // the processor has not closed it: facts may still come
		return nil
	}
	b.batch, err = b.enc.Encode(&kgo.Record{Value: value}, b.batch)
	if err != nil {
		return fmt.Errorf("backfill: window %s of %q at %d: %w", r.Set, r.Entity, r.Start, err)
	}
	b.sum.Windows++
	if len(b.batch) >= b.opts.BatchCells {
		return b.flush(ctx)
	}
	return nil
}

// flush hands the cells held to the writer, which writes them while the engine goes on; it
// returns the writer's error, if it has stopped on one.
func (b *backfill) flush(ctx context.Context) error {
	if len(b.batch) == 0 {
		return b.w.failed()
	}
	cells := b.batch
	b.batch = nil // the writer has these; the encoder cuts the next ones from fresh memory
	select {
	case b.w.in <- cells:
		return b.w.failed()
	case <-b.w.done:
		return b.w.failed()
	case <-ctx.Done():
		return ctx.Err()
	}
}

// sync waits until every cell the engine emitted so far is written.
func (b *backfill) sync(ctx context.Context) error {
	if err := b.flush(ctx); err != nil {
		return err
	}
	err := b.w.close()
	b.cellsBefore += b.w.cells.Load()
	b.w = startWriter(b.wctx, b.opts.Out, b.enc.EpochCells)
	return err
}

// writer writes batches of cells in the background, a few at most waiting, so that the engine
// does not wait for HBase at every batch.
type writer struct {
	out store.Writer
	// epochs gives the cells that move the epochs of the sets whose settled windows a landed
	// batch wrote: a backfill writes the past, which readers' caches must learn of.
	epochs func(cells []store.Cell, now time.Time) []store.Cell
	in     chan []store.Cell
	done   chan struct{} // closed when the writer has stopped
	cells  atomic.Int64  // written
	mu     sync.Mutex
	err    error
}

func startWriter(ctx context.Context, out store.Writer, epochs func([]store.Cell, time.Time) []store.Cell) *writer {
	w := &writer{out: out, epochs: epochs, in: make(chan []store.Cell, writers), done: make(chan struct{})}
	var wg sync.WaitGroup
	for range writers {
		wg.Go(func() {
			for cells := range w.in {
				err := w.write(ctx, cells, true)
				if err == nil && w.epochs != nil {
					err = w.write(ctx, w.epochs(cells, time.Now()), false)
				}
				if err != nil {
					w.mu.Lock()
					w.err = cmp.Or(w.err, err)
					w.mu.Unlock()
					return
				}
			}
		})
	}
	go func() {
		wg.Wait()
		close(w.done)
	}()
	return w
}

// writers is how many batches are written at once: a batch's cells are distinct from every
// other's and absolute, so their order does not matter, and HBase takes several requests to a
// server at once (the client's max_in_flight_per_server).
const writers = 4

// failed is the error the writer stopped on, if any.
func (w *writer) failed() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// close waits for the batches handed over, and returns the writer's error.
func (w *writer) close() error {
	close(w.in)
	<-w.done
	return w.failed()
}

// write writes cells, resending those that failed for a cause that may pass; count adds the
// written ones to the cells written.
func (w *writer) write(ctx context.Context, cells []store.Cell, count bool) error {
	for attempt := 0; len(cells) > 0; attempt++ {
		failed, err := w.out.Write(ctx, cells)
		if err != nil {
			if attempt >= 10 || ctx.Err() != nil {
				return fmt.Errorf("backfill: write %d cells: %w", len(cells), err)
			}
			sleep(ctx, attempt)
			continue
		}
		if count {
			w.cells.Add(int64(len(cells) - len(failed)))
		}
		var again []store.Cell
		for _, f := range failed {
			if f.Permanent || attempt >= 10 {
				c := cells[f.Index]
				return fmt.Errorf("backfill: write cell %x/%s of table %s: %w", c.Row, c.Qualifier, c.Table, f.Err)
			}
			again = append(again, cells[f.Index])
		}
		cells = again
		if len(cells) > 0 {
			sleep(ctx, attempt)
		}
	}
	return nil
}

func sleep(ctx context.Context, attempt int) {
	t := time.NewTimer(min(time.Duration(attempt+1)*200*time.Millisecond, 5*time.Second))
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

func (b *backfill) report(stage string) {
	if b.opts.Progress != nil {
		s := b.sum
		if b.w != nil {
			s.Cells = b.cellsBefore + b.w.cells.Load()
		}
		s.Stage = stage
		b.opts.Progress(s)
	}
}
