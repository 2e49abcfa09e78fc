package app

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// retentionRiskShare is how much of a topic's retention the oldest unread record of a group may
// have used before abacus status warns: past it, the broker deletes the record soon unless the
// group catches up, and it is lost to the group (the processor and sinks then count it in
// records_deleted_unread_total, too late).
const retentionRiskShare = 0.8

// markAtRisk sets, for each partition of gs with lag, how many of its unread records are stamped
// further back than retentionRiskShare of its topic's retention.ms (topics that delete by time
// only). Record timestamps stand for the broker's clock here, as they do for retention itself.
func markAtRisk(ctx context.Context, adm *kadm.Client, gs *groupStatus, now time.Time) error {
	var topics []string
	seen := map[string]bool{}
	for _, p := range gs.Partitions {
		if p.Lag > 0 && !seen[p.Topic] {
			seen[p.Topic] = true
			topics = append(topics, p.Topic)
		}
	}
	if len(topics) == 0 {
		return nil
	}
	sort.Strings(topics)
	configs, err := adm.DescribeTopicConfigs(ctx, topics...)
	if err != nil {
		return fmt.Errorf("retention of %v: %w", topics, err)
	}
	retention := map[string]time.Duration{}
	for _, rc := range configs {
		if rc.Err != nil {
			return fmt.Errorf("retention of %s: %w", rc.Name, rc.Err)
		}
		var ms int64 = -1
		deletes := false
		for _, c := range rc.Configs {
			switch c.Key {
			case "retention.ms":
				if v, err := strconv.ParseInt(c.MaybeValue(), 10, 64); err == nil {
					ms = v
				}
			case "cleanup.policy":
				deletes = strings.Contains(c.MaybeValue(), "delete")
			}
		}
		if deletes && ms > 0 {
			retention[rc.Name] = time.Duration(ms) * time.Millisecond
		}
	}
	gs.AtRisk = 0
	for _, topic := range topics {
		r, ok := retention[topic]
		if !ok {
			continue
		}
		cutoff := now.Add(-time.Duration(float64(r) * retentionRiskShare))
		listed, err := adm.ListOffsetsAfterMilli(ctx, cutoff.UnixMilli(), topic)
		if err == nil {
			err = listed.Error()
		}
		if err != nil {
			return fmt.Errorf("offsets of %s after %s: %w", topic, cutoff.UTC().Format(time.RFC3339), err)
		}
		for i := range gs.Partitions {
			p := &gs.Partitions[i]
			if p.Topic != topic || p.Lag == 0 {
				continue
			}
			o, ok := listed.Lookup(topic, p.Partition)
			if !ok {
				continue
			}
			// The unread records start at the commit (or the log start, whichever is later).
			from := max(p.Committed, p.Start)
			if n := min(o.Offset, p.End) - from; n > 0 {
				p.AtRisk, p.Retention = n, r.String()
				gs.AtRisk += n
			}
		}
	}
	return nil
}
