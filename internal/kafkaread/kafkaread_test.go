package kafkaread

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestAllEndSumGroupLag(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "t", "empty"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	brokers := c.ListenAddrs()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic("t"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	const n = 300
	for i := range n {
		r := &kgo.Record{Partition: int32(i % 3), Value: fmt.Appendf(nil, "%d", i)}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}

	next := map[int32]int64{}
	read := 0
	if err := All(ctx, brokers, "t", func(r *kgo.Record) {
		if r.Offset != next[r.Partition] {
			t.Fatalf("partition %d: offset %d after %d", r.Partition, r.Offset, next[r.Partition]-1)
		}
		next[r.Partition]++
		read++
	}); err != nil {
		t.Fatal(err)
	}
	if read != n {
		t.Fatalf("All read %d records, want %d", read, n)
	}
	if err := All(ctx, brokers, "empty", func(*kgo.Record) { t.Fatal("a record of an empty topic") }); err != nil {
		t.Fatalf("All of an empty topic: %v", err)
	}
	if _, err := EndSum(ctx, adm, "missing"); err == nil {
		t.Fatal("EndSum of a missing topic: no error")
	}

	if got, err := EndSum(ctx, adm, "t"); err != nil || got != n {
		t.Fatalf("EndSum = %d, %v; want %d", got, err, n)
	}
	if lag, err := GroupLag(ctx, adm, "g", "t"); err != nil || lag != n {
		t.Fatalf("GroupLag before any commit = %d, %v; want %d", lag, err, n)
	}
	offs := kadm.Offsets{}
	offs.AddOffset("t", 0, 100, -1) // all of partition 0
	offs.AddOffset("t", 1, 40, -1)
	if _, err := adm.CommitOffsets(ctx, "g", offs); err != nil {
		t.Fatal(err)
	}
	if lag, err := GroupLag(ctx, adm, "g", "t"); err != nil || lag != n-140 {
		t.Fatalf("GroupLag = %d, %v; want %d", lag, err, n-140)
	}
}
