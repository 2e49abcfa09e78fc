package app

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/abacus-stream/abacus/internal/testenv"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestStatusMarksUnreadRecordsNearRetention: of a group's unread records, those stamped further
// back than 80% of their topic's retention.ms are counted per partition (the broker deletes them
// soon); records of a topic that keeps everything, and recent ones, are not. On kfake and the
// real broker.
func TestStatusMarksUnreadRecordsNearRetention(t *testing.T) {
	fake, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer fake.Close()
	for _, c := range []struct {
		name    string
		brokers func(t *testing.T) []string
	}{{"kfake", func(*testing.T) []string { return fake.ListenAddrs() }}, {"kafka", func(t *testing.T) []string { return testenv.Kafka(t) }}} {
		t.Run(c.name, func(t *testing.T) {
			brokers := c.brokers(t) // the subtest's t: a skip for want of a broker is the subtest's
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			adm := kadm.NewClient(cl)
			hour, forever := fmt.Sprintf("risk-hour-%d", time.Now().UnixNano()), fmt.Sprintf("risk-forever-%d", time.Now().UnixNano())
			for topic, ms := range map[string]string{hour: "3600000", forever: "-1"} {
				resp, err := adm.CreateTopics(ctx, 2, 1, map[string]*string{"retention.ms": &ms}, topic)
				if err == nil {
					_, err = resp.On(topic, nil)
				}
				if err != nil {
					t.Fatalf("create %s: %v", topic, err)
				}
			}
			now := time.Now()
			var recs []*kgo.Record
			for _, topic := range []string{hour, forever} {
				for i := range 3 { // partition 0: three old records, then two recent ones
					recs = append(recs, &kgo.Record{Topic: topic, Partition: 0, Value: []byte("old"), Timestamp: now.Add(-55*time.Minute + time.Duration(i)*time.Second)})
				}
				for p := range int32(2) {
					for range 2 {
						recs = append(recs, &kgo.Record{Topic: topic, Partition: p, Value: []byte("new"), Timestamp: now.Add(-time.Minute)})
					}
				}
			}
			pcl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
			if err != nil {
				t.Fatal(err)
			}
			defer pcl.Close()
			if err := pcl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
				t.Fatal(err)
			}
			gs := groupStatus{Group: "g", Partitions: []partitionStatus{
				{Topic: hour, Partition: 0, Committed: -1, End: 5, Lag: 5},
				{Topic: hour, Partition: 1, Committed: -1, End: 2, Lag: 2},
				{Topic: forever, Partition: 0, Committed: -1, End: 5, Lag: 5},
				{Topic: forever, Partition: 1, Committed: -1, End: 2, Lag: 2},
			}}
			if err := markAtRisk(ctx, adm, &gs, now); err != nil {
				t.Fatal(err)
			}
			want := []int64{3, 0, 0, 0}
			for i, p := range gs.Partitions {
				if p.AtRisk != want[i] {
					t.Errorf("%s/%d: %d at risk, want %d", p.Topic, p.Partition, p.AtRisk, want[i])
				}
			}
			if gs.AtRisk != 3 || gs.Partitions[0].Retention != "1h0m0s" {
				t.Errorf("group: %d at risk (want 3), retention %q", gs.AtRisk, gs.Partitions[0].Retention)
			}
			// Read past the old records: nothing left at risk.
			gs.Partitions[0].Committed, gs.Partitions[0].Lag = 3, 2
			if err := markAtRisk(ctx, adm, &gs, now); err != nil {
				t.Fatal(err)
			}
			if gs.AtRisk != 0 {
				t.Errorf("%d at risk after the group read the old records", gs.AtRisk)
			}
		})
	}
}
