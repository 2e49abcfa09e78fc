package partitioner

import (
	"fmt"
	"hash/fnv"
	"testing"

	"github.com/IBM/sarama"
)

// TestSameAsSarama: for many keys and partition counts, Partition agrees with the sarama hash
// partitioner that goka's producers use (package franz checks its franz-go partitioner too).
func TestSameAsSarama(t *testing.T) {
	sp := sarama.NewCustomHashPartitioner(fnv.New32a)
	for _, n := range []int32{1, 3, 4, 12, 64} {
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
		}
	}
}
