package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/abacus-stream/abacus/hbase"
	"github.com/abacus-stream/abacus/processors"
	"github.com/abacus-stream/abacus/schema"
)

// drop removes a deployment: its consumer groups, the topics it writes and its tables. It asks
// for the deployment's name (its processor group, prefix included) as -confirm, so that a config
// pointed at the wrong environment deletes nothing.
func (p Program) drop(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("admin drop", flag.ContinueOnError)
	var c common
	c.register(fs, "listen")
	confirm := fs.String("confirm", "", "the deployment's processor group (prefix included), to confirm what is deleted (required)")
	sources := fs.Bool("sources", false, "delete the source and table topics too (by default they are kept: they hold the input)")
	if err := parse(fs, args, stderr); err != nil {
		return err
	}
	if *confirm == "" {
		return usagef("-confirm is required: pass the deployment's processor group, as admin verify shows it, to delete its groups, topics and tables")
	}
	if parsedOnly(ctx, fs, &c, nil) {
		return nil
	}
	d, err := p.connect(ctx, &c, stderr, func(*Config) needs { return needs{kafka: true, store: true} })
	if err != nil {
		return err
	}
	defer d.shutdown()
	cfg := d.cfg
	if *confirm != cfg.Processor.Group {
		return fmt.Errorf("-confirm %q is not this deployment's processor group %q: nothing deleted", *confirm, cfg.Processor.Group)
	}
	if d.hb == nil {
		return fmt.Errorf("the embedded store keeps its tables in %s: stop the demo and delete that folder", cfg.HBase.Embedded)
	}
	adm := kadm.NewClient(d.kafka)
	step := func(what string, f func() (string, error)) error {
		fmt.Fprintf(stdout, "%s ... ", what)
		outcome, err := f()
		if err != nil {
			fmt.Fprintln(stdout, "failed")
			return fmt.Errorf("%s: %w", what, err)
		}
		fmt.Fprintln(stdout, outcome)
		return nil
	}

	// Groups first: one with live members means the deployment still runs, and then nothing
	// else is touched.
	var groups []string
	for _, r := range roles {
		if g := r.groupIn(cfg); g != "" && r.group != nil {
			groups = append(groups, g)
		}
	}
	for _, g := range groups {
		if err := step("group "+g, func() (string, error) { return deleteGroup(ctx, adm, g) }); err != nil {
			return err
		}
	}
	var failed []error
	specs, err := d.topicSpecs(ctx, 1)
	if err != nil {
		return err
	}
	for _, t := range specs {
		if (t.Role == processors.RoleSource || t.Role == processors.RoleLookup) && !*sources {
			fmt.Fprintf(stdout, "%s topic %s ... kept (-sources deletes it)\n", t.Role, t.Name)
			continue
		}
		if err := step(fmt.Sprintf("%s topic %s", t.Role, t.Name), func() (string, error) { return deleteTopic(ctx, adm, t.Name) }); err != nil {
			failed = append(failed, err)
		}
	}
	var tables []string
	for _, r := range sinkRoles() {
		t := r.table(cfg).Table
		tables = append(tables, t)
		if r.holdsAggregates {
			tables = append(tables, schema.KeyIndexTable(t))
		}
	}
	if cfg.Topics.Prefix != "" && cfg.Sinks.Offsets == "hbase" {
		tables = append(tables, cfg.Sinks.OffsetsTable) // the prefix makes it this deployment's own
	}
	if cfg.Topics.Prefix != "" {
		tables = append(tables, cfg.Sinks.BackfillTable) // backfill's checkpoints, if it ran
	}
	for _, t := range tables {
		if err := step("table "+t, func() (string, error) { return d.dropTable(ctx, t) }); err != nil {
			failed = append(failed, err)
		}
	}
	if len(failed) == 0 {
		fmt.Fprintf(stdout, "deployment %s dropped", cfg.Processor.Group)
		if cfg.Processor.StoragePath != "" {
			// A processor started again under the name would restore from it, not the changelog.
			fmt.Fprintf(stdout, "; each processor host still has its local state in %s: delete it before the name is used again", cfg.Processor.StoragePath)
		}
		fmt.Fprintln(stdout)
	}
	return errors.Join(failed...)
}

// deleteGroup deletes a consumer group and says what became of it; a group with members is an
// error that says to stop them.
func deleteGroup(ctx context.Context, adm *kadm.Client, group string) (string, error) {
	// A broker whose offsets topic is new, or whose coordinator moves, answers that the
	// coordinator is not available for a while: that passes, and says nothing of the group.
	var (
		resp kadm.DeleteGroupResponses
		err  error
	)
	for deadline := time.Now().Add(30 * time.Second); ; {
		resp, err = adm.DeleteGroups(ctx, group)
		if err == nil {
			err = resp[group].Err
		}
		if !errors.Is(err, kerr.CoordinatorNotAvailable) && !errors.Is(err, kerr.CoordinatorLoadInProgress) && !errors.Is(err, kerr.NotCoordinator) ||
			time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	r, ok := resp[group]
	if !ok {
		if err == nil {
			err = errors.New("the broker did not answer for the group")
		}
		return "", err
	}
	switch {
	case r.Err == nil:
		return "deleted", nil
	case errors.Is(r.Err, kerr.GroupIDNotFound):
		return "absent", nil
	case errors.Is(r.Err, kerr.NonEmptyGroup):
		return "", fmt.Errorf("it has live members: stop every process of the deployment first (nothing was deleted after this)")
	}
	return "", r.Err
}

// deleteTopic deletes a topic and says what became of it.
func deleteTopic(ctx context.Context, adm *kadm.Client, topic string) (string, error) {
	resp, err := adm.DeleteTopics(ctx, topic)
	if err != nil {
		return "", err
	}
	r, ok := resp[topic]
	switch {
	case !ok || errors.Is(r.Err, kerr.UnknownTopicOrPartition):
		return "absent", nil
	case r.Err != nil:
		return "", r.Err
	}
	return "deleted", nil
}

// dropTable disables and deletes an HBase table and says what became of it.
func (d *deployment) dropTable(ctx context.Context, table string) (string, error) {
	a := d.hb.Admin()
	if _, err := a.DescribeTable(ctx, table); err != nil {
		if hbase.IsTableNotFound(err) {
			return "absent", nil
		}
		return "", err
	}
	if err := a.DisableTable(ctx, table); err != nil && !strings.Contains(err.Error(), "TableNotEnabled") {
		return "", err
	}
	if err := a.DeleteTable(ctx, table); err != nil {
		return "", err
	}
	return "deleted", nil
}
