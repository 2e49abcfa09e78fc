package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/abacus-stream/abacus/processors"
	"github.com/abacus-stream/abacus/schema"
	"github.com/abacus-stream/abacus/sinks"
	"github.com/abacus-stream/abacus/store"
	"github.com/abacus-stream/abacus/topology"
	"github.com/twmb/franz-go/pkg/kadm"
)

const adminUsage = `Usage:
  abacus admin create -config FILE [-partitions N]   create the topics and tables that are missing
  abacus admin verify -config FILE                   check that every topic and table is as the config says
  abacus admin reindex -config FILE                  rebuild the aggregates table's key index from its windows
  abacus admin drop -config FILE -confirm GROUP [-sources]   delete the deployment's groups, topics and tables

Topics: the topology's sources, totals, dead-letter and late topics, the processor group's loop
topic and table changelog, all with the sources' partition count (or -partitions for new sources)
and processor.replication. Tables: the sink tables, pre-split on their salt buckets, the
aggregates table's key index (<table>_keys: one row per set and key, which entity listings read),
and the offsets table when sinks.offsets is hbase.

admin drop deletes what admin create made and the groups' offsets: the consumer groups (none may
have live members), the topics the deployment writes (its sources too with -sources) and the sink
tables; with topics.prefix, which makes them the deployment's own, the offsets table and backfill's
checkpoints table too. -confirm must name the deployment's processor group, prefix included.

The key index is complete when admin create makes it beside an empty aggregates table. Beside one
that already holds windows (an upgrade), restart the aggregates sinks so that they write it, then
run admin reindex once: until then listings walk the aggregates table, a few reads per key.
`

// admin creates or verifies what a deployment needs: its topics and tables.
func (p Program) admin(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || isHelp(args[0]) {
		return groupHelp(args, stdout, adminUsage)
	}
	if args[0] == "drop" {
		return p.drop(ctx, args[1:], stdout, stderr)
	}
	if args[0] != "create" && args[0] != "verify" && args[0] != "reindex" {
		return usagef("unknown subcommand %q\n%s", args[0], adminUsage)
	}
	verb := args[0]
	fs := flag.NewFlagSet("admin "+verb, flag.ContinueOnError)
	var c common
	c.register(fs, "listen")
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
	// outcome is what a step did, when it can tell: "created", or "exists" for what admin create
	// found already there, as configured.
	var outcome string
	step := func(what string, f func() error) error {
		t0 := time.Now()
		outcome = "ok"
		fmt.Fprintf(stdout, "%s ... ", what)
		if err := f(); err != nil {
			fmt.Fprintln(stdout, "failed")
			return fmt.Errorf("%s: %w", what, err)
		}
		fmt.Fprintf(stdout, "%s (%s)\n", outcome, time.Since(t0).Round(time.Millisecond))
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
				existed, err := topicExists(ctx, adm, t.Name)
				if err != nil {
					return err
				}
				if err := d.ensureTopics(ctx, []processors.TopicSpec{t}); err != nil {
					return err
				}
				outcome = map[bool]string{true: "exists", false: "created"}[existed]
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
			l := d.layout(t)
			err := d.st.VerifyTable(ctx, l)
			if verb == "create" && errors.Is(err, store.ErrNoSuchTable) {
				outcome = "created"
				return d.st.EnsureTable(ctx, l)
			}
			if err != nil {
				return err
			}
			if verb == "create" {
				outcome = "exists"
			}
			// Settings that differ from the config do not stop the sinks, but verify says so.
			settings, err := d.st.FamilySettings(ctx, l.Name, l.Family)
			if err != nil {
				return err
			}
			if drift := l.Drift(settings); len(drift) > 0 && verb == "verify" {
				return errors.New(strings.Join(drift, "; "))
			} else if len(drift) > 0 {
				outcome = "exists, differing from the config: " + strings.Join(drift, "; ")
			}
			return nil
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

// describeSet says what a set's rows are keyed by ("by entity", "rollup by region", "global rollup
// (key all)") and, for a coarser set, which set it is a form of ("by entity, coarser form of
// minute").
func describeSet(s topology.SetInfo) string {
	d := "rollup by " + s.Dimension
	switch {
	case !s.Rollup:
		d = "by " + s.Dimension
	case s.Dimension == "":
		d = "global rollup (key " + topology.GlobalKey + ")"
	}
	if s.Coarsens != "" {
		d += ", coarser form of " + s.Coarsens
	}
	return d
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
