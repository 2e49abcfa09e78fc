package testenv_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/abacus-stream/abacus/hbase"
	"github.com/abacus-stream/abacus/internal/testenv"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

func uniqueName(prefix string) string {
	return fmt.Sprintf("%s-%d", prefix, time.Now().UnixNano())
}

// TestKafkaProduceConsume proves the broker is a real one: records written with franz-go come back,
// in order, with their keys and values.
func TestKafkaProduceConsume(t *testing.T) {
	brokers := testenv.Kafka(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	topic := uniqueName("smoke")
	adm, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	if _, err := kadm.NewClient(adm).CreateTopic(ctx, 1, 1, nil, topic); err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}

	prod, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	const n = 100
	for i := range n {
		rec := &kgo.Record{Key: fmt.Appendf(nil, "k%d", i), Value: fmt.Appendf(nil, "v%d", i)}
		if err := prod.ProduceSync(ctx, rec).FirstErr(); err != nil {
			t.Fatalf("produce %d: %v", i, err)
		}
	}

	cons, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	got := 0
	for got < n {
		fs := cons.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("consumed %d of %d records: %v", got, n, err)
		}
		fs.EachError(func(topic string, p int32, err error) { t.Fatalf("fetch %s/%d: %v", topic, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			if want := fmt.Sprintf("k%d", got); string(r.Key) != want || string(r.Value) != fmt.Sprintf("v%d", got) {
				t.Fatalf("record %d: key %q value %q, want key %q", got, r.Key, r.Value, want)
			}
			got++
		})
	}
}

// TestKafkaCompactedTopicConfig creates a compacted topic, as goka's group tables need, and reads the
// broker's view of its configuration back.
func TestKafkaCompactedTopicConfig(t *testing.T) {
	brokers := testenv.Kafka(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	topic := uniqueName("smoke-compacted")
	compact := "compact"
	if _, err := adm.CreateTopic(ctx, 3, 1, map[string]*string{"cleanup.policy": &compact}, topic); err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
	if got := testenv.TopicConfig(ctx, t, adm, topic, "cleanup.policy"); got != "compact" {
		t.Fatalf("cleanup.policy = %q, want compact", got)
	}
	tds, err := adm.ListTopics(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	if got := len(tds[topic].Partitions); got != 3 {
		t.Fatalf("topic %s has %d partitions, want 3", topic, got)
	}
}

// TestHBaseMetaRegionServer finds hbase:meta through ZooKeeper and reads it with a real scan through
// the native client (with Kerberos when ABACUS_HBASE_AUTH=kerberos: testenv/run-tests.sh runs it
// against the Kerberized HBase too).
func TestHBaseMetaRegionServer(t *testing.T) {
	cfg := testenv.HBaseConfig(t)
	quorum := cfg.ZooKeeper
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	loc := hbase.ZooKeeperLocator{Quorum: quorum}
	sn, state, err := loc.MetaRegionServer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if state != hbase.RegionStateOpen {
		t.Fatalf("hbase:meta on %s in state %d, want open", sn, state)
	}
	if sn.Port == 0 || sn.StartCode == 0 {
		t.Fatalf("implausible meta server %+v", sn)
	}
	master, err := loc.Master(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if master.Port == 0 {
		t.Fatalf("implausible master %+v", master)
	}
	cl, err := hbase.NewClient(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	sc := cl.Scan(hbase.Scan{Table: "hbase:meta", Caching: 10})
	defer sc.Close()
	rows := 0
	for {
		r, err := sc.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("scan hbase:meta on %s: %v", sn, err)
		}
		if len(r.Cells) == 0 {
			t.Fatal("empty row from hbase:meta")
		}
		rows++
	}
	// Every HBase 2.6 has at least the hbase:namespace region registered in hbase:meta.
	if rows == 0 {
		t.Fatal("hbase:meta scan returned no rows")
	}
}
