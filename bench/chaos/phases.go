package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/abacus-stream/abacus/internal/chaos/stream"
	"github.com/abacus-stream/abacus/internal/kafkaread"
	"github.com/abacus-stream/abacus/partitioner/franz"
	"github.com/abacus-stream/abacus/schema"
	"github.com/twmb/franz-go/pkg/kgo"
)

// chaosPhase produces the stream while injecting faults, then closes the stream with the flush
// events and waits until the pipeline has drained. It says false, with the reason in the summary,
// when the pipeline did not drain.
func (d *driver) chaosPhase(ctx context.Context, rc *runCfg, f *faults, rng *rand.Rand, sum *summary) (bool, error) {
	o := d.o
	if err := d.startRoles(rc); err != nil {
		return false, err
	}
	defer d.stopRoles(rc)
	sum.roles = rc.roles

	produceCtx, stopProducing := context.WithCancel(ctx)
	defer stopProducing()
	prodDone := make(chan error, 1)
	gen := d.generator(sum)
	t0 := time.Now()
	go func() { prodDone <- d.produce(produceCtx, gen, sum) }()

	faultCtx, stopFaults := context.WithCancel(ctx)
	var wg sync.WaitGroup
	// The kill loop and the fault schedule run at once: each gets a generator of its own (a
	// *rand.Rand is not safe for concurrent use), both derived from the seed.
	kills := rand.New(rand.NewPCG(rng.Uint64(), 2))
	wg.Go(func() { d.killRoles(faultCtx, rc, kills) })
	scheduleDone := make(chan struct{})
	go func() {
		defer close(scheduleDone)
		d.injectFaults(ctx, f, rng)
	}()

	// Role kills go on while the stream is produced and the scheduled faults run, all of which
	// may take longer than planned.
	select {
	case <-ctx.Done():
		stopFaults()
		wg.Wait()
		return false, ctx.Err()
	case <-time.After(o.duration):
	}
	<-scheduleDone
	if err := <-prodDone; err != nil {
		stopFaults()
		wg.Wait()
		return false, err
	}
	stopFaults()
	wg.Wait()
	d.logf("stream produced and faults done")
	sum.produce = time.Since(t0)
	// Every role runs again (a killed one was restarted; make sure).
	for _, r := range rc.roles {
		_ = r.Start()
	}
	if err := d.produceFlushes(ctx, sum); err != nil {
		return false, err
	}
	d.logf("flush events produced; waiting for the pipeline to drain")
	t1 := time.Now()
	if err := d.drain(ctx, rc); err != nil {
		sum.failures = append(sum.failures, err.Error())
		return false, nil
	}
	sum.drain = time.Since(t1)
	return true, nil
}

// generator is the run's stream, counted by kind in sum, from the start the regions table was
// filled for (registry).
func (d *driver) generator(sum *summary) *stream.Generator {
	gen := &stream.Generator{Seed: d.o.seed, Entities: d.o.entities, Start: d.start}
	sum.kinds = map[stream.Kind]int64{}
	return gen
}

// killRoles SIGKILLs a role and restarts it after a pause of up to 3 s, again and again until ctx
// ends: in shuffled rounds, so that every role is killed about as often.
func (d *driver) killRoles(ctx context.Context, rc *runCfg, rng *rand.Rand) {
	o := d.o
	order := []int{0, 1, 2}
	for i := 0; ; i++ {
		if i%3 == 0 {
			rng.Shuffle(3, func(a, b int) { order[a], order[b] = order[b], order[a] })
		}
		wait := o.killEvery/2 + time.Duration(rng.Int64N(int64(o.killEvery)))
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		r := rc.roles[order[i%3]]
		pid := r.Kill()
		pause := time.Duration(rng.IntN(3000)) * time.Millisecond
		d.logf("SIGKILL %s (pid %d); restarting it in %v", r.name, pid, pause)
		time.Sleep(pause)
		if err := r.Start(); err != nil {
			d.logf("restart %s: %v", r.name, err)
		}
	}
}

// injectFaults runs the infrastructure faults, one at a time, spread over the run after a
// warm-up that lets the tables fill. Every planned fault runs, even past the planned duration; one
// that fails is logged and listed as skipped in the summary.
func (d *driver) injectFaults(ctx context.Context, f *faults, rng *rand.Rand) {
	o := d.o
	plan := f.schedule(o)
	warm := min(30*time.Second, o.duration/6)
	left := o.duration - warm
	d.logf("faults planned: %s", strings.Join(plan, ", "))
	select {
	case <-ctx.Done():
		return
	case <-time.After(warm):
	}
	for i, fault := range plan {
		gap := max(left/time.Duration(len(plan)-i+1), 0)
		gap = gap/2 + time.Duration(rng.Int64N(int64(gap)+1))
		if strings.HasPrefix(fault, faultHBaseOutage) {
			gap = max(gap-o.outage/2, 0) // an outage takes its own time from the budget
		}
		start := time.Now()
		select {
		case <-ctx.Done():
			return
		case <-time.After(gap):
		}
		if err := f.inject(ctx, o, fault); err != nil {
			d.logf("fault %s failed: %v", fault, err)
			f.mu.Lock()
			f.skipped = append(f.skipped, fmt.Sprintf("%s: %v", fault, err))
			f.mu.Unlock()
		}
		left -= time.Since(start)
	}
}

// produceFlushes closes every window: one flush event per partition, a day past the stream.
func (d *driver) produceFlushes(ctx context.Context, sum *summary) error {
	flushes := stream.FlushRecords(d.o.partitions, time.Now().Add(-24*time.Hour).UnixMilli())
	var recs []*kgo.Record
	for _, r := range flushes {
		recs = append(recs, &kgo.Record{Topic: d.source, Key: r.Key, Value: r.Value})
		sum.kinds[stream.Flush]++
	}
	pcl, err := kgo.NewClient(kgo.SeedBrokers(d.brokers...), kgo.RecordPartitioner(franz.Partitioner()))
	if err != nil {
		return err
	}
	err = pcl.ProduceSync(ctx, recs...).FirstErr()
	pcl.Close()
	if err != nil {
		return fmt.Errorf("produce the flush events: %w", err)
	}
	return nil
}

// produce writes the generated stream to the source topic at an even rate over the run's duration.
func (d *driver) produce(ctx context.Context, g *stream.Generator, sum *summary) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(d.brokers...), kgo.DefaultProduceTopic(d.source),
		kgo.RecordPartitioner(franz.Partitioner()), kgo.ProducerLinger(5*time.Millisecond))
	if err != nil {
		return err
	}
	defer cl.Close()
	var failed atomic.Int64
	var firstErr atomic.Value
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var recs []stream.Record
	var n int64
	t0, lastLog := time.Now(), time.Now()
	for n < d.o.events {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		// As many events as the even rate asks by now: a busy machine that delays ticks does not
		// slow the stream down.
		target := min(int64(float64(d.o.events)*float64(time.Since(t0))/float64(d.o.duration))+1, d.o.events)
		// The regions table first, a period ahead of the batch's last nominal time: no event is
		// ahead of its nominal time but the future-dated ones, which never reach the join.
		if err := d.place(ctx, g.Start+g.Span(target).Milliseconds()+stream.RegionPeriod.Milliseconds()); err != nil {
			return err
		}
		for ; n < target; n++ {
			recs = g.Next(recs[:0])
			for _, r := range recs {
				sum.kinds[r.Kind]++
				cl.Produce(ctx, &kgo.Record{Key: r.Key, Value: r.Value}, func(_ *kgo.Record, err error) {
					if err != nil {
						failed.Add(1)
						firstErr.CompareAndSwap(nil, err)
					}
				})
			}
		}
		if time.Since(lastLog) >= time.Minute {
			d.logf("produced %d of %d events", n, d.o.events)
			lastLog = time.Now()
		}
	}
	if err := cl.Flush(ctx); err != nil {
		return err
	}
	d.logf("produced all %d events", n)
	if f := failed.Load(); f > 0 {
		sum.produceFailures = f
		d.logf("%d records could not be produced (first: %v); the oracle reads the topic as it is", f, firstErr.Load())
	}
	return nil
}

// drain waits until the processor has read every source record and every record of its loop
// topic (the rollups' partial totals and progress, which the rollup finals wait for), the sinks
// have committed every record of their topics, and the totals topic has stopped growing.
func (d *driver) drain(ctx context.Context, rc *runCfg) error {
	deadline := time.Now().Add(d.o.drainTimeout)
	var lastTotals int64 = -1
	stable := time.Time{}
	lastLog := time.Now()
	for {
		if time.Now().After(deadline) {
			return fmt.Errorf("%s pipeline did not drain within %v", rc.name, d.o.drainTimeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Second):
		}
		c, cancel := context.WithTimeout(ctx, 20*time.Second)
		procLag, err1 := kafkaread.GroupLag(c, d.adm, rc.procGroup, d.source)
		factsLag, err2 := kafkaread.GroupLag(c, d.adm, rc.factsGroup, d.source)
		aggLag, err3 := kafkaread.GroupLag(c, d.adm, rc.aggGroup, rc.topo.TotalsTopic())
		totalsEnd, err4 := kafkaread.EndSum(c, d.adm, rc.topo.TotalsTopic())
		loopLag, err5 := kafkaread.GroupLag(c, d.adm, rc.procGroup, rc.loopTopic())
		cancel()
		if err := firstErr(err1, err2, err3, err4, err5); err != nil {
			continue // the broker may be restarting
		}
		if time.Since(lastLog) > 30*time.Second {
			d.logf("%s: lag processor %d (loop topic %d), facts sink %d, aggregates sink %d", rc.name, procLag, loopLag, factsLag, aggLag)
			lastLog = time.Now()
		}
		if procLag != 0 || loopLag != 0 || factsLag != 0 || aggLag != 0 || totalsEnd != lastTotals {
			lastTotals, stable = totalsEnd, time.Time{}
			continue
		}
		if stable.IsZero() {
			stable = time.Now()
		}
		if time.Since(stable) >= 10*time.Second {
			d.logf("%s pipeline drained: %d totals records", rc.name, totalsEnd)
			return nil
		}
	}
}

// firstErr is the first error that is not nil, or nil.
func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

// referencePhase runs the stream, as the chaos run left it in the source topic, through a second
// pipeline with no faults.
func (d *driver) referencePhase(ctx context.Context, rc *runCfg, sum *summary) error {
	d.logf("reference run: the same source topic through a crash-free pipeline")
	t0 := time.Now()
	if err := d.startRoles(rc); err != nil {
		return err
	}
	defer d.stopRoles(rc)
	if err := d.drain(ctx, rc); err != nil {
		sum.failures = append(sum.failures, err.Error())
		return nil
	}
	for _, r := range rc.roles {
		if _, _, exits := r.counts(); len(exits) > 0 {
			sum.failures = append(sum.failures, fmt.Sprintf("reference %s exited by itself: %v", r.name, exits))
		}
	}
	sum.reference = time.Since(t0)
	sum.refRan = true
	return nil
}

// compare computes the oracle from the source topic, compares the tables and checks the dead
// letters and the late records.
func (d *driver) compare(ctx context.Context, chaosRun, refRun *runCfg, sum *summary) error {
	t0 := time.Now()
	o, err := d.oracle(ctx)
	if err != nil {
		return err
	}
	sum.oracle = o
	if n := o.Open(); n != 0 {
		sum.failures = append(sum.failures, fmt.Sprintf("the oracle has %d windows still open: the flush events are missing", n))
	}
	d.logf("oracle: %d records, %d aggregate cells, %d fact cells, %d bad records", o.Records, o.Aggregates.Len(), o.Facts.Len(), len(o.Bad))

	var refAgg, refFacts *stream.Cells
	describeAgg := describeAggregateOf(o)
	if refRun != nil && sum.refRan {
		sum.refBySet = newSetTally()
		keys := newKeyTally()
		if sum.refAgg, _, refAgg, err = tableCheck(ctx, d.hb, refRun.aggTable, o.Aggregates, nil, describeAgg, sum.refBySet, keys); err != nil {
			return err
		}
		if sum.refKeys, err = keyIndexCheck(ctx, d.hb, schema.KeyIndexTable(refRun.aggTable), keys.expected()); err != nil {
			return err
		}
		if sum.refFacts, _, refFacts, err = tableCheck(ctx, d.hb, refRun.factsTable, o.Facts, nil, describeFact, nil, nil); err != nil {
			return err
		}
		if sum.refDLQ, sum.refLate, err = d.checkSetAside(ctx, refRun, o); err != nil {
			return err
		}
	}
	sum.chaosBySet = newSetTally()
	keys := newKeyTally()
	if sum.chaosAgg, sum.chaosVsRefAgg, _, err = tableCheck(ctx, d.hb, chaosRun.aggTable, o.Aggregates, refAgg, describeAgg, sum.chaosBySet, keys); err != nil {
		return err
	}
	// The key index is checked against the aggregates table it lists, which the line above
	// checks against the oracle.
	if sum.chaosKeys, err = keyIndexCheck(ctx, d.hb, schema.KeyIndexTable(chaosRun.aggTable), keys.expected()); err != nil {
		return err
	}
	if sum.chaosFacts, sum.chaosVsRefFacts, _, err = tableCheck(ctx, d.hb, chaosRun.factsTable, o.Facts, refFacts, describeFact, nil, nil); err != nil {
		return err
	}
	if sum.chaosDLQ, sum.chaosLate, err = d.checkSetAside(ctx, chaosRun, o); err != nil {
		return err
	}
	sum.compare = time.Since(t0)
	return nil
}

// oracle reads the source topic as it lies in Kafka (what was produced, failures and all) into
// the oracle of the cells, dead letters and late records it must give.
func (d *driver) oracle(ctx context.Context) (*stream.Oracle, error) {
	layout := stream.Layout{AggregatesBuckets: 8, FactsBuckets: 8, Family: "d"}
	o := stream.NewOracle(layout)
	err := kafkaread.All(ctx, d.brokers, d.source, func(r *kgo.Record) {
		o.Feed(stream.SourceRecord{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: r.Key, Value: r.Value, Timestamp: r.Timestamp})
	}, kgo.FetchMaxBytes(32<<20))
	if err != nil {
		return nil, err
	}
	return o, nil
}

// checkSetAside checks a deployment's dead-letter and late topics against the oracle.
func (d *driver) checkSetAside(ctx context.Context, rc *runCfg, o *stream.Oracle) (*dlqCheck, *lateCheck, error) {
	dl, err := readDeadLetters(ctx, d.brokers, rc.topo.DeadLetterTopic())
	if err != nil {
		return nil, nil, err
	}
	c := checkDeadLetters(dl, o.Bad)
	lr, err := readLateRecords(ctx, d.brokers, rc.topo.LateTopic())
	if err != nil {
		return nil, nil, err
	}
	lc := checkLateRecords(lr, o.Late)
	return &c, &lc, nil
}
