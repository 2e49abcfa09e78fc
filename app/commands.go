package app

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/abacus-stream/abacus/processors"
	"github.com/abacus-stream/abacus/query"
	"github.com/abacus-stream/abacus/schema"
	"github.com/abacus-stream/abacus/sinks"
	"github.com/abacus-stream/abacus/topology"
	"github.com/abacus-stream/abacus/totals"
	"github.com/twmb/franz-go/pkg/kadm"
)

const adminUsage = `Usage:
  abacus admin create -config FILE [-partitions N]   create the topics and tables that are missing
  abacus admin verify -config FILE                   check that every topic and table is as the config says
  abacus admin reindex -config FILE                  rebuild the aggregates table's key index from its windows

Topics: the topology's sources, totals, dead-letter and late topics, the processor group's loop
topic and table changelog, all with the sources' partition count (or -partitions for new sources)
and processor.replication. Tables: the sink tables, pre-split on their salt buckets, the
aggregates table's key index (<table>_keys: one row per set and key, which entity listings read),
and the offsets table when sinks.offsets is hbase.

The key index is complete when admin create makes it beside an empty aggregates table. Beside one
that already holds windows (an upgrade), restart the aggregates sinks so that they write it, then
run admin reindex once: until then listings walk the aggregates table, a few reads per key.
`

// admin creates or verifies what a deployment needs: its topics and tables.
func (p Program) admin(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || isHelp(args[0]) {
		return groupHelp(args, stdout, adminUsage)
	}
	if args[0] != "create" && args[0] != "verify" && args[0] != "reindex" {
		return usagef("unknown subcommand %q\n%s", args[0], adminUsage)
	}
	verb := args[0]
	fs := flag.NewFlagSet("admin "+verb, flag.ContinueOnError)
	var c common
	c.register(fs)
	partitions := fs.Int("partitions", 12, "partitions of the topics admin create makes, when no source exists yet")
	if err := parse(fs, args[1:], stderr); err != nil {
		return err
	}
	if *partitions < 1 {
		return usagef("-partitions must be at least 1, got %d", *partitions)
	}
	if parsedOnly(ctx, fs, &c, nil) {
		return nil
	}
	d, err := p.connect(ctx, &c, stderr, func(*Config) needs { return needs{kafka: verb != "reindex", store: true} })
	if err != nil {
		return err
	}
	defer d.shutdown()
	cfg := d.cfg
	step := func(what string, f func() error) error {
		t0 := time.Now()
		fmt.Fprintf(stdout, "%s ... ", what)
		if err := f(); err != nil {
			fmt.Fprintln(stdout, "failed")
			return fmt.Errorf("%s: %w", what, err)
		}
		fmt.Fprintf(stdout, "ok (%s)\n", time.Since(t0).Round(time.Millisecond))
		return nil
	}
	if verb == "reindex" {
		return d.reindex(ctx, stdout, step)
	}
	specs, err := d.topicSpecs(ctx, int32(*partitions))
	if err != nil {
		return err
	}
	adm := kadm.NewClient(d.kafka)
	var failed []error
	for _, t := range specs {
		what := fmt.Sprintf("%s topic %s (%d partitions, replication %d)", t.Role, t.Name, t.Partitions, t.Replication)
		err := step(what, func() error {
			if verb == "create" {
				if err := d.ensureTopics(ctx, []processors.TopicSpec{t}); err != nil {
					return err
				}
			}
			return verifyTopic(ctx, adm, t)
		})
		if err != nil {
			failed = append(failed, err)
		}
	}
	for _, r := range sinkRoles() {
		t := *r.table(cfg)
		if t.Disabled {
			continue
		}
		what := fmt.Sprintf("table %s (family %s, %d salt buckets)", t.Table, t.Family, t.SaltBuckets)
		err := step(what, func() error {
			if verb == "create" {
				return d.st.EnsureTable(ctx, d.layout(t))
			}
			return d.st.VerifyTable(ctx, d.layout(t))
		})
		if err != nil {
			failed = append(failed, err)
		}
		if r.holdsAggregates {
			l := schema.KeyIndexLayout(d.layout(t))
			var state string
			err := step(fmt.Sprintf("key index %s", l.Name), func() error {
				var err error
				if verb == "create" {
					state, err = d.ensureKeyIndex(ctx, t)
					return err
				}
				if err = d.st.VerifyTable(ctx, l); err == nil {
					state, err = d.keyIndexState(ctx, t, false)
				}
				return err
			})
			if err != nil {
				failed = append(failed, err)
			} else {
				fmt.Fprintf(stdout, "  key index: %s\n", state)
			}
		}
		if verb == "verify" && r.holdsAggregates {
			// What the aggregate table's rows are keyed by, set by set: a rollup's rows hold its
			// keys where an entity set's hold entities, and nothing in the table tells them apart.
			for _, s := range d.topo.Sets() {
				fmt.Fprintf(stdout, "  set %s: %s, %s\n", s.Name, describeSet(s), s.Window)
			}
		}
	}
	if cfg.Sinks.Offsets == "hbase" && verb == "create" {
		if err := step("offsets table "+cfg.Sinks.OffsetsTable, func() error {
			return sinks.EnsureOffsetsTable(ctx, d.hb.Admin(), cfg.Sinks.OffsetsTable)
		}); err != nil {
			failed = append(failed, err)
		}
	}
	return errors.Join(failed...)
}

// query prints the windows of entities of an aggregate set.
func (p Program) query(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("query", flag.ContinueOnError)
	var c common
	c.register(fs)
	set := fs.String("set", "", "aggregate set (required)")
	entity := fs.String("entity", "", "entity, or several separated by commas; a rollup's keys (e.g. regions); not needed for a global rollup")
	from := fs.String("from", "", "first window start: RFC 3339, ms since the epoch, or relative like -6h")
	to := fs.String("to", "", "end of the window starts (exclusive), as -from")
	limit := fs.Int("limit", 20, "most windows per entity (0: all)")
	oldest := fs.Bool("oldest-first", false, "oldest window first")
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	if err := parse(fs, args, stderr); err != nil {
		return err
	}
	if *set == "" {
		return usagef("-set and -entity are required")
	}
	if *limit < 0 {
		return usagef("-limit must not be negative")
	}
	if parsedOnly(ctx, fs, &c, nil) {
		return nil
	}
	cfg, topo, err := p.load(&c)
	if err != nil {
		return err
	}
	info, found := topo.Set(*set)
	if !found {
		return usagef("-set %q: topology %s has %s", *set, topo.Name(), listSets(topo.Sets()))
	}
	keys, err := queryKeys(info, *entity)
	if err != nil {
		return err
	}
	o := query.Options{Limit: *limit, OldestFirst: *oldest}
	if o.From, err = parseTime(*from); err != nil {
		return usagef("-from: %v", err)
	}
	if o.To, err = parseTime(*to); err != nil {
		return usagef("-to: %v", err)
	}
	log, err := logger(c.logLevel, stderr)
	if err != nil {
		return err
	}
	d, err := open(ctx, cfg, topo, log, needs{store: true})
	if err != nil {
		return err
	}
	defer d.shutdown()
	r, err := d.reader(ctx)
	if err != nil {
		return err
	}
	page, err := r.Page(ctx, *set, keys, o)
	if err != nil {
		return err
	}
	if *asJSON {
		if err := printJSON(stdout, info, page.Windows); err != nil {
			return err
		}
		printTruncated(stderr, page) // stdout stays one JSON array
		return nil
	}
	if err := printTable(stdout, info, page.Windows); err != nil {
		return err
	}
	printTruncated(stdout, page)
	return nil
}

// queryKeys are the keys -entity names for a set: entities, a rollup's keys, or for a global
// rollup its one key (which -entity may leave out, or name).
func queryKeys(info topology.SetInfo, entity string) ([]string, error) {
	keys := splitList(entity)
	if info.Rollup && info.Dimension == "" {
		for _, k := range keys {
			if k != topology.GlobalKey {
				return nil, usagef("-entity %q: set %s is a global rollup, whose one key is %q: leave -entity out", k, info.Name, topology.GlobalKey)
			}
		}
		return []string{topology.GlobalKey}, nil
	}
	if len(keys) == 0 {
		if info.Rollup {
			return nil, usagef("-entity is required: set %s is a rollup by %s, give %s keys (e.g. -entity a,b)", info.Name, info.Dimension, info.Dimension)
		}
		return nil, usagef("-set and -entity are required")
	}
	return keys, nil
}

// describeSet says what a set's rows are keyed by: "by entity", "rollup by region", "global rollup
// (key all)".
func describeSet(s topology.SetInfo) string {
	switch {
	case !s.Rollup:
		return "by " + s.Dimension
	case s.Dimension == "":
		return "global rollup (key " + topology.GlobalKey + ")"
	}
	return "rollup by " + s.Dimension
}

// listSets names sets with what they are keyed by, for messages that list the choices.
func listSets(sets []topology.SetInfo) string {
	parts := make([]string, len(sets))
	for i, s := range sets {
		parts[i] = s.Name + " (" + describeSet(s) + ")"
	}
	return strings.Join(parts, ", ")
}

// keyColumn is the heading of the column of a set's keys: the entity, a rollup's dimension, or
// "key" for a global rollup's one key.
func keyColumn(s topology.SetInfo) string {
	if s.Dimension == "" {
		return "key"
	}
	return s.Dimension
}

// printTruncated says which entities the limit cut and the flag that reads their next windows:
// the bound that moves in the order asked for, the other one being already on the command line.
func printTruncated(w io.Writer, p query.Page) {
	for _, e := range sortedKeys(p.Next) {
		next := p.Next[e]
		flag := "-to " + next.To.UTC().Format(time.RFC3339Nano) // older windows: starts before the last shown
		if next.OldestFirst {
			flag = "-from " + next.From.UTC().Format(time.RFC3339Nano)
		}
		fmt.Fprintf(w, "%s: truncated at -limit %d windows; for the next ones repeat with %s (or -limit 0 for all)\n", e, next.Limit, flag)
	}
}

func parseTime(v string) (time.Time, error) { return query.ParseTime(v, time.Now()) }

type windowOut struct {
	Entity string `json:"entity"` // the entity, or a rollup's key
	// Rollup and Dimension say, for a rollup's windows only, that Entity is a rollup key and of
	// what: left out for entity sets, whose output is as it always was.
	Rollup    bool           `json:"rollup,omitempty"`
	Dimension string         `json:"dimension,omitempty"`
	Start     time.Time      `json:"start"`
	End       time.Time      `json:"end"`
	Final     bool           `json:"final"`
	Revision  uint64         `json:"revision"`
	Values    map[string]any `json:"values"`
}

func printJSON(w io.Writer, info topology.SetInfo, res map[string][]query.Window) error {
	var out []windowOut
	for _, e := range sortedKeys(res) {
		for _, win := range res[e] {
			o := windowOut{Entity: e, Start: win.Start.UTC(), End: win.End.UTC(), Final: win.Final, Revision: win.Revision, Values: map[string]any{}}
			if info.Rollup {
				o.Rollup, o.Dimension = true, info.Dimension
			}
			for n, v := range win.Values {
				if len(v.Quantiles) > 0 {
					qs := map[string]float64{}
					for _, q := range v.Quantiles {
						qs[fmt.Sprint(q.Q)] = q.Value
					}
					o.Values[n] = qs
				} else if x := v.Number(); !math.IsNaN(x) {
					o.Values[n] = x
				} else {
					o.Values[n] = v.Bytes
				}
			}
			out = append(out, o)
		}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

func printTable(w io.Writer, info topology.SetInfo, res map[string][]query.Window) error {
	aggs := info.Aggregations
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%s\twindow start (UTC)\tfinal\t%s\t\n", keyColumn(info), strings.Join(aggs, "\t"))
	n := 0
	for _, e := range sortedKeys(res) {
		for _, win := range res[e] {
			n++
			final := "yes"
			if !win.Final {
				final = "no"
			}
			cols := make([]string, len(aggs))
			for i, a := range aggs {
				cols[i] = formatValue(win.Values[a])
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t\n", e, win.Start.UTC().Format("2006-01-02 15:04:05"), final, strings.Join(cols, "\t"))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if n == 0 {
		fmt.Fprintln(w, "(no windows)")
	}
	return nil
}

func formatValue(v totals.Value) string {
	if len(v.Quantiles) > 0 {
		var parts []string
		for _, q := range v.Quantiles {
			parts = append(parts, fmt.Sprintf("p%g=%.4g", q.Q*100, q.Value))
		}
		return strings.Join(parts, " ")
	}
	if v.Kind == 0 {
		return "-"
	}
	x := v.Number()
	if math.IsNaN(x) {
		return fmt.Sprintf("%d bytes", len(v.Bytes))
	}
	return fmt.Sprintf("%.6g", x)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// offsets shows a sink group's offsets and lag, follows the lag of a replay, or rewinds the group.
func offsetsUsage() string {
	s := strings.Join(sinkNames(), "|")
	return `Usage:
  abacus offsets show   -config FILE -sink ` + s + `    committed offset and lag per partition
  abacus offsets lag    -config FILE -sink ` + s + ` [-follow]   total lag (of a replay)
  abacus offsets rewind -config FILE -sink ` + s + ` -to-offset N | -to-time T

Offsets are read from where the sinks keep them (sinks.offsets: kafka or hbase). Stop the sink's
members before a rewind; on their next start they rewrite from there (identical cells).
`
}

// sinkNames is the sinks' names (-sink), in the roles table's order.
func sinkNames() []string {
	var out []string
	for _, r := range sinkRoles() {
		out = append(out, r.sink)
	}
	return out
}

// sinkNamed is the role of the sink called name (-sink), or nil.
func sinkNamed(name string) *role {
	for _, r := range sinkRoles() {
		if r.sink == name {
			return r
		}
	}
	return nil
}

func (p Program) offsets(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || isHelp(args[0]) {
		return groupHelp(args, stdout, offsetsUsage())
	}
	if !contains([]string{"show", "lag", "rewind"}, args[0]) {
		return usagef("unknown subcommand %q\n%s", args[0], offsetsUsage())
	}
	verb := args[0]
	fs := flag.NewFlagSet("offsets "+verb, flag.ContinueOnError)
	var c common
	c.register(fs)
	sink := fs.String("sink", "", strings.Join(sinkNames(), " or ")+" (required)")
	follow := fs.Bool("follow", false, "lag: print the lag every second until it reaches zero (progress of a replay)")
	toOffset := fs.Int64("to-offset", -1, "rewind: offset to rewind every partition to")
	toTime := fs.String("to-time", "", "rewind: time to rewind to (RFC 3339, ms, or relative like -2h)")
	if err := parse(fs, args[1:], stderr); err != nil {
		return err
	}
	sr := sinkNamed(*sink)
	if sr == nil {
		return usagef("-sink must be %s, got %q", strings.Join(sinkNames(), " or "), *sink)
	}
	if verb == "rewind" && (*toOffset < 0) == (*toTime == "") {
		return usagef("rewind needs exactly one of -to-offset and -to-time")
	}
	var at time.Time
	if *toTime != "" {
		var err error
		if at, err = parseTime(*toTime); err != nil {
			return usagef("-to-time: %v", err)
		}
	}
	if parsedOnly(ctx, fs, &c, nil) {
		return nil
	}
	// Offsets kept in Kafka need no HBase connection.
	d, err := p.connect(ctx, &c, stderr, offsetsNeeds)
	if err != nil {
		return err
	}
	defer d.shutdown()
	cfg, topo := d.cfg, d.topo
	group, topics := sr.groupIn(cfg), sr.inputs(cfg, topo)
	adm := sr.offsets(d, kadm.NewClient(d.kafka))
	switch verb {
	case "rewind":
		if *toTime != "" {
			err = adm.RewindToTime(ctx, group, topics, at)
		} else {
			err = adm.RewindTo(ctx, group, topics, *toOffset)
		}
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "group %s rewound; its sink rewrites from there on its next start\n", group)
		fallthrough
	case "show":
		lags, err := adm.Show(ctx, group, topics...)
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "topic\tpartition\tcommitted\tend\tlag\t")
		for _, l := range lags {
			committed := "-"
			if l.Committed >= 0 {
				committed = fmt.Sprint(l.Committed)
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%d\t\n", l.Topic, l.Partition, committed, l.End, l.Lag)
		}
		return tw.Flush()
	default: // lag
		for {
			lags, err := adm.Show(ctx, group, topics...)
			if err != nil {
				return err
			}
			var total int64
			for _, l := range lags {
				total += l.Lag
			}
			fmt.Fprintf(stdout, "%s group %s lag %d\n", time.Now().Format(time.TimeOnly), group, total)
			if !*follow || total == 0 {
				return nil
			}
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(time.Second):
			}
		}
	}
}

// offsetsNeeds is what the commands that read or move the sinks' offsets connect to: Kafka, and
// HBase when the offsets are kept there.
func offsetsNeeds(cfg *Config) needs { return needs{kafka: true, store: cfg.Sinks.Offsets == "hbase"} }

// sinkOffsetsAdmin reads and moves the sinks' committed offsets wherever the config keeps them.
func (d *deployment) sinkOffsetsAdmin(adm *kadm.Client) sinks.OffsetsAdmin {
	a := sinks.OffsetsAdmin{Kafka: adm}
	if d.cfg.Sinks.Offsets == "hbase" {
		a.HBase = sinks.NewHBaseOffsets(d.hb, d.cfg.Sinks.OffsetsTable)
	}
	return a
}
