package processors

import (
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/lovoo/goka"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/abacus-stream/abacus/topology"
	"github.com/abacus-stream/abacus/windows"
)

func tinyTopology(t *testing.T) *topology.Topology {
	b := topology.New("tiny")
	topology.NewSource(b, "in", topology.Raw(), func(v []byte) string { return string(v) }, func([]byte) time.Time { return time.Unix(0, 0) }).
		Aggregate("m", windows.Tumbling(time.Minute)).Grace(0).Count("n")
	topo, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	return topo
}

// TestProducersAreIdempotent (DESIGN invariants 5 and 13): the processor's producers are idempotent with
// one request in flight and acks from every in-sync replica: a retried batch can neither land
// twice nor after a later one, which the offset fences and the changelog's order rely on.
func TestProducersAreIdempotent(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Even when the user's hook tries to turn it off.
	p, err := New(tinyTopology(t), Config{Brokers: c.ListenAddrs(), Sarama: func(sc *sarama.Config) {
		sc.Producer.Idempotent = false
		sc.Net.MaxOpenRequests = 5
	}})
	if err != nil {
		t.Fatal(err)
	}
	prod, err := p.producerBuilder(true)(c.ListenAddrs(), "test", fnv.New32a)
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	sc := prod.(*producer).cfg
	if !sc.Producer.Idempotent || sc.Net.MaxOpenRequests != 1 || sc.Producer.RequiredAcks != sarama.WaitForAll || sc.Producer.Retry.Max < 1 {
		t.Fatalf("producer config: idempotent %v, in flight %d, acks %v, retries %d",
			sc.Producer.Idempotent, sc.Net.MaxOpenRequests, sc.Producer.RequiredAcks, sc.Producer.Retry.Max)
	}
	if p.durability.p.Load() != prod {
		t.Fatal("the engine does not follow the processor's producer")
	}
}

// TestProducerRetriesOutlastLeaderElection: a producer keeps retrying a message for longer than a
// dead broker's partitions go without a leader (9 s until the controller fences it, by Kafka's
// default), so that a broker's death does not fail messages and stop the processor; a user's
// Sarama hook may still change it.
func TestProducerRetriesOutlastLeaderElection(t *testing.T) {
	var c Config
	c.EnsureDefaults(tinyTopology(t))
	sc := c.saramaConfig("test")
	var total time.Duration
	for i := range sc.Producer.Retry.Max {
		total += sc.Producer.Retry.BackoffFunc(i, sc.Producer.Retry.Max)
	}
	if total < 30*time.Second {
		t.Fatalf("a message is retried %d times over %v: not enough to outlast a leader election", sc.Producer.Retry.Max, total)
	}
	c.Sarama = func(sc *sarama.Config) { sc.Producer.Retry.Max = 3 }
	if got := c.saramaConfig("test").Producer.Retry.Max; got != 3 {
		t.Fatalf("the user's hook set 3 retries, the config has %d", got)
	}
}

// TestConsumerGroupRetriesOnlyTransientErrors: the consumer group retries joining after errors
// a broker outage causes, and passes on the others, which stop the processor.
func TestConsumerGroupRetriesOnlyTransientErrors(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	for _, c := range []struct {
		err  error
		want bool
	}{
		{refused, true},
		{fmt.Errorf("join: %w", refused), true},
		{io.EOF, true},
		{sarama.ErrOutOfBrokers, true},
		{sarama.ErrConsumerCoordinatorNotAvailable, true},
		{sarama.ErrNotCoordinatorForConsumer, true},
		{sarama.ErrRebalanceInProgress, true},
		// A new leader's answer until its high watermark catches up (CI, TestClusterTwoBrokersDown).
		{sarama.ErrOffsetNotAvailable, true},
		{sarama.ErrNotLeaderForPartition, true},
		{sarama.ErrKafkaStorageError, true},
		{sarama.ErrUnknownLeaderEpoch, true},
		{sarama.ErrUnknownTopicOrPartition, false},
		{sarama.ErrMessageSizeTooLarge, false},
		{sarama.ErrClosedConsumerGroup, false},
		{sarama.ErrGroupAuthorizationFailed, false},
		{sarama.ErrSASLAuthenticationFailed, false},
		{sarama.ErrFencedInstancedId, false},
		{errors.New("something else"), false},
	} {
		if got := transient(c.err); got != c.want {
			t.Errorf("transient(%v) = %v, want %v", c.err, got, c.want)
		}
		// goka's topic manager passes errors on as text.
		if got := transientText(fmt.Errorf("Error getting config for topic x: %v", c.err)); got != c.want {
			t.Errorf("transientText(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// flakyTopicManager fails its first lookups the way a dead leader does.
type flakyTopicManager struct {
	goka.TopicManager
	failures int
	err      error
	calls    int
}

func (f *flakyTopicManager) GetOffset(string, int32, int64) (int64, error) {
	f.calls++
	if f.calls <= f.failures {
		return 0, f.err
	}
	return 42, nil
}

func (f *flakyTopicManager) Close() error { return nil }

// TestTopicManagerRetriesOutages: goka's offset lookups at partition setup are retried while a
// broker outage makes them fail (goka stops the processor on the first error), and not otherwise.
func TestTopicManagerRetriesOutages(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	eof := fmt.Errorf("Error getting oldest offset for topic/partition x-table/0: %w", io.EOF)
	m := &retryingTopicManager{TopicManager: &flakyTopicManager{failures: 3, err: eof}, log: log}
	if off, err := m.GetOffset("x-table", 0, sarama.OffsetOldest); err != nil || off != 42 {
		t.Fatalf("GetOffset after three EOFs = %d, %v; want 42 and no error", off, err)
	}
	bad := &flakyTopicManager{failures: 3, err: sarama.ErrTopicAuthorizationFailed}
	m = &retryingTopicManager{TopicManager: bad, log: log}
	if _, err := m.GetOffset("x-table", 0, sarama.OffsetOldest); !errors.Is(err, sarama.ErrTopicAuthorizationFailed) || bad.calls != 1 {
		t.Fatalf("GetOffset refused for good: %v after %d calls; want the refusal after one", err, bad.calls)
	}
}
