package app

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/abacus-stream/abacus/query"
	"github.com/abacus-stream/abacus/topology"
	"github.com/abacus-stream/abacus/totals"
)

// query prints the windows of entities of an aggregate set.
func (p Program) query(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("query", flag.ContinueOnError)
	var c common
	c.register(fs, "listen", "kafka") // it reads the aggregate table only
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
	cfg, topo, err := p.load(&c, stderr)
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
	log, err := logger(cfg.Log, stderr)
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
