// Package partitioner places record keys on Kafka partitions exactly as goka does (sarama's hash
// partitioner over FNV-1a 32): a source record must land on the partition whose processor owns its
// entity, so every producer of a source topic, whatever its client, must partition with it.
//
// It is a leaf: it depends on nothing in abacus, nor on any Kafka client. Partition is the rule;
// package partitioner/franz is the rule as a franz-go partitioner, for producers written with
// franz-go.
package partitioner

import "hash/fnv"

// Hash is the FNV-1a 32 hash of a key, as goka's default hasher computes it.
func Hash(key []byte) uint32 {
	h := fnv.New32a()
	h.Write(key)
	return h.Sum32()
}

// Partition is the partition among n that goka assigns key to: the hash read as a signed 32-bit
// number, modulo n, made non-negative (sarama's hash partitioner).
func Partition(key []byte, n int32) int32 {
	p := int32(Hash(key)) % n
	if p < 0 {
		p = -p
	}
	return p
}
