package franz

import (
	"fmt"
	"hash/fnv"
	"testing"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestSameAsSarama: for many keys and partition counts, the franz-go partitioner agrees with the
// sarama hash partitioner that goka's producers use.
func TestSameAsSarama(t *testing.T) {
	sp := sarama.NewCustomHashPartitioner(fnv.New32a)
	for _, n := range []int32{1, 3, 4, 12, 64} {
		kp := Partitioner().ForTopic("t")
		p := sp("t")
		for i := range 2000 {
			key := []byte(fmt.Sprintf("entity-%d", i))
			want, err := p.Partition(&sarama.ProducerMessage{Topic: "t", Key: sarama.ByteEncoder(key)}, n)
			if err != nil {
				t.Fatal(err)
			}
			if got := int32(kp.Partition(&kgo.Record{Key: key}, int(n))); got != want {
				t.Fatalf("Partitioner() puts %q on %d of %d, sarama on %d", key, got, n, want)
			}
		}
	}
}
