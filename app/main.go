// Package app is the abacus command: the subcommands that run, administer and query topologies,
// for the abacus binary and for users' own binaries built around their topologies (Main).
//
// It wires the other packages together and holds no stream-processing logic of its own.
package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/abacus-stream/abacus/topology"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Version is the abacus version, set at build time with -ldflags "-X ...app.Version=v1.2.3".
var Version = "dev"

// Program is what a binary built around topologies runs.
type Program struct {
	// Topologies are the topologies the binary can run, each built by its function.
	Topologies []func() (*topology.Topology, error)
	// DemoGenerator, when set, produces sample events for `demo` until ctx ends, through a client
	// that partitions keys as goka does.
	DemoGenerator func(ctx context.Context, cl *kgo.Client) error
	// DemoTopics lists the source topics the demo creates, with their partition counts.
	DemoTopics map[string]int32
}

// Main runs the command line of p and exits.
func Main(p Program) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := p.Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// isHelp reports whether arg asks for help.
func isHelp(arg string) bool {
	return arg == "-h" || arg == "-help" || arg == "--help" || arg == "help"
}

// groupHelp answers a command group called without a subcommand (a usage mistake: exit 2) or
// with a request for help (the usage on stdout: exit 0).
func groupHelp(args []string, stdout io.Writer, usage string) error {
	if len(args) == 0 {
		return usagef("a subcommand is required\n%s", usage)
	}
	fmt.Fprint(stdout, usage)
	return nil
}

// usageError is a mistake in the command line: exit code 2 and the command's usage.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

const usage = `abacus: windowed pre-aggregation of Kafka streams into HBase

Usage:
  abacus demo     [flags]           run everything in one process, with no servers (or against real ones)
  abacus run      -config FILE      run processor groups, sinks and the query server of a topology
  abacus serve    -config FILE      run the query API and dashboard only
  abacus admin    create|verify|reindex|drop -config FILE   create, check or delete topics and tables
  abacus query    -config FILE -set S -entity E   print aggregates as a table or JSON
  abacus offsets  show|lag|rewind -config FILE -sink aggregates|facts
  abacus status   -config FILE [-ops HOST:PORT,...]   lag, members and open windows of every group
  abacus generate -config FILE [-for D]   produce the example's sample events into Kafka
  abacus backfill -config FILE -set S [-from T] [-until T]   write a new set's past windows from the facts table
  abacus version

Run "abacus COMMAND -h" for a command's flags. Every flag can also come from the environment:
ABACUS_KAFKA_BROKERS, ABACUS_HBASE_ZK, ABACUS_LISTEN, ABACUS_TOPOLOGY, ABACUS_TOPIC_PREFIX,
ABACUS_INSTANCE_ID, ABACUS_OPS_LISTEN, ABACUS_ROLES, ABACUS_LOG_LEVEL, ABACUS_LOG_FORMAT.
Kafka TLS and SASL (kafka.tls, kafka.sasl in the file) also from ABACUS_KAFKA_TLS=true,
ABACUS_KAFKA_TLS_CA_FILE, _CERT_FILE, _KEY_FILE, _SERVER_NAME, ABACUS_KAFKA_SASL_MECHANISM,
_USERNAME, _PASSWORD or _PASSWORD_FILE (the demo against real brokers reads only these).
`

// Run runs one command line and returns the exit code: 0 on success, 1 on failure, 2 on a usage
// mistake.
func (p Program) Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	cmds := map[string]func(context.Context, []string, io.Writer, io.Writer) error{
		"demo":     p.demo,
		"run":      p.runCmd,
		"serve":    p.serve,
		"admin":    p.admin,
		"query":    p.query,
		"offsets":  p.offsets,
		"status":   p.status,
		"generate": p.generate,
		"backfill": p.backfillCmd,
		"version": func(_ context.Context, args []string, out, errOut io.Writer) error {
			if err := parse(flag.NewFlagSet("version", flag.ContinueOnError), args, errOut); err != nil {
				return err
			}
			fmt.Fprintf(out, "abacus %s %s\n", Version, buildInfo())
			return nil
		},
	}
	cmd, ok := cmds[args[0]]
	if isHelp(args[0]) {
		fmt.Fprint(stdout, usage)
		return 0
	}
	if !ok {
		fmt.Fprintf(stderr, "abacus: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	err := cmd(ctx, args[1:], stdout, stderr)
	var ue usageError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "abacus %s: %v\n", args[0], err)
		return 2
	default:
		fmt.Fprintf(stderr, "abacus %s: %v\n", args[0], err)
		return 1
	}
}

// buildInfo is the Go version and VCS commit of the binary, for `abacus version`.
func buildInfo() string {
	goVersion, commit := buildVersions()
	if commit == "unknown" {
		return goVersion
	}
	return goVersion + " " + commit
}

// buildVersions is the Go version that built the binary and the VCS commit it was built from
// ("unknown" outside a VCS checkout, as in go test).
func buildVersions() (goVersion, commit string) {
	goVersion, commit = runtime.Version(), "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		goVersion = bi.GoVersion
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				commit = s.Value
			}
		}
	}
	return goVersion, commit
}

// topologies builds every topology of p, by name.
func (p Program) topologies() (map[string]*topology.Topology, []string, error) {
	out := map[string]*topology.Topology{}
	var names []string
	for _, f := range p.Topologies {
		t, err := f()
		if err != nil {
			return nil, nil, err
		}
		out[t.Name()] = t
		names = append(names, t.Name())
	}
	sort.Strings(names)
	return out, names, nil
}

// common holds the flags every config-driven command shares.
type common struct {
	config    string
	kafka     string
	hbase     string
	listen    string
	topology  string
	logLevel  string
	logFormat string
	// Flags of the long-running commands (run, serve): registerProcess adds them.
	instanceID string
	opsListen  string
}

// registerProcess adds the flags of a process that runs roles.
func (c *common) registerProcess(fs *flag.FlagSet) {
	fs.StringVar(&c.instanceID, "instance-id", "", "this process's instance id in its consumer groups (overrides membership.instance_id)")
	fs.StringVar(&c.opsListen, "ops-listen", "", "address of /metrics, /healthz and /readyz, or off (overrides ops.listen)")
}

// register adds the shared flags but those in skip, which the command does not use: its -h
// lists only flags that change what it does, and it refuses the others by name.
func (c *common) register(fs *flag.FlagSet, skip ...string) {
	add := func(p *string, name, value, usage string) {
		if !slices.Contains(skip, name) {
			fs.StringVar(p, name, value, usage)
		}
	}
	add(&c.config, "config", "", "YAML config file (see examples/devices/abacus.yaml)")
	add(&c.kafka, "kafka", "", "Kafka brokers, comma separated (overrides kafka.brokers)")
	add(&c.hbase, "hbase", "", "HBase ZooKeeper quorum (overrides hbase.zookeeper)")
	add(&c.listen, "listen", "", "address of the query API and dashboard (overrides query.listen)")
	add(&c.topology, "topology", "", "topology to run (overrides topology)")
	add(&c.logLevel, "log-level", "", "debug, info, warn or error (overrides log.level; default info)")
	add(&c.logFormat, "log-format", "", "text or json (overrides log.format; default text)")
}

func parse(fs *flag.FlagSet, args []string, stderr io.Writer) error {
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err.Error()}
	}
	if fs.NArg() > 0 {
		return usagef("unexpected arguments %q", fs.Args())
	}
	return nil
}

// load reads the config file, then the environment, then the flags, and validates the result.
func (p Program) load(c *common, stderr io.Writer) (*Config, *topology.Topology, error) {
	for _, w := range unknownEnv(os.Environ()) {
		fmt.Fprintf(stderr, "abacus: warning: %s\n", w)
	}
	cfg := &Config{}
	if c.config != "" {
		var err error
		if cfg, err = LoadConfig(c.config); err != nil {
			return nil, nil, err
		}
	}
	return p.resolve(c, cfg, os.Getenv)
}

// resolve puts the environment, then the flags, over the config read from the file, fills the
// defaults and validates the result: the one way every command (and ResolveConfig) gets its config.
func (p Program) resolve(c *common, cfg *Config, getenv func(string) string) (*Config, *topology.Topology, error) {
	cfg.ApplyEnv(getenv)
	if c.kafka != "" {
		cfg.Kafka.Brokers = splitList(c.kafka)
	}
	if c.hbase != "" {
		cfg.HBase.ZooKeeper, cfg.HBase.Embedded = c.hbase, ""
	}
	if c.listen != "" {
		cfg.Query.Listen = c.listen
	}
	if c.topology != "" {
		cfg.Topology = c.topology
	}
	if c.instanceID != "" {
		cfg.Membership.InstanceID = c.instanceID
	}
	if c.opsListen != "" {
		cfg.Ops.Listen = c.opsListen
	}
	if c.logLevel != "" {
		cfg.Log.Level = c.logLevel
	}
	if c.logFormat != "" {
		cfg.Log.Format = c.logFormat
	}
	topos, names, err := p.topologies()
	if err != nil {
		return nil, nil, err
	}
	if cfg.Topology == "" && len(names) == 1 {
		cfg.Topology = names[0]
	}
	cfg.EnsureDefaults()
	if err := cfg.Validate(names); err != nil {
		return nil, nil, fmt.Errorf("%s is not valid:\n  %s", configName(c), strings.ReplaceAll(cfg.lines.at(configName(c), err), "\n", "\n  "))
	}
	topo := topos[cfg.Topology]
	if cfg.Topics.Prefix != "" || len(cfg.Topics.Names) > 0 {
		if topo, err = topo.WithTopicNames(cfg.Topics.Prefix, cfg.Topics.Names); err != nil {
			return nil, nil, fmt.Errorf("%s is not valid:\n  topics: %v", configName(c), err)
		}
	}
	return cfg, topo, nil
}

func configName(c *common) string {
	if c.config != "" {
		return c.config
	}
	return "config"
}

// flagSet reports whether the command line set the flag called name.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// logger is the process's logger, as lc says, writing to w.
func logger(lc LogConfig, w io.Writer) (*slog.Logger, error) {
	h, err := lc.handler(w)
	if err != nil {
		return nil, err
	}
	return slog.New(h), nil
}

// handler is the slog handler lc asks for; an error names the field at fault.
func (lc LogConfig) handler(w io.Writer) (slog.Handler, error) {
	var l slog.Level
	if lc.Level == "" {
		lc.Level = "info"
	}
	if err := l.UnmarshalText([]byte(lc.Level)); err != nil {
		return nil, fmt.Errorf("log.level: %q is not debug, info, warn or error", lc.Level)
	}
	opts := &slog.HandlerOptions{Level: l}
	switch lc.Format {
	case "", "text":
		return slog.NewTextHandler(w, opts), nil
	case "json":
		return slog.NewJSONHandler(w, opts), nil
	}
	return nil, fmt.Errorf("log.format: %q is not text or json", lc.Format)
}

func (p Program) runCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	var c common
	c.register(fs)
	c.registerProcess(fs)
	roles := fs.String("roles", "all", "comma-separated roles to run: "+strings.Join(RoleNames(), ", ")+", or all (env ABACUS_ROLES)")
	runFor := fs.Duration("for", 0, "stop cleanly after this long (default: until SIGINT or SIGTERM)")
	if err := parse(fs, args, stderr); err != nil {
		return err
	}
	if *runFor < 0 {
		return usagef("-for must not be negative")
	}
	if *runFor > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *runFor)
		defer cancel()
	}
	if c.config == "" {
		return usagef("-config is required")
	}
	rolesFrom := "-roles"
	if v := os.Getenv("ABACUS_ROLES"); v != "" && !flagSet(fs, "roles") {
		*roles, rolesFrom = v, "ABACUS_ROLES"
	}
	var rs []string
	if *roles == "all" {
		rs = RoleNames()
	} else {
		for _, r := range splitList(*roles) {
			if roleNamed(r) == nil {
				return usagef("%s: unknown role %q: want %s or all", rolesFrom, r, strings.Join(RoleNames(), ", "))
			}
			rs = append(rs, r)
		}
	}
	if parsedOnly(ctx, fs, &c, rs) {
		return nil
	}
	return p.runRoles(ctx, &c, rs, stdout, stderr)
}

func (p Program) serve(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	var c common
	c.register(fs)
	c.registerProcess(fs)
	if err := parse(fs, args, stderr); err != nil {
		return err
	}
	if c.config == "" && c.hbase == "" {
		return usagef("-config (or -hbase) is required")
	}
	if parsedOnly(ctx, fs, &c, []string{RoleQuery}) {
		return nil
	}
	return p.runRoles(ctx, &c, []string{RoleQuery}, stdout, stderr)
}

// connect loads the configuration as load does and opens the connections the command needs.
func (p Program) connect(ctx context.Context, c *common, stderr io.Writer, needsOf func(*Config) needs) (*deployment, error) {
	cfg, topo, err := p.load(c, stderr)
	if err != nil {
		return nil, err
	}
	log, err := logger(cfg.Log, stderr)
	if err != nil {
		return nil, err
	}
	return open(ctx, cfg, topo, log, needsOf(cfg))
}

// rolesNeed says what the roles connect to here, each as its entry of the roles table says: the
// sinks check their topics and tables, the query server its table; the processor and the live
// view open their own Kafka clients, whose security is checked at start all the same.
func rolesNeed(names []string, cfg *Config, w *waiter) needs {
	n := needs{wait: w}
	for _, name := range names {
		if r := roleNamed(name); r != nil && r.enabled(cfg) {
			rn := r.needs(cfg)
			n.kafka, n.store, n.brokers = n.kafka || rn.kafka, n.store || rn.store, n.brokers || rn.brokers
		}
	}
	return n
}

// runRoles runs roles in this process until ctx ends. Its ops endpoints answer from the start,
// while it connects (/readyz: not ready, starting).
func (p Program) runRoles(ctx context.Context, c *common, roles []string, stdout, stderr io.Writer) error {
	cfg, topo, err := p.load(c, stderr)
	if err != nil {
		return err
	}
	log, err := logger(cfg.Log, stderr)
	if err != nil {
		return err
	}
	reg := newRegistry()
	o := newOps(reg)
	for _, name := range roles {
		if r := roleNamed(name); r != nil && r.enabled(cfg) {
			o.role(name, cfg.groupOf(name), cfg.memberID(name))
		}
	}
	opsCtx, stopOps := context.WithCancel(ctx)
	defer stopOps()
	addr, separate := opsListen(cfg, roles)
	if separate {
		url, err := o.serve(opsCtx, addr, log)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "ops endpoints: %s (metrics, healthz, readyz)\n", url)
	}
	if cfg.Membership.Static() {
		log.Info("static group membership", "instance_id", cfg.Membership.InstanceID, "session_timeout", time.Duration(cfg.Membership.SessionTimeout))
	}
	// A start step that fails because the process was stopped (a signal while it waited for a
	// server) is a clean stop.
	startErr := func(err error) error {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	w := &waiter{log: log, report: o.waiting}
	n := rolesNeed(roles, cfg, w)
	d, err := openWith(ctx, cfg, topo, log, n, reg)
	if err != nil {
		return startErr(err)
	}
	defer d.shutdown()
	d.ops, d.opsOnQuery = o, !separate && addr == "" && cfg.Ops.Listen != "off" && servesOpsIn(roles)
	if err := d.prepare(ctx, roles, w); err != nil {
		return startErr(err)
	}
	err = d.run(ctx, roles, startOptions{ready: func(url string) { fmt.Fprintf(stdout, "query API and dashboard: %s\n", url) }})
	if ctx.Err() != nil {
		return nil // stopped by a signal: a clean stop
	}
	return err
}
