package main

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/abacus-stream/abacus/internal/chaos/stream"
)

// summary is what a run found.
type summary struct {
	o               *options
	id, form        string
	kinds           map[stream.Kind]int64
	produceFailures int64
	faults          *faults
	roles           []*role
	oracle          *stream.Oracle
	refRan          bool

	chaosAgg, chaosFacts, refAgg, refFacts stream.Diff
	chaosVsRefAgg, chaosVsRefFacts         stream.Diff
	chaosKeys, refKeys                     stream.Diff // key index vs the aggregates table
	chaosDLQ, refDLQ                       *dlqCheck
	chaosLate, refLate                     *lateCheck
	// chaosBySet and refBySet count each aggregates table's cells by set, rollups among them.
	chaosBySet, refBySet *setTally

	produce, drain, reference, compare time.Duration
	failures                           []string
}

// printSummary prints the run's summary and says whether it passed. Each section adds what
// it finds wrong to the failures, which the summary lists last.
func (d *driver) printSummary(s *summary) bool {
	w := d.logw
	fmt.Fprintf(w, "\n===== abacus chaos run %s (%s form), seed %d =====\n", s.id, s.form, s.o.seed)
	s.printEvents(w)
	if s.faults != nil {
		s.printFaults(w)
	}
	if s.oracle != nil {
		printOracle(w, s.oracle)
	}
	var t cellTally
	ran := s.oracle != nil
	s.printDiff(w, &t, "chaos aggregates vs oracle", s.chaosAgg, ran)
	s.printDiff(w, &t, "chaos facts vs oracle", s.chaosFacts, ran)
	s.printDiff(w, &t, "reference aggregates vs oracle", s.refAgg, ran && s.refRan)
	s.printDiff(w, &t, "reference facts vs oracle", s.refFacts, ran && s.refRan)
	s.printDiff(w, &t, "chaos aggregates vs reference", s.chaosVsRefAgg, ran && s.refRan)
	s.printDiff(w, &t, "chaos facts vs reference", s.chaosVsRefFacts, ran && s.refRan)
	s.printKeyIndex(w, "chaos key index vs aggregates", s.chaosKeys, ran)
	s.printKeyIndex(w, "reference key index vs aggregates", s.refKeys, ran && s.refRan)
	rollupCells := s.printBySet(w, "chaos aggregates by set", s.chaosBySet, ran)
	rollupCells += s.printBySet(w, "reference aggregates by set", s.refBySet, ran && s.refRan)
	s.printDeadLetters(w, "chaos dead letters", s.chaosDLQ)
	s.printDeadLetters(w, "reference dead letters", s.refDLQ)
	s.printLateRecords(w, "chaos late records", s.chaosLate)
	s.printLateRecords(w, "reference late records", s.refLate)
	fmt.Fprintf(w, "timings:  produce %v, drain after the faults %v, reference run %v, oracle and comparison %v; total %v\n",
		s.produce.Round(time.Second), s.drain.Round(time.Second), s.reference.Round(time.Second), s.compare.Round(time.Second),
		time.Since(d.t0).Round(time.Second))
	fmt.Fprintf(w, "summary:  %d events, %d cells compared (%d rollup cells checked right), %d mismatches, %d extra versions\n",
		s.kinds[stream.OnTime]+s.kinds[stream.Straggler]+s.kinds[stream.Late]+s.kinds[stream.Future]+s.kinds[stream.Malformed], t.compared, rollupCells, t.mismatches, t.extraVersions)
	if len(s.failures) == 0 {
		fmt.Fprintf(w, "RESULT:   PASS\n")
		return true
	}
	fmt.Fprintf(w, "RESULT:   FAIL\n")
	for _, f := range s.failures {
		fmt.Fprintf(w, "          %s\n", f)
	}
	return false
}

// printEvents prints what was produced, by kind.
func (s *summary) printEvents(w io.Writer) {
	var kinds []string
	var events int64
	for _, k := range stream.Kinds() {
		if n := s.kinds[k]; n > 0 {
			kinds = append(kinds, fmt.Sprintf("%s %d", k, n))
			events += n
		}
	}
	fmt.Fprintf(w, "events:   %d records produced over %d partitions (%s)\n", events, s.o.partitions, strings.Join(kinds, ", "))
	if s.produceFailures > 0 {
		fmt.Fprintf(w, "          %d records failed to produce\n", s.produceFailures)
	}
}

// printFaults prints the faults the run injected and what the roles rode out or did not.
func (s *summary) printFaults(w io.Writer) {
	f := s.faults
	f.mu.Lock()
	defer f.mu.Unlock()
	var kills []string
	totalKills := 0
	var exits []string
	for _, r := range s.roles {
		k, starts, ex := r.counts()
		totalKills += k
		kills = append(kills, fmt.Sprintf("%s %d (started %d times)", r.name, k, starts))
		for _, e := range ex {
			exits = append(exits, r.name+" at "+e)
		}
	}
	fmt.Fprintf(w, "kills:    %d SIGKILLs (%s)\n", totalKills, strings.Join(kills, ", "))
	if f.cluster == nil {
		fmt.Fprintf(w, "outages:  HBase stopped %d times, SIGKILLed %d times: down %.1f minutes in all; broker restarted %d times (%d by SIGKILL)\n",
			f.count[faultHBaseOutage], f.count[faultHBaseKill], f.outage.Minutes(), f.count[faultBrokerRestart], f.brokerKills)
	} else {
		fmt.Fprintf(w, "outages:  broker restarted %d times (%d by SIGKILL)\n", f.count[faultBrokerRestart], f.brokerKills)
	}
	var splits []string
	for k, n := range f.count {
		if strings.HasPrefix(k, faultSplit+" ") {
			splits = append(splits, fmt.Sprintf("%s %d", strings.TrimPrefix(k, faultSplit+" "), n))
		}
	}
	sort.Strings(splits)
	fmt.Fprintf(w, "regions:  %d splits (%s), %d unassign/assigns\n", f.count[faultSplit], strings.Join(splits, ", "), f.count[faultBounce])
	if f.cluster != nil {
		fmt.Fprintf(w, "cluster:  %d region server SIGKILLs survived (%d of hbase:meta's server, meta moved %d times); %d regions moved (%d rounds of moves and the balancer)\n",
			f.count[faultRSKill]+f.count[faultMetaKill], f.count[faultMetaKill], f.metaMoves, f.regionMoves, f.count[faultMoves])
	}
	for _, sk := range f.skipped {
		fmt.Fprintf(w, "          fault not done: %s\n", sk)
	}
	if len(f.revived) > 0 {
		fmt.Fprintf(w, "          HBase found dead and restarted by the suite's supervisor %d times (no planned fault; a region server aborted?):\n", len(f.revived))
		for _, r := range f.revived {
			fmt.Fprintf(w, "          %s\n", r)
		}
	}
	reruns, waits := 0, 0
	for _, r := range s.roles {
		reruns += r.logLines(msgGroupRunAgain)
		waits += r.logLines(msgStartWaited)
	}
	fmt.Fprintf(w, "rode out: the processor ran its group again in process %d times (broker outages); roles retried a start step %d times waiting for a server\n",
		reruns, waits)
	fmt.Fprintf(w, "exits:    %d unplanned exits of a role (restarted after 2 s)\n", len(exits))
	for _, e := range exits {
		fmt.Fprintf(w, "          %s\n", e)
	}
}

// printOracle prints what the oracle expects.
func printOracle(w io.Writer, o *stream.Oracle) {
	fmt.Fprintf(w, "oracle:   %d records read back, %d applied, late for every window (%s), %d bad; expects %d aggregate and %d fact cells, late records (%s) for %d events\n",
		o.Records, o.Applied, countsBySet(o.LateFor), len(o.Bad), o.Aggregates.Len(), o.Facts.Len(), countsBySet(o.LateRecords), len(o.Late))
}

// countsBySet lists per-set counts as "set n", sorted.
func countsBySet(m map[string]int64) string {
	out := []string{}
	for set, n := range m {
		out = append(out, fmt.Sprintf("%s %d", set, n))
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}

// cellTally adds up the table comparisons for the summary's last line.
type cellTally struct{ compared, mismatches, extraVersions int64 }

// printDiff prints one table comparison (if it ran) and adds it to t.
func (s *summary) printDiff(w io.Writer, t *cellTally, what string, dd stream.Diff, ran bool) {
	if !ran {
		return
	}
	t.compared += dd.Compared
	t.mismatches += dd.Missing + dd.Extra + dd.WrongValue
	t.extraVersions += dd.ExtraVersions
	fmt.Fprintf(w, "%-34s %9d cells compared: %d missing, %d extra, %d wrong, %d extra versions\n", what+":", dd.Compared, dd.Missing, dd.Extra, dd.WrongValue, dd.ExtraVersions)
	for _, e := range dd.Examples {
		fmt.Fprintf(w, "          %s\n", e)
	}
	if dd.Mismatches() > 0 {
		s.failures = append(s.failures, fmt.Sprintf("%s: %d differences", what, dd.Mismatches()))
	}
}

// printKeyIndex prints the check of a key index against its aggregates table: every set and key
// with windows has its row, stamped from its newest window, and nothing else is there. Older
// versions are not differences: a table that keeps several versions keeps the earlier stamps.
func (s *summary) printKeyIndex(w io.Writer, what string, dd stream.Diff, ran bool) {
	if !ran {
		return
	}
	fmt.Fprintf(w, "%-34s %9d cells compared: %d missing, %d extra, %d wrong, %d older versions\n", what+":", dd.Compared, dd.Missing, dd.Extra, dd.WrongValue, dd.ExtraVersions)
	for _, e := range dd.Examples {
		fmt.Fprintf(w, "          %s\n", e)
	}
	if n := dd.Missing + dd.Extra + dd.WrongValue; n > 0 {
		s.failures = append(s.failures, fmt.Sprintf("%s: %d differences", what, n))
	}
}

// printBySet prints an aggregates table's cells by set (if it was compared): per set, the cells
// read that the oracle expects with their value, of those it expects. It returns the rollup
// cells found right. A rollup set the oracle expects no cell of fails the run, since its check
// would then vouch for nothing; so does a set with a cell wrong, missing or extra (the diff
// counts them too, this says which set they are of).
func (s *summary) printBySet(w io.Writer, what string, t *setTally, ran bool) int64 {
	if !ran || t == nil {
		return 0
	}
	want := s.oracle.CellsBySet
	rollup := map[string]bool{}
	for _, set := range stream.RollupSets() {
		rollup[set] = true
	}
	names := map[string]bool{}
	for _, m := range []map[string]int64{want, t.read} {
		for set := range m {
			names[set] = true
		}
	}
	for set := range rollup {
		names[set] = true
	}
	sorted := make([]string, 0, len(names))
	for set := range names {
		sorted = append(sorted, set)
	}
	sort.Strings(sorted)
	var parts []string
	var rollupRight int64
	for _, set := range sorted {
		kind := ""
		if rollup[set] {
			kind = " (rollup)"
			rollupRight += t.right[set]
			if want[set] == 0 {
				s.failures = append(s.failures, fmt.Sprintf("%s: the oracle expects no cell of rollup set %s, which is then not checked", what, set))
			}
		}
		parts = append(parts, fmt.Sprintf("%s%s %d of %d right, %d read", set, kind, t.right[set], want[set], t.read[set]))
		if t.right[set] != want[set] || t.read[set] != want[set] {
			s.failures = append(s.failures, fmt.Sprintf("%s: set %s has %d of the oracle's %d cells right, %d read", what, set, t.right[set], want[set], t.read[set]))
		}
	}
	fmt.Fprintf(w, "%-34s %s; %d rollup cells checked right\n", what+":", strings.Join(parts, ", "), rollupRight)
	return rollupRight
}

// printDeadLetters prints one deployment's dead-letter check (if it ran): no bad record may have
// more than one dead letter, whatever crashed.
func (s *summary) printDeadLetters(w io.Writer, what string, c *dlqCheck) {
	if c == nil {
		return
	}
	fmt.Fprintf(w, "%-34s %d records for %d bad source records: %d once, %d repeated identically, %d repeated differently, %d missing, %d unexpected, %d wrong reason\n",
		what+":", c.Records, c.Bad, c.Once, c.Identical, c.Different, c.Missing, c.Unexpected, c.WrongReason)
	var hist []string
	for n, k := range c.Distinct {
		hist = append(hist, fmt.Sprintf("%d with %d", k, n))
	}
	sort.Strings(hist)
	if len(hist) > 0 || c.OrderOnly > 0 {
		fmt.Fprintf(w, "          bad records by distinct dead letters: %s; %d whose repeats differ only in header order\n", strings.Join(hist, ", "), c.OrderOnly)
	}
	for _, e := range c.Examples {
		fmt.Fprintf(w, "          %s\n", e)
	}
	if c.Different+c.Missing+c.Unexpected+c.WrongReason > 0 {
		s.failures = append(s.failures, fmt.Sprintf("%s: dead letters missing, unexpected or differing", what))
	}
	// Once each, crashes or not (processors/aside.go).
	if c.Identical > 0 {
		s.failures = append(s.failures, fmt.Sprintf("%s: %d bad records dead-lettered more than once", what, c.Identical))
	}
}

// printLateRecords prints one deployment's late-record check (if it ran): no (event, set) may have
// more than one late record, whatever crashed.
func (s *summary) printLateRecords(w io.Writer, what string, c *lateCheck) {
	if c == nil {
		return
	}
	fmt.Fprintf(w, "%-34s %d records for %d expected (event, set): %d found (%d once, %d repeated identically, %d repeated differently), %d missing, %d unexpected, %d wrong content\n",
		what+":", c.Records, c.Expected, c.Found(), c.Once, c.Identical, c.Different, c.Missing, c.Unexpected, c.WrongContent)
	fmt.Fprintf(w, "          timestamps: %d of %d records carry their source record's; %d repeated (event, set) with differing timestamps\n",
		c.SourceTimestamp, c.Records, c.TimestampDiffers)
	for _, e := range c.Examples {
		fmt.Fprintf(w, "          %s\n", e)
	}
	if c.Different+c.Missing+c.Unexpected+c.WrongContent > 0 {
		s.failures = append(s.failures, fmt.Sprintf("%s: %d missing, %d unexpected, %d repeated differently, %d with wrong content",
			what, c.Missing, c.Unexpected, c.Different, c.WrongContent))
	}
	// Once each, crashes or not: a restarted processor finds what the run before it wrote for the
	// records it processes again (processors/aside.go).
	if c.Identical > 0 {
		s.failures = append(s.failures, fmt.Sprintf("%s: %d late (event, set) sent more than once", what, c.Identical))
	}
	// A set-aside record names its source record's timestamp (header abacus.timestamp).
	if c.SourceTimestamp != c.Records || c.TimestampDiffers > 0 {
		s.failures = append(s.failures, fmt.Sprintf("%s: %d of %d records without their source record's timestamp, %d repeats with another",
			what, c.Records-c.SourceTimestamp, c.Records, c.TimestampDiffers))
	}
}
