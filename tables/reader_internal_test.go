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
