package engine

// Durability tells the engine which of the messages it sent Kafka has acknowledged, so that it
// emits a final total only from state that Kafka holds, and drops a closed window only once its
// final total is there. Both numbers count the messages of one producer in the order they were
// sent: Sent, read right after a write, is a bound that covers that write; Acknowledged is the
// length of the prefix of sent messages that Kafka has acknowledged, each and every one.
type Durability interface {
	Sent() uint64
	Acknowledged() uint64
}

// Awaiter is a Durability that can wait for Kafka's acknowledgements. The engine uses it where a
// message must be in Kafka before the state write that fences its record: an event late for one
// set and applied to another is fenced by that write, so a replay after a crash would skip it and
// never send its late record again. Kafka acknowledges messages to different brokers in any
// order (processors.TestClusterScenarioBrokerKills lost such late records when the late topic's
// leader died). Without an Awaiter (the test driver) nothing waits.
type Awaiter interface {
	// AwaitAcknowledged waits until every message up to n is acknowledged, and reports false when
	// that will not happen (a send failed, the producer closed).
	AwaitAcknowledged(n uint64) bool
}

// immediate is the durability of a store that acknowledges every write at once (in-memory tests).
type immediate struct{}

func (immediate) Sent() uint64         { return 0 }
func (immediate) Acknowledged() uint64 { return 0 }
