// Package franz is abacus's partitioning rule (package partitioner) as a franz-go partitioner, for
// producers written with franz-go: in a package of its own, so that what only needs the rule (the
// engine, the test driver) does not link a Kafka client.
package franz

import (
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/abacus-stream/abacus/partitioner"
)

// Partitioner is a franz-go partitioner that places keys as goka does. Records without a key are
// spread as franz-go's sticky partitioner spreads them.
func Partitioner() kgo.Partitioner {
	return kgo.StickyKeyPartitioner(kgo.SaramaCompatHasher(partitioner.Hash))
}
