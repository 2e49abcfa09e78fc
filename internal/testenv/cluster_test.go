package testenv_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/abacus-stream/abacus/internal/testenv"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ack is where an acknowledged record landed.
type ack struct {
	partition int32
	offset    int64
}

// TestClusterLeaderKilledMidStream proves the test cluster is a real replicated one and that the
// helpers can crash it: three brokers answer; a topic created with replication 3 has all three in
// sync; an acks=all producer keeps being acknowledged while the leader of its partition is
// SIGKILLed (a follower takes over, min.insync.replicas=2 is met by the two left) and after the
// broker is started again and back in sync; and every acknowledged record is in the log, at the
// offset it was acknowledged at, exactly once.
func TestClusterLeaderKilledMidStream(t *testing.T) {
	c := testenv.KafkaCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	// Three brokers answer, each on its own address.
	for i, addr := range c.Brokers {
		cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
		if err != nil {
			t.Fatal(err)
		}
		req := kmsg.NewPtrMetadataRequest()
		req.Topics = []kmsg.MetadataRequestTopic{}
		resp, err := cl.SeedBrokers()[0].Request(ctx, req)
		cl.Close()
		if err != nil {
			t.Fatalf("broker %d at %s: %v", i+1, addr, err)
		}
		if n := len(resp.(*kmsg.MetadataResponse).Brokers); n != len(c.Brokers) {
			t.Fatalf("broker %d at %s knows %d brokers, want %d", i+1, addr, n, len(c.Brokers))
		}
	}

	const partitions = 3
	topic := fmt.Sprintf("cluster-leader-kill-%d", time.Now().UnixNano())
	if _, err := c.Admin().CreateTopic(ctx, partitions, 3, nil, topic); err != nil {
		t.Fatalf("create %s with replication 3: %v", topic, err)
	}
	ps := []int32{0, 1, 2}
	for _, p := range ps {
		c.WaitPartition(t, topic, p, "a leader and 3 in-sync replicas", 30*time.Second,
			func(leader int32, isr []int32) bool { return leader > 0 && len(isr) == 3 })
	}
	if got := testenv.TopicConfig(ctx, t, c.Admin(), topic, "min.insync.replicas"); got != "2" {
		t.Fatalf("min.insync.replicas of %s = %q, want 2", topic, got)
	}

	prod, err := kgo.NewClient(kgo.SeedBrokers(c.Brokers...), kgo.DefaultProduceTopic(topic),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.MetadataMinAge(250*time.Millisecond), kgo.ProducerLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()

	var (
		mu      sync.Mutex
		acked   = map[int]ack{} // record number -> where it landed
		failed  []error
		sent    int // records handed to the producer so far
		stop    = make(chan struct{})
		stopped = make(chan struct{})
	)
	// ackedAfter counts acknowledged records numbered from n on, in partition p (all when p < 0).
	ackedAfter := func(n int, p int32) int {
		mu.Lock()
		defer mu.Unlock()
		k := 0
		for i, a := range acked {
			if i >= n && (p < 0 || a.partition == p) {
				k++
			}
		}
		return k
	}
	go func() {
		defer close(stopped)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			r := &kgo.Record{Partition: int32(i % partitions), Value: []byte(strconv.Itoa(i))}
			mu.Lock()
			sent = i + 1
			mu.Unlock()
			prod.Produce(ctx, r, func(r *kgo.Record, err error) {
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					failed = append(failed, fmt.Errorf("record %s: %w", r.Value, err))
					return
				}
				acked[i] = ack{r.Partition, r.Offset}
			})
			time.Sleep(2 * time.Millisecond) // a steady stream, not a flood, on two cores
		}
	}()
	waitFor := func(what string, timeout time.Duration, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(timeout)
		for !ok() {
			if time.Now().After(deadline) {
				mu.Lock()
				n, f := len(acked), len(failed)
				mu.Unlock()
				t.Fatalf("%s: not within %v (acknowledged %d, failed %d)", what, timeout, n, f)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	sentNow := func() int { mu.Lock(); defer mu.Unlock(); return sent }

	waitFor("first 300 acknowledgements", 30*time.Second, func() bool { return ackedAfter(0, -1) >= 300 })

	victim := c.Leader(t, topic, 0)
	if victim < 1 {
		t.Fatalf("partition 0 of %s has no leader", topic)
	}
	killedAt := sentNow()
	killTime := time.Now()
	c.KillBroker(t, victim)

	// While the victim is down: another broker leads partition 0 and acknowledges records sent
	// after the kill with acks=all (two in-sync replicas are enough).
	waitFor("acknowledgements on partition 0 while its old leader is dead", 90*time.Second,
		func() bool { return ackedAfter(killedAt, 0) >= 100 })
	failover := time.Since(killTime)
	newLeader, isr := c.Partition(t, topic, 0)
	if newLeader == victim || newLeader < 1 || slices.Contains(isr, victim) {
		t.Fatalf("partition 0: leader %d, ISR %v with broker %d dead", newLeader, isr, victim)
	}
	t.Logf("broker %d killed; broker %d leads partition 0 with ISR %v; acks resumed %v after the kill",
		victim, newLeader, isr, failover.Round(time.Millisecond))

	c.StartBroker(t, victim)
	restartedAt := sentNow()
	inSync := c.WaitInSync(t, topic, ps, victim, 90*time.Second)
	t.Logf("broker %d back in the ISR of every partition %v after it answered", victim, inSync.Round(time.Millisecond))
	waitFor("acknowledgements after the restart", 30*time.Second, func() bool { return ackedAfter(restartedAt, -1) >= 300 })

	close(stop)
	<-stopped
	if err := prod.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if len(failed) > 0 {
		// Not a loss (they were never acknowledged), but with unlimited retries none should fail.
		t.Errorf("%d records failed, first: %v", len(failed), failed[0])
	}
	want := make(map[int]ack, len(acked))
	for i, a := range acked {
		want[i] = a
	}
	mu.Unlock()

	// Read everything back from the start and find every acknowledged record where it was
	// acknowledged.
	ends, err := c.Admin().ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := kgo.NewClient(kgo.SeedBrokers(c.Brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	got := map[ack]int{}
	seen := map[int]int{}
	next := map[int32]int64{} // per partition: the offset after the last record read
	for done := false; !done; {
		fs := cons.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("reading back: %v (read %d records)", ctx.Err(), len(got))
		}
		fs.EachError(func(_ string, p int32, err error) { t.Fatalf("fetch partition %d: %v", p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			n, err := strconv.Atoi(string(r.Value))
			if err != nil {
				t.Fatalf("record %q at %d/%d", r.Value, r.Partition, r.Offset)
			}
			got[ack{r.Partition, r.Offset}] = n
			seen[n]++
			next[r.Partition] = r.Offset + 1
		})
		done = true
		ends.Each(func(o kadm.ListedOffset) { done = done && next[o.Partition] >= o.Offset })
	}
	lost, moved := 0, 0
	for i, a := range want {
		n, ok := got[a]
		switch {
		case !ok && seen[i] == 0:
			lost++
		case n != i:
			moved++
		}
	}
	dups := 0
	for _, k := range seen {
		if k > 1 {
			dups++
		}
	}
	t.Logf("%d acknowledged (%d sent), %d in the log; lost %d, at another offset %d, duplicated %d",
		len(want), sentNow(), len(got), lost, moved, dups)
	if lost > 0 || moved > 0 {
		t.Fatalf("acknowledged records lost: %d, not at their acknowledged offset: %d", lost, moved)
	}
	if dups > 0 {
		t.Fatalf("%d records are in the log twice (the producer is idempotent)", dups)
	}
}
