package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// row is one system's line of a workload table: medians over its successful runs.
type row struct {
	system                                   string
	ok, runs                                 int
	startup, processed, committed, lastFinal float64 // s from the first processed record
	eps, cpuPerM, rssMiB                     float64
	finals                                   int64
	hasFinals                                bool
	failure                                  string
	// setFinals: the finals of each set (entity, region, global); lagLast, lagMax, lagMed: a
	// rollup run's global lag (globalLag) of the last window, the largest and the median over
	// its windows, in s.
	setFinals               [3]int64
	lagLast, lagMax, lagMed float64
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func summarize(name string, rs []*result) row {
	r := row{system: name, runs: len(rs)}
	var st, pr, co, lf, eps, cpu, rss, ll, lm, lmed []float64
	for _, x := range rs {
		if x.err != nil {
			if r.failure == "" {
				r.failure = strings.SplitN(x.err.Error(), "\n", 2)[0]
			}
			continue
		}
		r.ok++
		st = append(st, x.startup().Seconds())
		pr = append(pr, x.ready.Sub(x.first).Seconds())
		co = append(co, x.committed.Sub(x.first).Seconds())
		eps = append(eps, x.throughput())
		cpu = append(cpu, x.cpuPerMillion())
		rss = append(rss, float64(x.rss)/(1<<20))
		if !x.lastFinal.IsZero() {
			lf = append(lf, x.lastFinal.Sub(x.first).Seconds())
			r.hasFinals = true
			r.finals = x.out.finals
			r.setFinals = x.out.setFinals
		}
		if last, mx, med, ok := x.globalLag(); ok {
			ll, lm, lmed = append(ll, last.Seconds()), append(lm, mx.Seconds()), append(lmed, med.Seconds())
		}
	}
	r.lagLast, r.lagMax, r.lagMed = median(ll), median(lm), median(lmed)
	r.startup, r.processed, r.committed = median(st), median(pr), median(co)
	r.eps, r.cpuPerM, r.rssMiB, r.lastFinal = median(eps), median(cpu), median(rss), median(lf)
	return r
}

func num(v float64, prec int) string {
	if math.IsNaN(v) {
		return "-"
	}
	return strconv.FormatFloat(v, 'f', prec, 64)
}

// thousands formats n with thousands separators.
func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// secs formats seconds, "-" when there is no value.
func secs(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	return strconv.FormatFloat(v, 'f', 1, 64) + "s"
}

func ratio(a, b float64) string {
	if math.IsNaN(a) || math.IsNaN(b) || b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fx", a/b)
}

// printTable prints one workload's table: a row per system, then abacus's ratios to each.
func printTable(w io.Writer, in *input, cfg *config, byRun map[string][]*result) {
	wl := in.w
	fmt.Fprintf(w, "\n== %s: %s events", wl.name, thousands(int64(wl.events())))
	if wl.sentinels {
		fmt.Fprintf(w, " (+%d sentinels)", partitions)
	}
	fmt.Fprintf(w, " of %s entities over %d window(s), %d partitions, input %s",
		thousands(int64(wl.entities)), wl.windows(), partitions, in.topic)
	if wl.late > 0 {
		fmt.Fprintf(w, ", %s of them late (%.0f%%, in bursts of %d to %d per entity, %d to %d min behind their partition's stream time)",
			thousands(int64(wl.lateEvents())), 100*wl.late, burstMin, burstMax, lateNewestMs/windowMs, lateMaxMs/windowMs)
	}
	if in.expect != nil {
		fmt.Fprintf(w, "; %s finals expected", thousands(int64(in.expect.finals)))
		fmt.Fprintf(w, ", %s late records (abacus's late topic, checked one by one)", thousands(int64(in.expect.lateCount)))
	}
	if wl.rollup {
		fmt.Fprintf(w, " (sets %s per entity, %s per region of %d, %s global: %s + %s + %s)", setName, regionSet, regions, globalSet,
			thousands(int64(in.expect.setFinals[0])), thousands(int64(in.expect.setFinals[1])), thousands(int64(in.expect.setFinals[2])))
	}
	fmt.Fprintf(w, "; %d run(s) each, medians", cfg.runs)
	if cfg.finalRetention > 0 {
		fmt.Fprintf(w, "; abacus FinalRetention %v", cfg.finalRetention)
	}
	fmt.Fprintln(w)
	rows := map[string]row{}
	for _, s := range cfg.systems {
		rows[s] = summarize(s, byRun[s])
	}
	ab, haveAbacus := rows["abacus"]
	fmt.Fprintf(w, "%-14s %8s %10s %10s %10s %11s %9s %8s %10s | %-22s\n",
		"system", "startup", "processed", "committed", "events/s", "last final", "CPU-s/M", "RSS MiB", "finals", "abacus/x: ev/s CPU last")
	for _, s := range cfg.systems {
		r := rows[s]
		if r.runs == 0 {
			continue // not run on this workload (a rollup workload runs the systems with finals only)
		}
		if r.ok == 0 {
			fmt.Fprintf(w, "%-14s FAILED: %s\n", s, r.failure)
			continue
		}
		finals := "-"
		if r.hasFinals {
			finals = thousands(r.finals) + " ok"
		}
		ratios := ""
		if haveAbacus && ab.ok > 0 && s != "abacus" {
			ratios = fmt.Sprintf("%6s %5s %5s", ratio(ab.eps, r.eps), ratio(ab.cpuPerM, r.cpuPerM), ratio(ab.lastFinal, r.lastFinal))
		}
		fmt.Fprintf(w, "%-14s %8s %10s %10s %10s %11s %9s %8s %10s | %s\n",
			s, secs(r.startup), secs(r.processed), secs(r.committed), thousands(int64(r.eps)),
			secs(r.lastFinal), num(r.cpuPerM, 2), num(r.rssMiB, 0), finals, ratios)
		if r.ok < r.runs {
			fmt.Fprintf(w, "%-14s (%d of %d runs failed: %s)\n", "", r.runs-r.ok, r.runs, r.failure)
		}
	}
	fmt.Fprintln(w, "  times in s from the system's first processed record (startup: from process start to it);")
	fmt.Fprintln(w, "  events/s: input records / time until the group had committed them all; last final: broker")
	fmt.Fprintln(w, "  append time of the newest final; CPU-s/M: the system's own process (all threads), first record")
	fmt.Fprintln(w, "  to done, per million input records; RSS: peak resident set; finals: read back and checked")
	fmt.Fprintln(w, "  window by window. abacus/x: abacus's value over the row's (ev/s > 1, CPU and last < 1 favour abacus).")
}

// printLate prints abacus on each late workload beside its base workload (same on-time events,
// same finals), run in the same invocation: the ratios are the late events' cost, measured on the
// same machine at the same time, which holds on a shared machine where absolute figures do not.
func printLate(w io.Writer, cfg *config, names []string, abacus map[string][]*result) {
	rows := map[string]row{}
	var late []string
	for _, n := range names {
		rows[n] = summarize("abacus", abacus[n])
		if wl, _ := newWorkload(n, cfg.events, cfg.entities); wl.late > 0 {
			late = append(late, n)
		}
	}
	if len(late) == 0 {
		return
	}
	fmt.Fprintf(w, "\n== late events: abacus on each late workload beside its base workload, medians of %d run(s)\n", cfg.runs)
	fmt.Fprintf(w, "%-15s %5s %10s %10s %10s %9s | %-16s | %s\n",
		"workload", "late", "records", "late rec.", "events/s", "CPU-s/M", "x base: ev/s CPU", "each run: events/s, CPU-s/M")
	for _, n := range names {
		wl, _ := newWorkload(n, cfg.events, cfg.entities)
		if wl.late == 0 && !slices.ContainsFunc(late, func(l string) bool { return strings.HasPrefix(l, n+"-late") }) {
			continue
		}
		r := rows[n]
		var runs []string
		var lateRecs int64 = -1
		for _, x := range abacus[n] {
			if x.err != nil {
				runs = append(runs, "failed")
				continue
			}
			runs = append(runs, fmt.Sprintf("%s %.2f", thousands(int64(x.throughput())), x.cpuPerMillion()))
			if x.late != nil {
				lateRecs = x.late.records
			}
		}
		ratios := ""
		if b, ok := rows[wl.base]; ok && wl.base != "" && b.ok > 0 && r.ok > 0 {
			ratios = fmt.Sprintf("%6s %5s", ratio(r.eps, b.eps), ratio(r.cpuPerM, b.cpuPerM))
		}
		lr := "-"
		if lateRecs >= 0 {
			lr = thousands(lateRecs)
		}
		fmt.Fprintf(w, "%-15s %4.0f%% %10s %10s %10s %9s | %-16s | %s\n",
			n, 100*wl.late, thousands(int64(wl.events())), lr, thousands(int64(r.eps)), num(r.cpuPerM, 2), ratios, strings.Join(runs, "; "))
	}
	fmt.Fprintln(w, "  a late workload is its base's on-time events plus the late ones; records: real events (+12 sentinels);")
	fmt.Fprintln(w, "  late rec.: records in abacus's late topic (each checked against its late event); x base: the")
	fmt.Fprintln(w, "  workload's median over its base's (events/s below 1 and CPU above 1: the late events cost more")
	fmt.Fprintln(w, "  per record than on-time ones).")
}

// globalLag is a rollup run's global lag per window: the broker append time of the window's
// global final minus that of its newest entity final, which a partition emits as it closes the
// window. It is how long the global key's owner took to have every partition's partial and emit
// the merged final. It returns the last window's (closed by the sentinels, after the whole input
// went through), the largest and the median over the windows; ok is false without rollups.
func (r *result) globalLag() (last, largest, med time.Duration, ok bool) {
	if r.err != nil || r.out.closed == nil {
		return 0, 0, 0, false
	}
	lags := r.out.globalLags()
	n := len(r.out.closed)
	if len(lags) == 0 || r.out.closed[n-1].IsZero() || r.out.global[n-1].IsZero() {
		return 0, 0, 0, false
	}
	last = r.out.global[n-1].Sub(r.out.closed[n-1])
	slices.Sort(lags)
	return last, lags[len(lags)-1], lags[len(lags)/2], true
}

// printRollup prints each rollup workload beside its base workload (the same input topic, the
// per-entity set alone), run in the same invocation: abacus's ratio to its base is what the
// per-region and global sets cost, its ratio to Kafka Streams the comparison on the rollup work,
// and the global lag whether the global key's owner keeps up with the input rate.
func printRollup(w io.Writer, cfg *config, names []string, runs map[string]map[string][]*result) {
	var rollups []string
	for _, n := range names {
		if wl, _ := newWorkload(n, cfg.events, cfg.entities); wl.rollup {
			rollups = append(rollups, n)
		}
	}
	if len(rollups) == 0 {
		return
	}
	fmt.Fprintf(w, "\n== rollups: per-entity, per-region (%d) and global sets on one source, beside the per-entity set alone on the same input; medians of %d run(s)\n", regions, cfg.runs)
	fmt.Fprintf(w, "%-14s %-14s %10s %9s %24s | %-23s | %-16s | %s\n", "workload", "system", "events/s", "CPU-s/M",
		"finals entity+region+gl", "global lag last max med", "abacus/x ev/s CPU", "each run: events/s, CPU-s/M, global lag of the last window")
	for _, n := range rollups {
		wl, _ := newWorkload(n, cfg.events, cfg.entities)
		var base row
		if b, ok := runs[wl.base]; ok {
			base = summarize("abacus", b["abacus"])
			if base.ok > 0 {
				fmt.Fprintf(w, "%-14s %-14s %10s %9s %24s | %-23s | %-16s |\n", wl.base, "abacus", thousands(int64(base.eps)), num(base.cpuPerM, 2),
					thousands(base.setFinals[0]), "-", "")
			}
		}
		ab := summarize("abacus", runs[n]["abacus"])
		for _, s := range cfg.systems {
			rs := runs[n][s]
			if len(rs) == 0 {
				continue
			}
			r := summarize(s, rs)
			if r.ok == 0 {
				fmt.Fprintf(w, "%-14s %-14s FAILED: %s\n", n, s, r.failure)
				continue
			}
			var ratios string
			switch {
			case s == "abacus" && base.ok > 0:
				ratios = fmt.Sprintf("%6s %5s (x base)", ratio(r.eps, base.eps), ratio(r.cpuPerM, base.cpuPerM))
			case s != "abacus" && ab.ok > 0:
				ratios = fmt.Sprintf("%6s %5s", ratio(ab.eps, r.eps), ratio(ab.cpuPerM, r.cpuPerM))
			}
			var each []string
			for _, x := range rs {
				if x.err != nil {
					each = append(each, "failed")
					continue
				}
				lag := "-"
				if last, _, _, ok := x.globalLag(); ok {
					lag = secs(last.Seconds())
				}
				each = append(each, fmt.Sprintf("%s %.2f %s", thousands(int64(x.throughput())), x.cpuPerMillion(), lag))
			}
			fmt.Fprintf(w, "%-14s %-14s %10s %9s %24s | %7s %7s %7s | %-16s | %s\n", n, s, thousands(int64(r.eps)), num(r.cpuPerM, 2),
				fmt.Sprintf("%s+%s+%s", thousands(r.setFinals[0]), thousands(r.setFinals[1]), thousands(r.setFinals[2])),
				secs(r.lagLast), secs(r.lagMax), secs(r.lagMed), ratios, strings.Join(each, "; "))
		}
	}
	fmt.Fprintln(w, "  global lag: per window, the broker append time of the global final minus that of the window's newest")
	fmt.Fprintln(w, "  entity final (the last partition closing it); last: the window the sentinels close, after the whole")
	fmt.Fprintln(w, "  input; max, med: over all windows, most of which close while the input streams at full rate. Kafka")
	fmt.Fprintf(w, "  Streams' per-region and global aggregations read repartition topics with grace %v (see -kstreams-rollup-grace);\n", cfg.streamsRollupGrace)
	fmt.Fprintln(w, "  at_least_once emits its finals at its 30 s commits. abacus/x: abacus on the rollup workload over the row's")
	fmt.Fprintln(w, "  system; x base: abacus on the rollup workload over abacus on its base (the per-entity set alone).")
}

// jsonResult is one step in the -json file.
type jsonResult struct {
	Workload     string  `json:"workload"`
	System       string  `json:"system"`
	Run          int     `json:"run"`
	Records      int64   `json:"records"`
	StartupS     float64 `json:"startup_s"`
	ProcessedS   float64 `json:"processed_s"`
	CommittedS   float64 `json:"committed_s"`
	EventsPerS   float64 `json:"events_per_s"`
	LastFinalS   float64 `json:"last_final_s,omitempty"`
	CPUSPerMEv   float64 `json:"cpu_s_per_million_events"`
	PeakRSSBytes int64   `json:"peak_rss_bytes"`
	Finals       int64   `json:"finals,omitempty"`
	// GlobalLagS: a rollup run's global lag of each window (result.globalLag), in s.
	GlobalLagS []float64 `json:"global_lag_s,omitempty"`
	Error      string    `json:"error,omitempty"`
}

func toJSON(workload string, run int, r *result) jsonResult {
	j := jsonResult{Workload: workload, System: r.system, Run: run + 1, Records: r.records}
	if r.err != nil {
		j.Error = r.err.Error()
		return j
	}
	sec := func(t time.Time) float64 { return t.Sub(r.first).Seconds() }
	j.StartupS, j.ProcessedS, j.CommittedS = r.startup().Seconds(), sec(r.ready), sec(r.committed)
	j.EventsPerS, j.CPUSPerMEv, j.PeakRSSBytes = r.throughput(), r.cpuPerMillion(), r.rss
	if !r.lastFinal.IsZero() {
		j.LastFinalS, j.Finals = sec(r.lastFinal), r.out.finals
	}
	for wi := range r.out.closed {
		if !r.out.closed[wi].IsZero() && !r.out.global[wi].IsZero() {
			j.GlobalLagS = append(j.GlobalLagS, r.out.global[wi].Sub(r.out.closed[wi]).Seconds())
		}
	}
	return j
}
