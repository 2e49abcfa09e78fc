package app

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/abacus-stream/abacus/keyindex"
	"github.com/abacus-stream/abacus/schema"
)

// ensureKeyIndex creates the key index table of the aggregates table t when it is missing, and
// marks the index complete when the aggregates table holds nothing yet (every key will then be
// indexed by the sinks as they write it). It says what state the index is in.
func (d *deployment) ensureKeyIndex(ctx context.Context, t SinkTable) (string, error) {
	agg := d.layout(t)
	l := schema.KeyIndexLayout(agg)
	if err := d.st.EnsureTable(ctx, l); err != nil {
		return "", err
	}
	return d.keyIndexState(ctx, t, true)
}

// keyIndexState says whether the key index of t is complete; with mark, it marks an index beside
// an empty aggregates table complete.
func (d *deployment) keyIndexState(ctx context.Context, t SinkTable, mark bool) (string, error) {
	v, err := keyindex.Version(ctx, d.st, t.Table, t.Family)
	if err != nil {
		return "", err
	}
	switch {
	case v >= schema.KeyIndexVersion:
		return "complete", nil
	case v >= 1:
		return fmt.Sprintf("complete for each set's keys (version %d, made before its rows of every set's keys): tag value suggestions list set by set until `abacus admin reindex` has run", v), nil
	}
	empty, err := keyindex.Empty(ctx, d.st, t.Table)
	if err != nil {
		return "", err
	}
	if !empty {
		return fmt.Sprintf("incomplete: %s holds windows written before it; listings walk %s until `abacus admin reindex` has run", schema.KeyIndexTable(t.Table), t.Table), nil
	}
	if !mark {
		return "not marked complete yet (the aggregates table is empty: `abacus admin create` marks it)", nil
	}
	if err := keyindex.MarkComplete(ctx, d.st, d.layout(t)); err != nil {
		return "", err
	}
	return "complete (the aggregates table is empty)", nil
}

// reindex rebuilds the key index of the aggregates table from its windows and marks it complete.
func (d *deployment) reindex(ctx context.Context, stdout io.Writer, step func(string, func() error) error) error {
	t := d.cfg.Sinks.Aggregates
	if t.Disabled {
		return fmt.Errorf("admin reindex: the aggregates table is disabled in the config")
	}
	agg := d.layout(t)
	if err := step("key index "+schema.KeyIndexTable(t.Table), func() error { return d.st.EnsureTable(ctx, schema.KeyIndexLayout(agg)) }); err != nil {
		return err
	}
	buckets, err := d.st.SaltBuckets(ctx, t.Table)
	if err != nil {
		return fmt.Errorf("admin reindex: %w", err)
	}
	var stats keyindex.Stats
	last := time.Now()
	err = step(fmt.Sprintf("rebuild from %s (%d salt buckets)", t.Table, buckets), func() error {
		var err error
		stats, err = keyindex.Rebuild(ctx, d.st, agg, buckets, func(s keyindex.Stats) {
			if time.Since(last) >= 10*time.Second {
				last = time.Now()
				fmt.Fprintf(stdout, "\n  %d keys indexed, %d reads ... ", s.Keys, s.Reads)
			}
		})
		return err
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "  key index: complete, %d set and key pairs from %d reads\n", stats.Keys, stats.Reads)
	return nil
}
