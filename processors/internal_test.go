package processors

import (
	"hash/fnv"
	"testing"
	"time"

	"github.com/IBM/sarama"
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

// TestProducersAreIdempotent (issue 10, item 14): the processor's producers are idempotent with
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
