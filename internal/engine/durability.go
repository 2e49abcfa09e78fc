package engine

import "github.com/lovoo/goka"

// Durability tells the engine which of the messages it sent Kafka has acknowledged, so that it
// emits a final total only from state that Kafka holds, and drops a closed window only once its
// final total is there. Both numbers count the messages of one producer in the order they were
// sent: Sent, read right after a write, is a bound that covers that write; Acknowledged is the
// length of the prefix of sent messages that Kafka has acknowledged, each and every one.
type Durability interface {
	Sent() uint64
	Acknowledged() uint64
}

// DurableSender is a Durability that can send a message and return once Kafka acknowledged it.
// The engine sends through it where a message must be in Kafka before the state write that
// fences its record: an event late for one set and applied to another is fenced by that write, so
// a replay after a crash skips it and would never send its late record again. Kafka acknowledges
// messages to different brokers in any order (processors.TestClusterScenarioBrokerKills lost such
// late records while the late topic's leader was dead). Without one (the test driver), the
// message goes out with the others.
type DurableSender interface {
	SendDurable(topic, key string, value []byte, headers goka.Headers) error
}

// immediate is the durability of a store that acknowledges every write at once (in-memory tests).
type immediate struct{}

func (immediate) Sent() uint64         { return 0 }
func (immediate) Acknowledged() uint64 { return 0 }
