// Package stream is what the failure suite (bench/chaos) runs through the pipeline: the chaos
// topology, a generator of its event stream with every kind of awkward input (out of order, late,
// future-dated, malformed, duplicated), and an oracle that computes, from the stream as it lies in
// Kafka, every cell the aggregates and facts tables must hold at the end.
//
// The oracle re-implements the window semantics by itself (assignment, per-partition stream time,
// grace, lateness) rather than calling the engine, so that the suite compares the pipeline with an
// independent account of what it must compute. It shares with the pipeline only the byte layouts
// of package schema and the JSON decoding of the events.
//
// It must never depend on timing: the oracle's answer is a function of the records and their
// order in each partition, which is also all the engine's answer may depend on.
package stream

import (
	"time"

	"github.com/abacus-stream/abacus/topology"
	"github.com/abacus-stream/abacus/windows"
)

// Name is the topology's name; SourceTopic its source topic and LateTopic its late topic as
// declared (a deployment renames them).
const (
	Name        = "chaos"
	SourceTopic = "chaos-events"
	LateTopic   = "chaos-late"
)

// Event types. The tumbling and hopping sets count only measurements. A flush event, one per
// partition at the end of a run, a day past the stream, enters only the flush set (whose window
// never closes, so it emits nothing): applied, it moves its partition's stream time past every
// other window's close, which is how the suite closes them all without waiting for the idle
// timeout. (The engine moves stream time only with events some set applies.)
const (
	TypeMeasurement = "m"
	TypeFlush       = "flush"
)

// Event is one record of the chaos stream.
type Event struct {
	Entity string `json:"e"`
	Time   int64  `json:"ts"` // event time, ms since the epoch
	Kind   string `json:"k"`
	// V is an integer-valued reading: sums of integers are exact in any order, so the oracle's
	// sums equal the engine's bit for bit.
	V float64 `json:"v"`
	// Seq numbers the generated events; a duplicate repeats its original's.
	Seq int64 `json:"seq"`
	// Pad makes events as large as a test needs (Generator.PadBytes); nothing reads it.
	Pad string `json:"pad,omitempty"`
}

// The aggregate sets and their parameters, which the oracle mirrors.
const (
	SetTumble = "tumble-1m"
	SetHop    = "hop-5m"
	SetFlush  = "flush"
)

var (
	tumbleSpec  = windows.Tumbling(time.Minute)
	tumbleGrace = 20 * time.Second
	hopSpec     = windows.Hopping(5*time.Minute, time.Minute)
	hopGrace    = 30 * time.Second
)

// Topology is the chaos topology: per entity, one-minute tumbling windows (20 s grace; count, sum
// and max, with early firings every 5 s, so cells are overwritten by newer totals before the final
// one) and five-minute windows hopping every minute (30 s grace; count and min, final only), and
// the flush set of the flush events. Late events go to the late topic, one record per set an event
// is late for (so that the suite can check that none is lost in a crash); events more than five
// minutes ahead of their record's timestamp are dead-lettered.
func Topology() (*topology.Topology, error) {
	b := topology.New(Name).LateTopic(LateTopic)
	src := topology.NewSource(b, SourceTopic, topology.JSON[Event](),
		func(e Event) string { return e.Entity },
		func(e Event) time.Time { return time.UnixMilli(e.Time) }).
		EventType(func(e Event) string { return e.Kind })
	src.Aggregate(SetTumble, tumbleSpec).Grace(tumbleGrace).Types(TypeMeasurement).
		Emit(topology.EarlyEvery(5*time.Second)).
		Count("n").Sum("sum", "V").Max("max", "V")
	src.Aggregate(SetHop, hopSpec).Grace(hopGrace).Types(TypeMeasurement).
		Count("n").Min("min", "V")
	src.Aggregate(SetFlush, windows.Tumbling(time.Hour)).Grace(0).Types(TypeFlush).Count("n")
	return b.Build()
}
