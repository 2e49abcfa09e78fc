package processors

import (
	"context"
	"crypto/rand"
	"errors"
	"hash/fnv"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/lovoo/goka"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestProducerFailsEveryLaterPromise (DESIGN invariant 13): once a write failed for good (a message
// larger than its topic's max.message.bytes), every later promise fails too, naming the first
// failure, although Kafka took those messages: goka commits a record whose promises all
// succeeded, and a later record's commit would pass the one whose write failed.
func TestProducerFailsEveryLaterPromise(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	small := "4096"
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"max.message.bytes": &small}, "small"); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, "ok"); err != nil {
		t.Fatal(err)
	}

	p, err := New(tinyTopology(t), Config{Brokers: c.ListenAddrs()})
	if err != nil {
		t.Fatal(err)
	}
	gp, err := p.producerBuilder(false)(c.ListenAddrs(), "test", fnv.New32a)
	if err != nil {
		t.Fatal(err)
	}
	prod := gp.(*producer)
	defer prod.Close()

	type result struct {
		msg *sarama.ProducerMessage
		err error
	}
	var promises []<-chan result
	send := func(topic string, size int) {
		ch := make(chan result, 1)
		// Random bytes: goka's producers compress.
		v := make([]byte, size)
		rand.Read(v)
		prod.Emit(topic, "k", v).ThenWithMessage(func(m *sarama.ProducerMessage, err error) {
			ch <- result{m, err}
		})
		promises = append(promises, ch)
	}
	send("ok", 10)
	send("small", 10_000) // fails for good
	send("ok", 10)
	send("small", 10)
	var got []result
	for _, ch := range promises {
		select {
		case r := <-ch:
			got = append(got, r)
		case <-ctx.Done():
			t.Fatalf("promise %d not settled", len(got))
		}
	}
	if got[0].err != nil {
		t.Fatalf("first write: %v", got[0].err)
	}
	for i, r := range got[2:] {
		if !errors.Is(r.err, sarama.ErrMessageSizeTooLarge) || !strings.Contains(r.err.Error(), "an earlier write failed") {
			t.Fatalf("write %d after the failed one: %v, want an error that wraps the first failure", i+3, r.err)
		}
	}
	if !errors.Is(got[1].err, sarama.ErrMessageSizeTooLarge) || !strings.Contains(got[1].err.Error(), "topic small") {
		t.Fatalf("the oversized write: %v, want one that names topic small and says the message is too large", got[1].err)
	}
	if prod.Acknowledged() != 1 || prod.Sent() != 4 {
		t.Fatalf("acknowledged %d of %d, want 1 of 4", prod.Acknowledged(), prod.Sent())
	}
	var _ goka.Producer = prod
}
