package engine

import (
	"fmt"
	"slices"
	"strings"

	"github.com/abacus-stream/abacus/internal/plan"
	"github.com/abacus-stream/abacus/state"
)

// rebuild reads the partition's local table: its record (idle advance, origins, layouts), its
// entities' fences (origin watermarks) and every entity's next close. Everything in the table is
// acknowledged by Kafka (it was recovered from the changelog, or kept from a clean stop), so
// closed windows are emitted again at the first close; whether their finals reached Kafka before
// is unknown, and the totals are the same.
func (pt *partition) rebuild() error {
	e := pt.e
	it, err := pt.tbl.Iterator()
	if err != nil {
		return fmt.Errorf("partition %d: iterate table: %w", pt.id, err)
	}
	defer it.Release()
	var ents []storedEntity
	var graces []state.SetGrace
	now := e.cfg.Now()
	for it.Next() {
		key := string(it.Key())
		v, err := it.Value()
		if err != nil {
			return fmt.Errorf("partition %d: read table: %w", pt.id, err)
		}
		if strings.HasPrefix(key, plan.TickKeyPrefix) {
			if graces, err = pt.restoreRecord(key, v); err != nil {
				return err
			}
			continue
		}
		ent, err := state.Decode(append([]byte(nil), v...))
		if err != nil {
			return fmt.Errorf("partition %d: key %q: %w", pt.id, key, err)
		}
		for _, f := range ent.Fences {
			og := pt.originOf(originKey{f.Topic, f.Partition})
			og.wm = max(og.wm, f.Watermark)
		}
		pt.st = max(pt.st, ent.StreamTime)
		ents = append(ents, storedEntity{key, ent})
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("partition %d: iterate table: %w", pt.id, err)
	}
	// A partition taken over has a backlog to read before its origins can be called quiet: every
	// origin gets a full IdleTimeout from now (old ticks replayed from the loop topic must not
	// close its windows before its records are read).
	for _, og := range pt.origins {
		og.lastAdvance = now
	}
	pt.recomputeEventST()
	pt.keepFinals(graces)
	if err := pt.knowLayout(e.layout); err != nil {
		return err
	}
	if err := pt.learnDescribedLayouts(ents); err != nil {
		return err
	}
	for _, s := range ents {
		if err := pt.convert(s.key, s.ent); err != nil {
			return err
		}
		pt.held += len(s.ent.Windows)
		pt.open += len(s.ent.Windows)
		if isOwnerKey(s.key) {
			for _, w := range s.ent.Windows {
				if w.Key != "" {
					pt.open-- // a slot: held, with no final of its own to come
				}
			}
		}
		if err := pt.registerContributions(s.key, s.ent); err != nil {
			return fmt.Errorf("partition %d: %w", pt.id, err)
		}
		pt.schedule(s.key, s.ent)
		if len(s.ent.Windows) == 0 {
			// Nothing open, nothing retained: only its fences kept it, until the record covers
			// them. The run that left it so knew it as empty; this one learns it here, or it would
			// stay for good (a close message asks again until the record covers it).
			pt.empties = append(pt.empties, s.key)
		}
	}
	pt.entities.Set(float64(len(ents)))
	pt.windowsDelta(0, 0)
	e.log.Debug("partition rebuilt", "partition", pt.id, "entities", len(ents), "windows", pt.held, "stream_time", pt.closeST())
	return nil
}

// storedEntity is an entity read from the local table by rebuild.
type storedEntity struct {
	key string
	ent *state.Entity
}

// restoreRecord takes the stream times, origins and layouts of the partition's record (key, v)
// into pt, and returns the grace floors it holds.
func (pt *partition) restoreRecord(key string, v []byte) ([]state.SetGrace, error) {
	rec, err := state.DecodePartition(v)
	if err != nil {
		return nil, fmt.Errorf("partition %d: record %q: %w", pt.id, key, err)
	}
	pt.idleST = max(pt.idleST, rec.IdleStreamTime)
	pt.st = max(pt.st, rec.StreamTime)
	pt.metaST = max(pt.metaST, rec.StreamTime)
	pt.metaIdleST = max(pt.metaIdleST, rec.IdleStreamTime)
	for _, o := range rec.Origins {
		k := originKey{o.Topic, o.Partition}
		og := pt.originOf(k)
		og.wm = max(og.wm, o.Watermark)
		og.done = max(og.done, o.Done)
		pt.metaWM[k] = max(pt.metaWM[k], o.Watermark)
		pt.metaDone[k] = max(pt.metaDone[k], o.Done)
	}
	if err := pt.restoreRollupEnds(rec); err != nil {
		return nil, err
	}
	for _, l := range rec.Layouts {
		if err := pt.knowLayout(l); err != nil {
			return nil, err
		}
		if l.Hash == pt.e.layout.Hash {
			pt.layoutHeld = true
		}
	}
	return rec.Graces, nil
}

// restoreRollupEnds takes in what the record holds of the source partitions' final partials, as
// the owner of rollup keys: per set, the ends up to which each sent every window's. A record of
// an earlier version holds each partition's progress as a stream time: the windows it closed are
// those its grace of the time closed (the record's, or the set's now when it holds none).
func (pt *partition) restoreRollupEnds(rec *state.Partition) error {
	check := func(n int) error {
		if n != len(pt.ru.progress) {
			return fmt.Errorf("partition %d: its record holds the rollup progress of %d partitions, the group has %d: a topology with rollups cannot change its partition count while it has windows open; start a new processor group",
				pt.id, n, len(pt.ru.progress))
		}
		return nil
	}
	take := func(set *plan.Set, ends func(p int) int64) {
		es := pt.ru.ends[set.Index]
		for p := range es {
			es[p] = max(es[p], ends(p))
		}
		d := slices.Min(es)
		pt.ru.done[set.Index] = max(pt.ru.done[set.Index], d)
		pt.ru.metaDone[set.Index] = max(pt.ru.metaDone[set.Index], d)
	}
	for _, se := range rec.RollupEnds {
		if err := check(len(se.Ends)); err != nil {
			return err
		}
		set := pt.e.plan.SetByName(se.Set)
		if set == nil || set.Rollup == nil {
			for p, live := range se.Live {
				pt.ru.keepForeign(se.Set, int32(p), live)
			}
			continue
		}
		take(set, func(p int) int64 { return se.Ends[p] })
		for p, l := range se.Live {
			if p < len(pt.ru.live[set.Index]) {
				pt.ru.live[set.Index][p] = max(pt.ru.live[set.Index][p], l)
			}
		}
	}
	if len(rec.Progress) == 0 {
		return nil
	}
	if err := check(len(rec.Progress)); err != nil {
		return err
	}
	for p, t := range rec.Progress {
		pt.ru.progress[p] = max(pt.ru.progress[p], t)
	}
	if len(rec.RollupEnds) > 0 {
		return nil
	}
	for _, set := range pt.e.plan.Sets {
		if set.Rollup == nil {
			continue
		}
		grace := set.Grace
		if g := rec.Grace(set.Name); g != nil {
			grace = g.Grace
		}
		take(set, func(p int) int64 {
			if t := rec.Progress[p]; t != minTime {
				return t - grace
			}
			return minTime
		})
	}
	return nil
}

// learnDescribedLayouts learns the layouts the record does not describe: one entity each (the
// describer) describes them, and all must be known before any entity that follows them is
// converted.
func (pt *partition) learnDescribedLayouts(ents []storedEntity) error {
	for _, s := range ents {
		if _, known := pt.layouts[s.ent.Layout]; known || s.ent.Layout == pt.e.layout.Hash || s.ent.Layout == 0 {
			continue
		}
		desc, err := s.ent.Described()
		if err != nil {
			return fmt.Errorf("partition %d: entity %q: %w", pt.id, s.key, err)
		}
		if desc != nil {
			if err := pt.knowLayout(*desc); err != nil {
				return err
			}
		}
	}
	return nil
}
