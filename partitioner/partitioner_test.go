package partitioner

import (
	"fmt"
	"hash/fnv"
	"testing"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestSameAsSarama: for many keys and partition counts, Partition and the franz-go partitioner
// agree with the sarama hash partitioner that goka's producers use.
func TestSameAsSarama(t *testing.T) {
	sp := sarama.NewCustomHashPartitioner(fnv.New32a)
	for _, n := range []int32{1, 3, 4, 12, 64} {
		kp := Kgo().ForTopic("t")
		p := sp("t")
		for i := range 2000 {
			key := []byte(fmt.Sprintf("entity-%d", i))
			want, err := p.Partition(&sarama.ProducerMessage{Topic: "t", Key: sarama.ByteEncoder(key)}, n)
			if err != nil {
				t.Fatal(err)
			}
			if got := Partition(key, n); got != want {
				t.Fatalf("Partition(%q, %d) = %d, sarama says %d", key, n, got, want)
			}
			if got := int32(kp.Partition(&kgo.Record{Key: key}, int(n))); got != want {
				t.Fatalf("Kgo() puts %q on %d of %d, sarama on %d", key, got, n, want)
			}
		}
	}
}
