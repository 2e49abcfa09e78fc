package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/abacus-stream/abacus/backfill"
	"github.com/abacus-stream/abacus/internal/engine"
	"github.com/abacus-stream/abacus/internal/plan"
	"github.com/abacus-stream/abacus/processors"
	"github.com/abacus-stream/abacus/sinks"
	"github.com/abacus-stream/abacus/tables"
)

const backfillUsage = `Usage:
  abacus backfill -config FILE -set S [-set S2 ...] [-from T] [-until T] [-share I/N]

Computes the windows of sets added to a running topology from before they were added, from the
facts table, and writes them to the aggregates table as the processor would have: the same cells,
byte for byte, and their key index rows. Deploy the topology with the new sets first: backfill
writes only the windows that started before each set's live start (what the processor gives no
total), once the processor has closed them. -from and -until narrow the range. Running it again
writes the same cells. Progress is saved every -checkpoint-every to sinks.backfill_table: a run
stopped anywhere (killed, evicted) and started again with the same flags resumes from there.
Rollups are backfilled too; topologies of several sources not yet.
-share spreads the work over N workers, each running a share of the source partitions (entity
sets only: a rollup takes every partition's share).

Flags:
`

// stringList is a flag that may be given several times.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, splitList(v)...); return nil }

// backfillCmd runs `abacus backfill`.
func (p Program) backfillCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("backfill", flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(fs.Output(), backfillUsage); fs.PrintDefaults() }
	var c common
	c.register(fs, "listen")
	var sets stringList
	fs.Var(&sets, "set", "a set to backfill (repeat, or comma separated; required)")
	fromFlag := fs.String("from", "", "only windows that start at or after this (RFC 3339, ms since the epoch, or relative like -720h)")
	untilFlag := fs.String("until", "", "only windows that end at or before this")
	wait := fs.Duration("wait", 2*time.Minute, "how long to wait for the facts sink to catch up with the processor")
	memory := fs.Int64("memory-mb", 512, "MiB of facts held in memory; the others go through files in -temp-dir")
	tempDir := fs.String("temp-dir", "", "where facts that do not fit in memory go (default the system's temporary folder)")
	restart := fs.Bool("restart", false, "start over, leaving aside the checkpoint an earlier run with the same flags left")
	every := fs.Duration("checkpoint-every", time.Minute, "how often progress is saved to sinks.backfill_table (a run stopped anywhere resumes from there)")
	shareFlag := fs.String("share", "", "I/N: this run is worker I of N (from 0), and runs the source partitions p with p % N == I (entity sets only); a Kubernetes Indexed Job passes $(JOB_COMPLETION_INDEX)/N")
	if err := parse(fs, args, stderr); err != nil {
		return err
	}
	if len(sets) == 0 {
		return usagef("-set is required: name the sets to backfill\n%s", backfillUsage)
	}
	var from, until time.Time
	for _, f := range []struct {
		name, v string
		to      *time.Time
	}{{"from", *fromFlag, &from}, {"until", *untilFlag, &until}} {
		if f.v == "" {
			continue
		}
		t, err := parseTime(f.v)
		if err != nil {
			return usagef("-%s: %v", f.name, err)
		}
		*f.to = t
	}
	var share backfill.Share
	if *shareFlag != "" {
		i, n, ok := strings.Cut(*shareFlag, "/")
		var err1, err2 error
		share.Index, err1 = strconv.Atoi(i)
		share.Of, err2 = strconv.Atoi(n)
		if !ok || err1 != nil || err2 != nil || share.Of < 1 || share.Index < 0 || share.Index >= share.Of {
			return usagef("-share %q: want I/N, a worker index from 0 to N-1 and the number of workers", *shareFlag)
		}
	}
	if parsedOnly(ctx, fs, &c, nil) {
		return nil
	}
	d, err := p.connect(ctx, &c, stderr, func(*Config) needs { return needs{kafka: true, store: true} })
	if err != nil {
		return err
	}
	defer d.shutdown()
	cfg, topo := d.cfg, d.topo
	sources := topo.SourceTopics()
	adm := kadm.NewClient(d.kafka)
	parts, err := partitionCount(ctx, adm, sources)
	if err != nil {
		return err
	}
	// The processor's records first, then the sources' ends: every event the processor had
	// applied when it wrote them is below those ends, and the facts sink must have committed
	// past them, so that the facts table holds every event of each window backfill writes.
	live, err := processors.PartitionRecords(ctx, cfg.Processor.Group, parts, d.kgoOpts()...)
	if err != nil {
		return err
	}
	facts := sinkNamed("facts")
	if err := waitForFacts(ctx, facts.offsets(d, adm), facts.groupIn(cfg), sources, *wait, stderr); err != nil {
		return err
	}
	agg, err := d.aggregatesEncoder(cfg.Sinks.Aggregates)
	if err != nil {
		return err
	}
	if err := d.st.EnsureTable(ctx, backfill.CheckpointLayout(cfg.Sinks.BackfillTable)); err != nil {
		return fmt.Errorf("backfill: checkpoints table: %w", err)
	}
	var lookups engine.Tables
	if len(plan.Of(topo).Tables) > 0 {
		// The processor group's versions of its tables: the ones its live run looked up.
		set, err := tables.OpenAll(ctx, topo, tables.Config{Group: cfg.Processor.Group, Client: d.kgoOpts(), Logger: d.log})
		if err != nil {
			return fmt.Errorf("backfill: %w", err)
		}
		defer set.Close()
		lookups = set
	}
	started := time.Now()
	pp := newProgressLine(stderr)
	sum, err := backfill.Run(ctx, backfill.Options{Topology: topo, Tables: lookups, Sets: sets, Live: live, From: from, Until: until, Partitions: parts, Share: share,
		MemoryBytes: *memory << 20, TempDir: *tempDir,
		Facts: d.st, FactsTable: cfg.Sinks.Facts.Table, Family: cfg.Sinks.Facts.Family, Out: d.st, Encoder: agg.(*sinks.AggregatesEncoder),
		Progress:    pp.update,
		Checkpoints: &backfill.Checkpoints{Store: d.st, Table: cfg.Sinks.BackfillTable, Every: *every, Restart: *restart}})
	pp.end()
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "backfilled %s: %d facts read, %d windows written (%d cells) in %s\n",
		strings.Join(sets, ", "), sum.Facts, sum.Windows, sum.Cells, time.Since(started).Round(time.Millisecond))
	if sum.Resumed > 0 {
		fmt.Fprintf(stdout, "resumed from a checkpoint of an earlier run: %d facts it had run were not run again\n", sum.Resumed)
	}
	if sum.DeadLetters > 0 || sum.Undecodable > 0 {
		fmt.Fprintf(stdout, "facts not counted: %d refused by the topology's code for these sets, %d unreadable rows or qualifiers\n",
			sum.DeadLetters, sum.Undecodable)
	}
	if sum.OnDisk > 0 {
		fmt.Fprintf(stdout, "%d facts did not fit in -memory-mb %d and went through files\n", sum.OnDisk, *memory)
	}
	if sum.NotClosed > 0 {
		fmt.Fprintf(stdout, "%d windows before the live start are not closed by the processor yet: run backfill again once they are\n", sum.NotClosed)
	}
	return nil
}

// partitionCount is the partition count of the sources, which must agree.
func partitionCount(ctx context.Context, adm *kadm.Client, topics []string) (int, error) {
	md, err := adm.ListTopics(ctx, topics...)
	if err != nil {
		return 0, fmt.Errorf("describe %v: %w", topics, err)
	}
	n := -1
	for _, t := range topics {
		td, ok := md[t]
		if !ok || td.Err != nil {
			return 0, fmt.Errorf("source topic %s: %v", t, errors.Join(errors.New("not found"), td.Err))
		}
		if n >= 0 && len(td.Partitions) != n {
			return 0, fmt.Errorf("source topics have %d and %d partitions", n, len(td.Partitions))
		}
		n = len(td.Partitions)
	}
	return n, nil
}

// waitForFacts waits until the facts sink's group has committed every source partition up to its
// end as of the call.
func waitForFacts(ctx context.Context, offsets sinks.OffsetsAdmin, group string, topics []string, wait time.Duration, stderr io.Writer) error {
	ends, err := offsets.Kafka.ListEndOffsets(ctx, topics...)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return fmt.Errorf("end offsets of %v: %w", topics, err)
	}
	deadline := time.Now().Add(wait)
	for said := false; ; said = true {
		lags, err := offsets.Show(ctx, group, topics...)
		if err != nil {
			return err
		}
		var behind []string
		for _, l := range lags {
			// Done: committed, or gone from the topic (End - Lag counts both).
			if e, ok := ends.Lookup(l.Topic, l.Partition); ok && l.End-l.Lag < e.Offset {
				behind = append(behind, fmt.Sprintf("%s/%d at %d of %d", l.Topic, l.Partition, l.End-l.Lag, e.Offset))
			}
		}
		if len(behind) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the facts sink (group %s) has not written what the processor has read: %s; is it running?", group, strings.Join(behind, ", "))
		}
		if !said {
			fmt.Fprintf(stderr, "backfill: waiting for the facts sink (group %s) to write what the processor has read\n", group)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// progressLine shows a backfill's progress: on a terminal, one line rewritten in place a few times
// a second, with the rate and the time left; in a log, a line every ten seconds and at each stage.
type progressLine struct {
	w       io.Writer
	tty     bool
	stage   string
	since   time.Time // the stage's start
	printed time.Time
	shown   bool // a terminal line is open
}

func newProgressLine(w io.Writer) *progressLine {
	tty := false
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil {
			tty = st.Mode()&os.ModeCharDevice != 0
		}
	}
	return &progressLine{w: w, tty: tty}
}

func (p *progressLine) update(pr backfill.Progress) {
	now := time.Now()
	changed := pr.Stage != p.stage
	if changed {
		p.stage, p.since = pr.Stage, now
	}
	every := 10 * time.Second
	if p.tty {
		every = 200 * time.Millisecond
	}
	if !changed && now.Sub(p.printed) < every {
		return
	}
	p.printed = now
	took := now.Sub(p.since).Seconds()
	var line string
	switch pr.Stage {
	case "read":
		line = fmt.Sprintf("reading the facts table: %d facts, %.0f/s", pr.Facts, float64(pr.Facts)/max(took, 1e-3))
	case "run":
		rate := float64(pr.Applied) / max(took, 1e-3)
		left := "?"
		if rate > 0 {
			left = (time.Duration(float64(pr.Facts-pr.Applied)/rate) * time.Second).Round(time.Second).String()
		}
		line = fmt.Sprintf("running the engine: %d of %d facts (%d%%), %.0f/s, %d windows written, %s left",
			pr.Applied, pr.Facts, pr.Applied*100/max(pr.Facts, 1), rate, pr.Windows, left)
	default:
		line = fmt.Sprintf("%s: %d facts, %d windows written", pr.Stage, pr.Facts, pr.Windows)
	}
	if p.tty {
		fmt.Fprintf(p.w, "\rbackfill: %s\x1b[K", line)
		p.shown = true
		return
	}
	fmt.Fprintf(p.w, "backfill: %s\n", line)
}

// end closes the terminal line.
func (p *progressLine) end() {
	if p.shown {
		fmt.Fprintln(p.w)
	}
}
