package sinks

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/abacus-stream/abacus/deadletter"
	"github.com/abacus-stream/abacus/store"
)

// scriptedStore fails, on its nth write, the cells whose qualifiers the script names for that
// write: retriably or for good. It records the qualifiers of every write.
type scriptedStore struct {
	mu     sync.Mutex
	writes [][]string
	script []map[string]bool // per write: qualifier -> permanent
}

func (s *scriptedStore) Write(_ context.Context, cells []store.Cell) ([]store.CellError, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(s.writes)
	var qs []string
	var failed []store.CellError
	for i, c := range cells {
		qs = append(qs, string(c.Qualifier))
		if n < len(s.script) {
			if permanent, ok := s.script[n][string(c.Qualifier)]; ok {
				failed = append(failed, store.CellError{Index: i, Err: fmt.Errorf("scripted failure of %s", c.Qualifier), Permanent: permanent})
			}
		}
	}
	s.writes = append(s.writes, qs)
	return failed, nil
}

// TestWriteResendsAndSetsAsideTheRightCells: a batch's first write goes out as it is; the cells
// refused retriably are written again, and only they; every cell refused for good, in the first
// write or in a resend, dead-letters its own source record, once. (A resend's failures are
// indexes into the resend, not into the batch.)
func TestWriteResendsAndSetsAsideTheRightCells(t *testing.T) {
	fake, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation(), kfake.DefaultNumPartitions(1))
	if err != nil {
		t.Fatal(err)
	}
	defer fake.Close()
	createTopics(t, fake.ListenAddrs(), 1, "in", "dlq")
	st := &scriptedStore{script: []map[string]bool{
		{"q2": false, "q3": true, "q5": false, "q7": false, "q8": true},
		{"q2": false, "q5": false, "q7": true}, // second write: q2, q5, q7; q7 now refused for good
		{"q5": false},                          // third: q2, q5 (q2 lands); fourth: q5
	}}
	enc := EncoderFunc(func(rec *kgo.Record, dst []store.Cell) ([]store.Cell, error) {
		return append(dst, store.Cell{Table: "t", Row: rec.Key, Family: []byte("d"), Qualifier: rec.Value, Timestamp: rec.Offset + 1, Value: rec.Value}), nil
	})
	s, err := NewFlushThenCommit(Config{Brokers: fake.ListenAddrs(), Group: "g", Topics: []string{"in"}, DeadLetterTopic: "dlq",
		RetryBackoff: time.Millisecond, Logger: slog.New(slog.DiscardHandler)}, enc, st)
	if err != nil {
		t.Fatal(err)
	}
	defer s.cl.Close()
	began := time.Now().Truncate(time.Millisecond)
	for i := range 10 {
		s.add(&kgo.Record{Topic: "in", Partition: 0, Offset: int64(i), Key: fmt.Appendf(nil, "r%d", i), Value: fmt.Appendf(nil, "q%d", i),
			Timestamp: time.UnixMilli(int64(1000 + i))})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.write(ctx, s.take()); err != nil {
		t.Fatal(err)
	}
	want := [][]string{{"q0", "q1", "q2", "q3", "q4", "q5", "q6", "q7", "q8", "q9"}, {"q2", "q5", "q7"}, {"q2", "q5"}, {"q5"}}
	if fmt.Sprint(st.writes) != fmt.Sprint(want) {
		t.Fatalf("writes %v, want %v", st.writes, want)
	}

	cl, err := kgo.NewClient(kgo.SeedBrokers(fake.ListenAddrs()...), kgo.ConsumeTopics("dlq"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var offsets []int64
	for len(offsets) < 3 {
		f := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("dead letters: %v so far, want 3: %v", offsets, ctx.Err())
		}
		f.EachRecord(func(r *kgo.Record) {
			var hs []deadletter.Header
			for _, h := range r.Headers {
				hs = append(hs, deadletter.Header{Key: h.Key, Value: h.Value})
			}
			d, err := deadletter.Parse(r.Value, hs)
			if err != nil {
				t.Fatal(err)
			}
			if d.Reason != deadletter.Rejected || string(d.Value) != fmt.Sprintf("q%d", d.Source.Offset) {
				t.Errorf("dead letter %+v", d)
			}
			// It names its record's timestamp, and is stamped with the time it was written (the
			// topic's retention counts from there).
			if !d.Timestamp.Equal(time.UnixMilli(1000+d.Source.Offset)) || r.Timestamp.Before(began) {
				t.Errorf("dead letter of offset %d names time %v and was written at %v, want %v and after %v",
					d.Source.Offset, d.Timestamp, r.Timestamp, time.UnixMilli(1000+d.Source.Offset), began)
			}
			offsets = append(offsets, d.Source.Offset)
		})
	}
	slices.Sort(offsets)
	if !slices.Equal(offsets, []int64{3, 7, 8}) {
		t.Fatalf("dead-lettered offsets %v, want 3, 7 and 8", offsets)
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatal("timed out")
	}
}
