package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/syndtr/goleveldb/leveldb"
	"github.com/syndtr/goleveldb/leveldb/opt"
)

// restoreRow is one system's state size and restart times.
type restoreRow struct {
	system     string
	load       *result
	kept, lost *result // restarts with the local state kept, and after deleting it
	table      *tableStats
	rebuilt    *tableStats // abacus's table after the restart that lost it
	diskBytes  int64       // local state folder after the load, at rest
	changelog  int64       // records in the system's changelog topics
	err        error
}

type restoreReport struct {
	entities int
	topic    string // the input: its name is in every abacus offset fence
	rows     []*restoreRow
}

// runRestore measures what a processor keeps per open window and how long it takes to come back:
// every system loads the same state (one open window per entity: one event each, all in one
// minute, no sentinel, so nothing closes), stops cleanly, and is restarted twice, once with its
// local state and once without it (rebuilding it from its changelog topics). A restart counts
// from process start until it has processed one new event on every partition: systems process
// input only once their state is restored.
func runRestore(ctx context.Context, cfg *config, adm *admin, log *slog.Logger, runPrefix string) (*restoreReport, error) {
	w, err := newWorkload("restore", cfg.restoreEntities, 0)
	if err != nil {
		return nil, err
	}
	in, err := adm.ensureInput(ctx, log, w, runPrefix, false)
	if err != nil {
		return nil, err
	}
	rep := &restoreReport{entities: w.entities, topic: in.topic}
	var errs error
	for _, name := range cfg.restoreSystems {
		sys, _ := systemByName(name)
		row := measureRestore(ctx, cfg, adm, log, runPrefix, in, sys)
		rep.rows = append(rep.rows, row)
		errs = errors.Join(errs, row.err)
		if ctx.Err() != nil {
			break
		}
	}
	return rep, errs
}

func measureRestore(ctx context.Context, cfg *config, adm *admin, log *slog.Logger, runPrefix string, in *input, sys system) *restoreRow {
	row := &restoreRow{system: sys.name}
	l := launch{group: fmt.Sprintf("%s-restore-%s", runPrefix, sys.name), input: in.topic}
	l.storage = filepath.Join(cfg.workdir, l.group)
	l.output = l.group + "-out"
	if err := adm.createTopic(ctx, l.output, true); err != nil {
		row.err = err
		return row
	}
	run := func(phase string, minProgress int64) (*result, error) {
		cmd, err := sys.command(cfg, l)
		if err != nil {
			return nil, err
		}
		st := &step{name: "restore/" + sys.name + "/" + phase, cmd: cmd, group: l.group, in: in,
			minProgress: minProgress, logPath: filepath.Join(cfg.workdir, l.group+".log"),
			stall: cfg.stall, timeout: cfg.timeout}
		res := st.run(ctx, adm, log)
		return res, res.err
	}
	var err error
	if row.load, err = run("load", 0); err != nil {
		row.err = err
		return row
	}
	row.diskBytes = dirSize(l.storage)
	if sys.name == "abacus" {
		if row.table, err = measureTable(l.storage, l.group+"-table"); err != nil {
			row.err = err
			return row
		}
	}
	if row.changelog, err = changelogRecords(ctx, adm, l.group); err != nil {
		row.err = err
		return row
	}
	log.Info("state loaded", "system", sys.name, "disk bytes", row.diskBytes, "changelog records", row.changelog)

	if err := adm.produceProbes(ctx, in, 1); err != nil {
		row.err = err
		return row
	}
	if row.kept, err = run("restart-kept", partitions); err != nil {
		row.err = err
		return row
	}
	if err := os.RemoveAll(l.storage); err != nil {
		row.err = err
		return row
	}
	if err := adm.produceProbes(ctx, in, 2); err != nil {
		row.err = err
		return row
	}
	if row.lost, err = run("restart-lost", partitions); err != nil {
		row.err = err
		return row
	}
	if row.table != nil {
		// The rebuilt table must hold every loaded entity, plus the probes of both restarts.
		if row.rebuilt, err = measureTable(l.storage, l.group+"-table"); err != nil {
			row.err = err
		} else if want := row.table.entities + 2*partitions; row.rebuilt.entities != want || row.rebuilt.windows != row.table.windows+2*partitions {
			row.err = fmt.Errorf("%s: the table rebuilt from the changelog holds %d entities and %d windows, want %d and %d",
				sys.name, row.rebuilt.entities, row.rebuilt.windows, want, row.table.windows+2*partitions)
		}
	}
	return row
}

// measureTable reads abacus's local window table (one LevelDB per partition, goka's layout
// <storage>/<table>.<partition>) at rest, after a clean stop.
func measureTable(storage, table string) (*tableStats, error) {
	ts := &tableStats{}
	for p := range partitions {
		dir := filepath.Join(storage, fmt.Sprintf("%s.%d", table, p))
		ts.diskBytes += dirSize(dir)
		db, err := leveldb.OpenFile(dir, &opt.Options{ReadOnly: true, ErrorIfMissing: true})
		if err != nil {
			return nil, fmt.Errorf("open local table %s: %w", dir, err)
		}
		it := db.NewIterator(nil, nil)
		for it.Next() {
			k, v := it.Key(), it.Value()
			if string(k) == "__offset" { // goka's own bookkeeping, not an entity
				continue
			}
			wins, fences, aggs, err := decodeEntity(v)
			if err != nil {
				it.Release()
				db.Close()
				return nil, fmt.Errorf("%s: key %q: %w", dir, k, err)
			}
			ts.entities++
			ts.windows += wins
			ts.keyBytes += int64(len(k))
			ts.valueBytes += int64(len(v))
			ts.fenceBytes += fences
			ts.aggBytes += aggs
		}
		err = it.Error()
		it.Release()
		db.Close()
		if err != nil {
			return nil, fmt.Errorf("iterate %s: %w", dir, err)
		}
	}
	return ts, nil
}

// changelogRecords counts the records in a system's changelog topics: abacus's <group>-table,
// Kafka Streams' <application.id>-...-changelog.
func changelogRecords(ctx context.Context, adm *admin, group string) (int64, error) {
	ts, err := adm.adm.ListTopics(ctx)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, t := range ts.Names() {
		if strings.HasPrefix(t, group+"-") && (strings.HasSuffix(t, "-changelog") || t == group+"-table") {
			c, _, err := adm.endOffsets(ctx, t)
			if err != nil {
				return 0, err
			}
			n += c
		}
	}
	return n, nil
}

// restoredSummary sums Kafka Streams' "restored <store> <partition> <records> <ms>" lines per
// store: records and the slowest partition.
func restoredSummary(lines []string) string {
	type agg struct {
		records, slowest int64
	}
	stores := map[string]*agg{}
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) != 5 || f[0] != "restored" {
			continue
		}
		n, _ := strconv.ParseInt(f[3], 10, 64)
		ms, _ := strconv.ParseInt(f[4], 10, 64)
		a := stores[f[1]]
		if a == nil {
			a = &agg{}
			stores[f[1]] = a
		}
		a.records += n
		a.slowest = max(a.slowest, ms)
	}
	if len(stores) == 0 {
		return "nothing restored"
	}
	var names []string
	for s := range stores {
		names = append(names, s)
	}
	sort.Strings(names)
	var parts []string
	for _, s := range names {
		parts = append(parts, fmt.Sprintf("%s %s records (slowest partition %.1f s)", s, thousands(stores[s].records), float64(stores[s].slowest)/1000))
	}
	return strings.Join(parts, "; ")
}

func (rep *restoreReport) print(w io.Writer) {
	fmt.Fprintf(w, "\n== state and restore: %s entities, one open window each, %d partitions\n", thousands(int64(rep.entities)), partitions)
	fmt.Fprintf(w, "%-14s %11s %15s %14s %17s %15s %15s\n",
		"system", "load ev/s", "table B/window", "disk B/window", "changelog records", "restart kept", "restart lost")
	perWin := float64(rep.entities)
	for _, r := range rep.rows {
		if r.load == nil || r.load.err != nil {
			fmt.Fprintf(w, "%-14s FAILED: %v\n", r.system, firstLine(r.err))
			continue
		}
		table := "-"
		if r.table != nil && r.table.windows > 0 {
			table = fmt.Sprintf("%.1f", float64(r.table.keyBytes+r.table.valueBytes)/float64(r.table.windows))
		}
		restart := func(x *result) string {
			if x == nil || x.err != nil {
				return "FAILED"
			}
			return fmt.Sprintf("%.1f s", x.ready.Sub(x.spawn).Seconds())
		}
		fmt.Fprintf(w, "%-14s %11s %15s %14.1f %17s %15s %15s\n", r.system, thousands(int64(r.load.throughput())), table,
			float64(r.diskBytes)/perWin, thousands(r.changelog), restart(r.kept), restart(r.lost))
		if r.err != nil {
			fmt.Fprintf(w, "%-14s FAILED: %v\n", "", firstLine(r.err))
		}
	}
	for _, r := range rep.rows {
		if t := r.table; t != nil && t.windows > 0 {
			n := float64(t.windows)
			fmt.Fprintf(w, "  %s table: %s entities, %s windows; per window: key %.1f B + value %.1f B (offset fences %.1f, of which the\n",
				r.system, thousands(t.entities), thousands(t.windows), float64(t.keyBytes)/n, float64(t.valueBytes)/n, float64(t.fenceBytes)/n)
			fmt.Fprintf(w, "    source topic's name %d B; accumulators %.1f; entity and window headers %.1f); LevelDB files %.1f B\n",
				len(rep.topic), float64(t.aggBytes)/n, float64(t.valueBytes-t.fenceBytes-t.aggBytes)/n, float64(t.diskBytes)/n)
		}
		if sys, _ := systemByName(r.system); sys.java() {
			if r.kept != nil && r.kept.err == nil {
				fmt.Fprintf(w, "  %s restored with local state kept: %s\n", r.system, restoredSummary(r.kept.lines))
			}
			if r.lost != nil && r.lost.err == nil {
				fmt.Fprintf(w, "  %s restored after losing local state: %s\n", r.system, restoredSummary(r.lost.lines))
			}
		}
	}
	fmt.Fprintln(w, "  table B/window: abacus's LevelDB keys + values per open window (goal <= 64); disk: the local state")
	fmt.Fprintln(w, "  folder after a clean stop, per window. restart: from process start until a new event is processed on")
	fmt.Fprintln(w, "  every partition (input is processed only once state is restored), with the local state kept, and")
	fmt.Fprintln(w, "  after deleting it (rebuilt from the changelog; abacus's rebuilt table is read back and checked).")
}

func firstLine(err error) string {
	if err == nil {
		return ""
	}
	return strings.SplitN(err.Error(), "\n", 2)[0]
}
