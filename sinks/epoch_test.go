package sinks

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/abacus-stream/abacus/schema"
	"github.com/abacus-stream/abacus/store"
	"github.com/abacus-stream/abacus/totals"
)

// TestEpochsMoveAfterSettledWindowsLand: a batch that writes a window of the past (started
// before schema.SettledAfter) writes its set's epoch cell after its own cells landed, retrying
// it, before the batch counts as written; a set whose windows are all recent moves no epoch; a
// refused epoch write fails the batch rather than leave readers' caches behind.
func TestEpochsMoveAfterSettledWindowsLand(t *testing.T) {
	fake, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation(), kfake.DefaultNumPartitions(1))
	if err != nil {
		t.Fatal(err)
	}
	defer fake.Close()
	createTopics(t, fake.ListenAddrs(), 1, "in", "dlq")
	now := time.Now()
	rec := func(off int64, set string, start time.Time) *kgo.Record {
		r := totals.Record{Topology: "t", Set: set, Entity: "dev-1", Start: start.UnixMilli(), End: start.UnixMilli() + 60_000, Final: true, Revision: 1,
			Values: []totals.Value{{Name: "count", Kind: totals.KindInt, Int: 1}}}
		return &kgo.Record{Topic: "in", Partition: 0, Offset: off, Value: r.Encode(), Timestamp: now}
	}
	run := func(script []map[string]bool) (*scriptedStore, error) {
		st := &scriptedStore{script: script}
		enc := &AggregatesEncoder{Table: "agg", Family: "d", SaltBuckets: 4, KeyIndex: "agg_keys"}
		s, err := NewFlushThenCommit(Config{Brokers: fake.ListenAddrs(), Group: "g", Topics: []string{"in"}, DeadLetterTopic: "dlq",
			RetryBackoff: time.Millisecond, Logger: slog.New(slog.DiscardHandler)}, enc, st)
		if err != nil {
			t.Fatal(err)
		}
		defer s.cl.Close()
		s.add(rec(0, "minute", now.Add(-schema.SettledAfter-time.Minute)))
		s.add(rec(1, "recent", now.Add(-schema.SettledAfter+time.Minute)))
		s.add(rec(2, "hour", now.Add(-3*time.Hour)))
		s.add(rec(3, "minute", now.Add(-2*time.Hour)))
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return st, s.write(ctx, s.take())
	}

	// The second write (the epochs) fails retriably for one set: both are written again.
	st, err := run([]map[string]bool{{}, {"minute": false}})
	if err != nil {
		t.Fatal(err)
	}
	if len(st.writes) != 3 || slices.Contains(st.writes[0], "minute") {
		t.Fatalf("writes %v: want the batch's cells, then the epochs twice", st.writes)
	}
	for _, w := range st.writes[1:] {
		if got := strings.Join(slices.Sorted(slices.Values(w)), ","); got != "hour,minute" {
			t.Fatalf("epoch write %v, want the epochs of hour and minute only (writes %v)", got, st.writes)
		}
	}
	// Refused for good: the batch fails, so nothing of it is committed.
	if _, err := run([]map[string]bool{{}, {"hour": true}}); err == nil || !strings.Contains(err.Error(), "epochs") {
		t.Fatalf("a refused epoch write: %v, want the batch to fail", err)
	}
}

// TestEpochCells: the cells are in the key index table's epoch row, one per set with a settled
// window, each with a value never written before; an encoder without a key index writes none.
func TestEpochCells(t *testing.T) {
	now := time.Now()
	enc := &AggregatesEncoder{Table: "agg", Family: "d", SaltBuckets: 4, KeyIndex: "agg_keys"}
	var cells []store.Cell
	for i, set := range []string{"a", "b", "a", "c"} {
		start := now.Add(-schema.SettledAfter - time.Duration(i)*time.Minute)
		if set == "c" {
			start = now.Add(-time.Minute)
		}
		r := totals.Record{Topology: "t", Set: set, Entity: fmt.Sprint("e", i), Start: start.UnixMilli(), End: start.UnixMilli() + 1, Final: true,
			Values: []totals.Value{{Name: "count", Kind: totals.KindInt, Int: 1}}}
		var err error
		if cells, err = enc.Encode(&kgo.Record{Value: r.Encode()}, cells); err != nil {
			t.Fatal(err)
		}
	}
	got := enc.EpochCells(cells, now)
	var sets []string
	values := map[string]bool{}
	for _, c := range got {
		if c.Table != "agg_keys" || string(c.Row) != string(schema.EpochRow) || string(c.Family) != "d" || c.Timestamp != schema.EpochTimestamp {
			t.Fatalf("epoch cell %+v", c)
		}
		sets = append(sets, string(c.Qualifier))
		values[string(c.Value)] = true
	}
	if slices.Sort(sets); fmt.Sprint(sets) != "[a b]" || len(values) != 2 {
		t.Fatalf("epochs of %v with %d distinct values, want a and b, each its own", sets, len(values))
	}
	again := enc.EpochCells(cells, now)
	if len(again) != 2 || values[string(again[0].Value)] {
		t.Fatalf("a second move wrote a value already written: %+v", again)
	}
	if got := (&AggregatesEncoder{Table: "agg", Family: "d", SaltBuckets: 4}).EpochCells(cells, now); got != nil {
		t.Fatalf("an encoder without a key index moved epochs: %+v", got)
	}
}
