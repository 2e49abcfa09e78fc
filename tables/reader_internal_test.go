package tables

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/abacus-stream/abacus/internal/kafkaread"
	"github.com/abacus-stream/abacus/internal/plan"
)

// TestVersionsFollowTheirTablePartition: the versions read from partition p of the table's topic
// go to partition p mod n of the versions topic, so that one producer writes each table
// partition's versions in the order they were read, and a reader that resumes after the last one
// it finds skips none (readVersions).
func TestVersionsFollowTheirTablePartition(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	def := &plan.Table{Name: "t", Topic: "reg", Decode: func(b []byte) (any, error) { return string(b), nil }, Grace: time.Second, History: time.Hour}
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(ctx, 5, 1, nil, "reg"); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.CreateTopic(ctx, 3, 1, nil, plan.VersionsTopic("g", "t")); err != nil {
		t.Fatal(err)
	}
	for i := range 40 {
		rec := &kgo.Record{Topic: "reg", Partition: int32(i % 5), Key: []byte{'k', byte('a' + i%26)}, Value: []byte("v"), Timestamp: time.UnixMilli(int64(i))}
		if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	r, err := Open(ctx, def, Config{Group: "g", Client: []kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}})
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	n := 0
	err = kafkaread.All(ctx, c.ListenAddrs(), plan.VersionsTopic("g", "t"), func(rec *kgo.Record) {
		s, err := decodeSaved(rec.Value)
		if err != nil {
			t.Fatal(err)
		}
		if rec.Partition != s.partition%3 {
			t.Errorf("a version of table partition %d is in versions partition %d, want %d", s.partition, rec.Partition, s.partition%3)
		}
		n++
	})
	if err != nil {
		t.Fatal(err)
	}
	if n != 40 {
		t.Fatalf("%d versions saved, want 40", n)
	}
}

// TestAListingWithinTheStampsMillisecondIsNotFresh: Kafka stamps a record to the millisecond,
// rounded down, so a table version written within that millisecond, before the event's record,
// may be missing from end offsets listed at the stamp itself: such a listing does not make the
// table answer for the event; one asked after the millisecond does. A stamp of the future (a fast
// producer clock) waits for a listing asked from the time the wait began, not from the stamp.
func TestAListingWithinTheStampsMillisecondIsNotFresh(t *testing.T) {
	stamp := time.UnixMilli(1_780_000_000_123) // as Kafka gives it: whole milliseconds
	r := &Reader{changed: make(chan struct{}), parts: []*partition{{next: 7, hwm: 7}}}
	now := stamp.Add(5 * time.Second)
	cases := []struct {
		observed time.Time
		fresh    bool
	}{
		{stamp.Add(-time.Millisecond), false},
		{stamp, false},
		{stamp.Add(999 * time.Microsecond), false}, // within the millisecond: the version may follow it
		{stamp.Add(time.Millisecond), true},
		{stamp.Add(time.Second), true},
	}
	for _, c := range cases {
		r.observed = c.observed
		if got, _ := r.ready(1_000, written(stamp, now)); got != c.fresh {
			t.Errorf("listing asked %v after the stamp: ready %v, want %v", c.observed.Sub(stamp), got, c.fresh)
		}
	}
	// A version newer than the event answers whatever the listing (a later one cannot be older).
	r.observed = stamp
	r.parts[0] = &partition{next: 7, hwm: 9, newest: 2_000, applied: true}
	if ok, _ := r.ready(1_000, written(stamp, now)); !ok {
		t.Error("a partition holding a version after the event time should answer for it")
	}
	if ok, _ := r.ready(2_001, written(stamp, now)); ok {
		t.Error("a partition behind its listed end, with nothing after the event time, answered")
	}
	if got := written(stamp, stamp.Add(300*time.Microsecond)); !got.Equal(stamp.Add(300 * time.Microsecond)) {
		t.Errorf("written within the stamp's millisecond = %v, want the wait's start", got)
	}
	if future := stamp.Add(time.Minute); !written(future, now).Equal(now) {
		t.Errorf("written of a future stamp = %v, want the wait's start %v", written(future, now), now)
	}
}
