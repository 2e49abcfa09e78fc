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

// immediate is the durability of a store that acknowledges every write at once (in-memory tests).
type immediate struct{}

func (immediate) Sent() uint64         { return 0 }
func (immediate) Acknowledged() uint64 { return 0 }
