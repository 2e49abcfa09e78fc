package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// outputReader reads a system's output topic while it runs and checks every final against the
// expectation: right window, right totals, once.
type outputReader struct {
	cl     *kgo.Client
	decode func(*kgo.Record) (final, bool, error)
	expect *expectation

	mu       sync.Mutex
	st       outputStats
	seen     []bool
	lastRead time.Time
	err      error
}

// outputStats are the finals read back from one run.
type outputStats struct {
	finals     int64 // finals of real windows (sentinel windows never close)
	nonFinal   int64
	dups       int64
	wrong      int64 // expected window, other totals
	unknown    int64 // a window that should not have closed or does not exist
	count      int64
	sum        float64
	sumMax     float64
	lastAppend time.Time
	samples    []string
	// setFinals counts the finals of each set (setName, regionSet, globalSet) that matched.
	setFinals [3]int64
	// In a rollup workload, per window: closed is the newest broker append time of its entity
	// finals (when the last partition closed the window, near enough: each emits its finals as
	// it closes it), global the append time of its global final. The difference is how long the
	// global key's owner took to merge every partition's partial and emit the final.
	closed, global []time.Time
}

// newOutputReader reads topic from its start, decoding records with decode and checking them
// against x (nil: only counted).
func newOutputReader(brokers []string, topic string, decode func(*kgo.Record) (final, bool, error), x *expectation) (*outputReader, error) {
	// read_committed: Kafka Streams with exactly_once_v2 writes finals in transactions, and
	// only committed ones count.
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		return nil, fmt.Errorf("output reader: %w", err)
	}
	r := &outputReader{cl: cl, decode: decode, expect: x}
	if x != nil {
		r.seen = make([]bool, len(x.wins))
	}
	return r, nil
}

// run reads until ctx ends; a fetch error is kept for failed.
func (r *outputReader) run(ctx context.Context) {
	defer r.cl.Close()
	for {
		fs := r.cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return
		}
		var ferr error
		fs.EachError(func(t string, p int32, err error) {
			ferr = errors.Join(ferr, fmt.Errorf("read %s/%d: %w", t, p, err))
		})
		r.mu.Lock()
		if ferr != nil && r.err == nil {
			r.err = ferr
		}
		fs.EachRecord(r.add)
		if fs.NumRecords() > 0 {
			r.lastRead = time.Now()
		}
		r.mu.Unlock()
	}
}

// add checks one output record; r.mu is held.
func (r *outputReader) add(rec *kgo.Record) {
	f, isFinal, err := r.decode(rec)
	if err != nil {
		if r.err == nil {
			r.err = fmt.Errorf("output record %s/%d@%d: %w", rec.Topic, rec.Partition, rec.Offset, err)
		}
		return
	}
	if strings.HasPrefix(f.entity, sentinelPrefix) || strings.HasPrefix(f.entity, probePrefix) {
		return
	}
	st := &r.st
	if !isFinal {
		st.nonFinal++
		return
	}
	st.finals++
	st.count += f.agg.count
	st.sum += f.agg.sum
	st.sumMax += f.agg.max
	if rec.Timestamp.After(st.lastAppend) {
		st.lastAppend = rec.Timestamp
	}
	if r.expect == nil {
		return
	}
	want, i, ok := r.expect.lookup(f.set, f.entity, f.start)
	sample := func(what string) {
		if len(st.samples) < 5 {
			st.samples = append(st.samples, fmt.Sprintf("%s %s %s window %s: got %+v, want %+v",
				what, f.set, f.entity, time.UnixMilli(f.start).UTC().Format(time.TimeOnly), f.agg, want))
		}
	}
	switch {
	case !ok:
		st.unknown++
		sample("unexpected")
	case r.seen[i]:
		st.dups++
		sample("duplicate")
	case f.agg != want:
		r.seen[i] = true
		st.wrong++
		sample("wrong")
	default:
		r.seen[i] = true
		set := r.expect.setOf(i)
		st.setFinals[set]++
		if r.expect.rollup {
			st.noteTime(r.expect, set, int((f.start-r.expect.base)/windowMs), rec.Timestamp)
		}
	}
}

// noteTime notes when a final of window wi of a rollup workload was appended: the newest of its
// entity finals, its global final.
func (st *outputStats) noteTime(x *expectation, set, wi int, at time.Time) {
	if st.closed == nil {
		st.closed, st.global = make([]time.Time, x.windows), make([]time.Time, x.windows)
	}
	switch set {
	case 0:
		if at.After(st.closed[wi]) {
			st.closed[wi] = at
		}
	case 2:
		st.global[wi] = at
	}
}

// globalLags returns, per window of a rollup workload, the global final's append time minus the
// window's close (the newest of its entity finals); a window missing either has none.
func (st outputStats) globalLags() []time.Duration {
	var lags []time.Duration
	for wi := range st.closed {
		if !st.closed[wi].IsZero() && !st.global[wi].IsZero() {
			lags = append(lags, st.global[wi].Sub(st.closed[wi]))
		}
	}
	return lags
}

// received is the number of finals of real windows read so far.
func (r *outputReader) received() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.st.finals
}

// failed is the first error reading or decoding the topic, or nil.
func (r *outputReader) failed() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// drain waits until the reader has read nothing for quiet (the writer has exited, so what is in
// the topic is all there will be).
func (r *outputReader) drain(quiet time.Duration) {
	start := time.Now()
	for {
		r.mu.Lock()
		last := r.lastRead
		r.mu.Unlock()
		if last.Before(start) {
			last = start
		}
		if time.Since(last) >= quiet {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stats is what the reader has read so far.
func (r *outputReader) stats() outputStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.st
}

// check compares what was read with the expectation, and says everything that differs.
func (st outputStats) check(x *expectation) error {
	var bad []string
	if st.finals != int64(x.finals) {
		bad = append(bad, fmt.Sprintf("%d finals, want %d", st.finals, x.finals))
	}
	for i, name := range []string{setName, regionSet, globalSet} {
		if st.setFinals[i] != int64(x.setFinals[i]) {
			bad = append(bad, fmt.Sprintf("%d correct finals of set %s, want %d", st.setFinals[i], name, x.setFinals[i]))
		}
	}
	if st.count != x.count {
		bad = append(bad, fmt.Sprintf("counts sum to %d, want %d", st.count, x.count))
	}
	if st.sum != x.sum {
		bad = append(bad, fmt.Sprintf("sums sum to %g, want %g", st.sum, x.sum))
	}
	if st.sumMax != x.sumMax {
		bad = append(bad, fmt.Sprintf("maxima sum to %g, want %g", st.sumMax, x.sumMax))
	}
	for _, c := range []struct {
		n    int64
		what string
	}{{st.dups, "windows finalized twice"}, {st.wrong, "finals with wrong totals"}, {st.unknown, "finals of windows that should not exist"}, {st.nonFinal, "non-final totals"}} {
		if c.n > 0 {
			bad = append(bad, fmt.Sprintf("%d %s", c.n, c.what))
		}
	}
	if len(bad) == 0 {
		return nil
	}
	msg := "FINALS DO NOT MATCH: " + strings.Join(bad, "; ")
	if len(st.samples) > 0 {
		msg += "\n    " + strings.Join(st.samples, "\n    ")
	}
	return errors.New(msg)
}
