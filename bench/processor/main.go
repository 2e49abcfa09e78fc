package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// config is the harness's flags.
type config struct {
	brokers         []string
	events          int
	entities        int
	workloads       []string
	systems         []string
	runs            int
	restore         bool
	restoreEntities int
	restoreSystems  []string
	stall           time.Duration
	timeout         time.Duration
	javaDir         string
	javaOpts        string
	emit            string
	// streamsRollupGrace is the grace of Kafka Streams' repartitioned (per-region, global)
	// aggregations in a rollup workload (see the -kstreams-rollup-grace flag).
	streamsRollupGrace time.Duration
	cpuprofile         string
	finalRetention     time.Duration
	workdir            string
	keep               bool
	inputPrefix        string
	reuse              bool
	jsonOut            string
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "child" {
		os.Exit(childMain(os.Args[2:]))
	}
	os.Exit(harnessMain(os.Args[1:]))
}

// envOr is the environment variable name, or def when it is unset or empty.
func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// list reads a comma-separated flag, dropping empty items.
func list(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// parseFlags reads the harness's flags and checks the systems and workloads they name.
func parseFlags(args []string) (*config, error) {
	fl := flag.NewFlagSet("procbench", flag.ContinueOnError)
	c := &config{}
	var brokers, workloads, systemsFlag, restoreSystems string
	var names []string
	for _, s := range systems {
		names = append(names, s.name)
	}
	fl.StringVar(&brokers, "brokers", envOr("ABACUS_KAFKA_BROKERS", "127.0.0.1:9092"), "Kafka seed brokers, comma separated (env ABACUS_KAFKA_BROKERS)")
	fl.IntVar(&c.events, "events", 1_000_000, "events per workload (entities scale with it: sparse events/10, dense events/100)")
	fl.IntVar(&c.entities, "entities", 0, "override the entity count of both workloads")
	fl.StringVar(&workloads, "workloads", "sparse,dense", "workloads to run: sparse, dense, late ones: sparse-late<pct>, dense-late<pct> (the base workload plus pct% late events, e.g. sparse,sparse-late10,sparse-late50 -systems abacus), and rollup ones: sparse-rollup, dense-rollup (the base's input, with a per-region and a global set beside the per-entity one), sparse-join, dense-join (the rollup workload, its region looked up by event time in a table of the entities)")
	fl.StringVar(&systemsFlag, "systems", strings.Join(names, ","), "systems to run, in this order")
	fl.IntVar(&c.runs, "runs", 1, "runs of each system per workload; the table shows the medians")
	fl.BoolVar(&c.restore, "restore", true, "measure abacus's state size and restore times")
	fl.IntVar(&c.restoreEntities, "restore-entities", 0, "entities (one open window each) for the state and restore measurement (default: -events)")
	fl.StringVar(&restoreSystems, "restore-systems", "abacus,kstreams-alos", "systems whose restore is measured")
	fl.DurationVar(&c.stall, "stall", 90*time.Second, "fail a step when nothing moved for this long (above Kafka Streams' 30 s commit interval)")
	fl.DurationVar(&c.timeout, "step-timeout", 30*time.Minute, "fail a step that has not finished after this long")
	fl.StringVar(&c.javaDir, "java-dir", "bench/processor/java", "the Kafka Streams application's Maven project (built)")
	fl.StringVar(&c.javaOpts, "java-opts", "-Xms1g -Xmx1g", "JVM options of the Kafka Streams application")
	fl.StringVar(&c.emit, "emit", "suppress", "Kafka Streams finals: suppress (untilWindowCloses) or close (EmitStrategy.onWindowClose)")
	fl.DurationVar(&c.streamsRollupGrace, "kstreams-rollup-grace", 10*time.Minute, "rollup workloads: grace of Kafka Streams' per-region and global aggregations, which read repartition topics whose records come as far out of event-time order as the input tasks drift apart, up to the input's span (10m for sparse): with less, they drop on-time events as late; at most 10m, or the sentinels would not close the last window")
	fl.StringVar(&c.cpuprofile, "cpuprofile", "", "folder for CPU profiles of the abacus steps (abacus-<workload>-<run>.pprof)")
	fl.DurationVar(&c.finalRetention, "abacus-final-retention", 0, "abacus's FinalRetention (0: its default, 1 minute); the input replays minutes of event time in seconds, so with the default no closed window leaves the table during a run")
	fl.StringVar(&c.workdir, "workdir", "", "folder for local state and step logs (default: a new temporary folder)")
	fl.BoolVar(&c.keep, "keep", false, "keep the run's topics, groups and work folder (kept anyway when a step fails)")
	fl.StringVar(&c.inputPrefix, "input-prefix", "procbench", "prefix of the input topics, which are kept for later runs")
	fl.BoolVar(&c.reuse, "reuse-input", true, "reuse an input topic a previous run produced (same workload and size)")
	fl.StringVar(&c.jsonOut, "json", "", "also write every step's measurements to this file, as JSON")
	fl.Usage = func() {
		fmt.Fprintf(fl.Output(), "usage: procbench [flags]\n\nRuns the processor benchmark: see bench/processor/doc.go.\n\n")
		fl.PrintDefaults()
	}
	if err := fl.Parse(args); err != nil {
		return nil, err
	}
	c.brokers = list(brokers)
	c.workloads = list(workloads)
	c.systems = list(systemsFlag)
	c.restoreSystems = list(restoreSystems)
	if c.restoreEntities == 0 {
		c.restoreEntities = c.events
	}
	for _, s := range append(append([]string{}, c.systems...), c.restoreSystems...) {
		if _, ok := systemByName(s); !ok {
			return nil, fmt.Errorf("unknown system %q (known: %s)", s, strings.Join(names, ", "))
		}
	}
	for _, w := range c.workloads {
		if _, err := newWorkload(w, c.events, c.entities); err != nil {
			return nil, err
		}
	}
	if c.emit != "suppress" && c.emit != "close" {
		return nil, fmt.Errorf("-emit must be suppress or close, got %q", c.emit)
	}
	if maxGrace := time.Duration(sentinelGapMs-windowMs) * time.Millisecond; c.streamsRollupGrace < 0 || c.streamsRollupGrace > maxGrace {
		return nil, fmt.Errorf("-kstreams-rollup-grace must be from 0 to %v (the sentinels close the last window then), got %v", maxGrace, c.streamsRollupGrace)
	}
	if c.runs < 1 || c.events < partitions {
		return nil, errors.New("-runs must be at least 1 and -events at least 12")
	}
	return c, nil
}

// harnessMain runs the benchmark: exit status 0 when every step passed, 1 when one failed, 2
// for a bad command line.
func harnessMain(args []string) int {
	cfg, err := parseFlags(args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(os.Stderr, "procbench:", err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ok, err := harness(ctx, cfg, log)
	if err != nil {
		log.Error("procbench failed", "err", err)
		return 1
	}
	if !ok {
		return 1
	}
	return 0
}

// harness runs every workload and system, prints the tables, and reports whether every step
// passed.
func harness(ctx context.Context, cfg *config, log *slog.Logger) (bool, error) {
	if err := makeFolders(cfg); err != nil {
		return false, err
	}
	adm, err := connectAdmin(ctx, cfg.brokers)
	if err != nil {
		return false, err
	}
	defer adm.close()
	// Every topic and group of this run starts with runPrefix, so it can all go at the end.
	runPrefix := fmt.Sprintf("pb%d", time.Now().Unix())
	log.Info("procbench", "brokers", cfg.brokers, "run", runPrefix, "workdir", cfg.workdir)

	t := &tally{ok: true}
	abacusRuns := map[string][]*result{}         // by workload, for the late events' table
	allRuns := map[string]map[string][]*result{} // by workload and system, for the rollup table
	for _, wname := range cfg.workloads {
		w, _ := newWorkload(wname, cfg.events, cfg.entities)
		in, err := adm.ensureInput(ctx, log, w, cfg.inputPrefix, cfg.reuse)
		if err != nil {
			return false, err
		}
		byRun, err := runWorkload(ctx, cfg, adm, log, runPrefix, in, t)
		if err != nil {
			return false, err
		}
		printTable(os.Stdout, in, cfg, byRun)
		abacusRuns[wname] = byRun["abacus"]
		allRuns[wname] = byRun
	}
	printLate(os.Stdout, cfg, cfg.workloads, abacusRuns)
	printRollup(os.Stdout, cfg, cfg.workloads, allRuns)
	if cfg.restore && !printRestore(ctx, cfg, adm, log, runPrefix) {
		t.ok = false
	}
	if cfg.jsonOut != "" {
		b, _ := json.MarshalIndent(t.all, "", "  ")
		if err := os.WriteFile(cfg.jsonOut, b, 0o644); err != nil {
			return false, err
		}
	}
	if !t.ok {
		fmt.Fprintf(os.Stderr, "\nprocbench: AT LEAST ONE STEP FAILED (see the errors above); topics with prefix %s and %s are kept\n", runPrefix, cfg.workdir)
		return false, nil
	}
	if !cfg.keep {
		cleanupRun(adm, log, cfg, runPrefix)
	}
	return true, nil
}

// makeFolders makes the work folder (a new temporary one unless -workdir) and the -cpuprofile
// folder.
func makeFolders(cfg *config) error {
	if cfg.workdir == "" {
		d, err := os.MkdirTemp("", "procbench-")
		if err != nil {
			return err
		}
		cfg.workdir = d
	} else if err := os.MkdirAll(cfg.workdir, 0o755); err != nil {
		return err
	}
	if cfg.cpuprofile != "" {
		if err := os.MkdirAll(cfg.cpuprofile, 0o755); err != nil {
			return err
		}
	}
	return nil
}

// connectAdmin is the harness's admin client, once a broker has answered: without one, every
// step would fail on its own timeout.
func connectAdmin(ctx context.Context, brokers []string) (*admin, error) {
	adm, err := newAdmin(brokers)
	if err != nil {
		return nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	_, err = adm.adm.ListBrokers(pctx)
	cancel()
	if err != nil {
		adm.close()
		return nil, fmt.Errorf("no Kafka broker answers at %s (start one: testenv/services.sh start): %w", strings.Join(brokers, ","), err)
	}
	return adm, nil
}

// tally is what the steps found: whether every one passed, and their measurements for -json.
type tally struct {
	ok  bool
	all []jsonResult
}

// runWorkload runs every system cfg.runs times over one workload's input, and returns the
// results by system. A failed step is logged and counted in t; the next one still runs.
func runWorkload(ctx context.Context, cfg *config, adm *admin, log *slog.Logger, runPrefix string, in *input, t *tally) (map[string][]*result, error) {
	byRun := map[string][]*result{}
	for run := range cfg.runs {
		for _, sname := range cfg.systems {
			sys, _ := systemByName(sname)
			if in.w.rollup && !sys.finals {
				// A system that writes no finals does on a rollup workload what it did on its
				// base: the same input, read the same way.
				continue
			}
			res := runSystem(ctx, cfg, adm, log, runPrefix, in, sys, run)
			if res.err != nil {
				t.ok = false
				log.Error("step failed", "err", res.err)
			} else {
				log.Info("step done", "workload", in.w.name, "system", sname, "run", run+1,
					"events/s", int(res.throughput()), "cpu-s/M", fmt.Sprintf("%.2f", res.cpuPerMillion()))
			}
			byRun[sname] = append(byRun[sname], res)
			t.all = append(t.all, toJSON(in.w.name, run, res))
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
		}
	}
	return byRun, nil
}

// printRestore measures and prints abacus's state size and restore times, and reports whether
// the measurement succeeded.
func printRestore(ctx context.Context, cfg *config, adm *admin, log *slog.Logger, runPrefix string) bool {
	rep, err := runRestore(ctx, cfg, adm, log, runPrefix)
	if err != nil {
		log.Error("state and restore measurement failed", "err", err)
	}
	if rep != nil {
		rep.print(os.Stdout)
	}
	return err == nil
}

// cleanupRun deletes the run's topics and groups and its work folder, after a run that passed.
func cleanupRun(adm *admin, log *slog.Logger, cfg *config, runPrefix string) {
	dctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := adm.dropRun(dctx, runPrefix); err != nil {
		log.Warn("cleanup", "err", err)
	}
	os.RemoveAll(cfg.workdir)
}

// runSystem runs one system once over the input.
func runSystem(ctx context.Context, cfg *config, adm *admin, log *slog.Logger, runPrefix string, in *input, sys system, run int) *result {
	l := launch{group: fmt.Sprintf("%s-%s-%s-%d", runPrefix, in.w.name, sys.name, run+1), input: in.topic, rollup: in.w.rollup, registry: in.registry}
	l.storage = filepath.Join(cfg.workdir, l.group)
	if sys.finals {
		l.output = l.group + "-out"
		if err := adm.createTopic(ctx, l.output, true); err != nil {
			return &result{system: sys.name, err: err}
		}
	}
	if sys.name == "abacus" {
		// Every abacus run has its late topic, on time or not: one topology for all workloads,
		// and a 0% run checks that none of its events was late.
		l.late = l.group + "-late"
	}
	if sys.name == "abacus" && cfg.cpuprofile != "" {
		l.cpuprofile = filepath.Join(cfg.cpuprofile, fmt.Sprintf("abacus-%s-%d.pprof", in.w.name, run+1))
	}
	cmd, err := sys.command(cfg, l)
	if err != nil {
		return &result{system: sys.name, err: err}
	}
	st := &step{
		name:    fmt.Sprintf("%s/%s#%d", in.w.name, sys.name, run+1),
		cmd:     cmd,
		group:   l.group,
		in:      in,
		output:  l.output,
		decode:  sys.decode,
		logPath: filepath.Join(cfg.workdir, l.group+".log"),
		stall:   cfg.stall,
		timeout: cfg.timeout,
	}
	if sys.finals {
		st.expect = in.expect
	}
	if in.expect != nil {
		st.lateTopic = l.late
	}
	res := st.run(ctx, adm, log)
	res.system = sys.name
	return res
}
