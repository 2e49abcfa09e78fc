package backfill

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// parallel reports whether the run's partitions are independent: no set is a rollup and no
// event is re-keyed, so nothing crosses partitions and each can run in a goroutine of its own,
// as a processor group's members run theirs. An entity's windows need only its partition's facts
// in offset order; the interleaving of partitions never mattered.
func (b *backfill) parallel(r *run) bool {
	if runtime.GOMAXPROCS(0) < 2 || b.plan.HasRollups() || b.plan.Sources[0].Repartition {
		return false
	}
	n := 0
	for _, h := range r.heads {
		if h != nil && h.peek() != nil {
			n++
		}
	}
	return n > 1
}

// runParallel runs each partition's facts in a goroutine of its own. Checkpoints pause every
// worker between two facts, so that the state saved is each partition's after a prefix of its
// facts, and the writer has every cell emitted before.
func (b *backfill) runParallel(ctx context.Context, r *run) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	b.emitMu = &sync.Mutex{}
	defer func() { b.emitMu = nil }()
	var (
		applied, finished atomic.Int64
		wg                sync.WaitGroup
		errMu             sync.Mutex
		firstErr          error
	)
	applied.Store(b.sum.Applied)
	finished.Store(int64(b.sum.Partitions))
	fail := func(err error) {
		errMu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		errMu.Unlock()
		cancel()
	}
	bar := &barrier{}
	for p, h := range r.heads {
		if h == nil || h.peek() == nil {
			continue
		}
		w := &run{b: b, ctx: ctx, tables: r.tables, heads: r.heads, topic: r.topic, loop: r.loop, tickKeys: r.tickKeys,
			now: r.now, source: r.source, onLoop: r.onLoop, loopOff: r.loopOff, next: r.next, worker: true, only: int32(p)}
		bar.join()
		wg.Go(func() {
			defer bar.leave()
			for n := 1; ; n++ {
				f := h.peek()
				if f == nil {
					finished.Add(1)
					return
				}
				if err := w.deliver(w.topic, int32(p), f.offset, f.entity, f.value, time.UnixMilli(f.time), w.source); err != nil {
					fail(err)
					return
				}
				w.next[p] = f.offset + 1
				if err := h.advance(); err != nil {
					fail(err)
					return
				}
				applied.Add(1)
				if n%checkEvery == 0 {
					if ctx.Err() != nil {
						return
					}
					bar.wait()
				}
			}
		})
	}
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	counts := func() {
		b.sum.Applied, b.sum.Partitions = applied.Load(), int(finished.Load())
	}
	progress := time.NewTicker(time.Second)
	defer progress.Stop()
	var save <-chan time.Time
	if b.opts.Checkpoints != nil {
		t := time.NewTicker(b.checkpointEvery())
		defer t.Stop()
		save = t.C
	}
	for {
		select {
		case <-done:
			counts()
			if firstErr != nil {
				return firstErr
			}
			return ctx.Err()
		case <-progress.C:
			b.emitMu.Lock()
			counts()
			b.report("run")
			b.emitMu.Unlock()
		case <-save:
			if !bar.pause(done) {
				continue // the workers are done
			}
			counts()
			err := b.saveCheckpoint(ctx, r.snapshot())
			bar.resume()
			if err != nil {
				fail(err)
				<-done
				return firstErr
			}
			b.report("checkpoint")
		}
	}
}

// barrier pauses a run's workers between two facts.
type barrier struct {
	mu       sync.Mutex
	running  int           // workers not done
	paused   int           // workers waiting in wait
	want     bool          // a pause is asked for
	allIn    chan struct{} // closed when every running worker waits
	released chan struct{} // closed when the pause ends
}

func (b *barrier) join() { b.mu.Lock(); b.running++; b.mu.Unlock() }

// leave is a worker's end: a pause no longer waits for it.
func (b *barrier) leave() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.running--
	b.check()
}

func (b *barrier) check() {
	if b.want && b.paused == b.running && b.allIn != nil {
		close(b.allIn)
		b.allIn = nil
	}
}

// wait holds a worker while a pause is asked for.
func (b *barrier) wait() {
	b.mu.Lock()
	if !b.want {
		b.mu.Unlock()
		return
	}
	b.paused++
	rel := b.released
	b.check()
	b.mu.Unlock()
	<-rel
}

// pause asks the workers to stop and waits until each has, or every one is done (false then).
func (b *barrier) pause(done <-chan struct{}) bool {
	b.mu.Lock()
	b.want, b.paused = true, 0
	all := make(chan struct{})
	b.allIn, b.released = all, make(chan struct{})
	b.check()
	b.mu.Unlock()
	select {
	case <-all:
		return true
	case <-done:
		b.resume()
		return false
	}
}

// resume lets the paused workers go on.
func (b *barrier) resume() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.want, b.paused, b.allIn = false, 0, nil
	close(b.released)
}

// crossing is the error of a loop message for a partition other than the worker's own, which a
// parallel run never expects (parallel says when it runs).
func crossing(from, to int32) error {
	return fmt.Errorf("backfill: a loop message from partition %d to %d in a run of independent partitions", from, to)
}
