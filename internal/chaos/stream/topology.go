// Package stream is what the failure suite (bench/chaos) runs through the pipeline: the chaos
// topology, a generator of its event stream with every kind of awkward input (out of order, late,
// future-dated, malformed, duplicated), and an oracle that computes, from the stream as it lies in
// Kafka, every cell the aggregates and facts tables must hold at the end.
//
// The oracle re-implements the window semantics by itself (assignment, per-partition stream time,
// grace, lateness) rather than calling the engine, so that the suite compares the pipeline with an
// independent account of what it must compute. It shares with the pipeline only the byte layouts
// of package schema, the JSON decoding of the events and the rollups' keys (Region and
// topology.GlobalKey); rollup windows it totals from its own entities' contributions.
//
// It must never depend on timing: the oracle's answer is a function of the records and their
// order in each partition, which is also all the engine's answer may depend on.
package stream

import (
	"encoding/json"
	"hash/fnv"
	"time"

	"github.com/abacus-stream/abacus/topology"
	"github.com/abacus-stream/abacus/windows"
)

// Name is the topology's name; SourceTopic its source topic, LateTopic its late topic and
// RegistryTopic its table's topic (TopologyJoined) as declared (a deployment renames them).
const (
	Name          = "chaos"
	SourceTopic   = "chaos-events"
	LateTopic     = "chaos-late"
	RegistryTopic = "chaos-regions"
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
	// Region is the event's region: RegionAt its entity and time, looked up in the registry by
	// TopologyJoined. Events do not carry it.
	Region string `json:"-"`
}

// The aggregate sets and their parameters, which the oracle mirrors. SetRegion and SetGlobal are
// rollups with the tumbling set's window and grace: per region (RegionDimension, Region) and one
// total for every entity (its row's entity is topology.GlobalKey).
const (
	SetTumble = "tumble-1m"
	SetHop    = "hop-5m"
	SetRegion = "region-1m"
	SetGlobal = "global-1m"
	SetFlush  = "flush"

	RegionDimension = "region"
)

// regions are the rollup keys of SetRegion: a handful, so that every region totals entities of
// every partition and each of its windows merges partials from several partitions.
var regions = []string{"af", "ap", "eu", "sa", "us"}

// Region is where an entity starts, a fixed function of its name (the generator's events carry
// none): a hash, not the partitioner's, so that regions cut across partitions.
func Region(entity string) string { return regions[regionIndex(entity)] }

func regionIndex(entity string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(entity))
	return h.Sum32() % uint32(len(regions))
}

// RegionPeriod is how often every entity moves to the next region: a multiple of the rollup's
// window, so that all of an entity's events of one window have one region; one window, so that
// the failure suite's few minutes of event time see several moves.
const RegionPeriod = time.Minute

// RegionAt is the region of an entity at event time t: Region, moved on by one region every
// RegionPeriod.
func RegionAt(entity string, t int64) string {
	step := floorDiv(t, RegionPeriod.Milliseconds())
	n := int64(len(regions))
	return regions[((int64(regionIndex(entity))+step)%n+n)%n]
}

// Place is a value of the registry (TopologyJoined): an entity's region from From (ms) on.
type Place struct {
	Region string `json:"region"`
	From   int64  `json:"from"`
}

// RegistryRecords are the registry's records for entities named by the generator (Entities of
// them): each entity's place at every RegionPeriod boundary from the one at or before from to the
// last at or before until. Produced before the events of those times, they give the joined
// topology every region RegionAt gives.
func RegistryRecords(entities int, from, until int64) []Record {
	p := RegionPeriod.Milliseconds()
	var out []Record
	for b := floorDiv(from, p) * p; b <= until; b += p {
		for i := range entities {
			e := entityName(i)
			v, _ := json.Marshal(Place{Region: RegionAt(e, b), From: b})
			out = append(out, Record{Key: []byte(e), Value: v})
		}
	}
	return out
}

// Missing is the region of an event whose entity the registry did not know at its time: no
// event the oracle counts should ever have it.
const Missing = "missing"

var (
	tumbleSpec  = windows.Tumbling(time.Minute)
	tumbleGrace = 20 * time.Second
	hopSpec     = windows.Hopping(5*time.Minute, time.Minute)
	hopGrace    = 30 * time.Second
)

// Topology is the chaos topology: per entity, one-minute tumbling windows (20 s grace; count, sum
// and max, with early firings every 5 s, so cells are overwritten by newer totals before the final
// one) and five-minute windows hopping every minute (30 s grace; count and min, final only); two
// rollups of the tumbling windows, per region (count, sum, min, max and last, with early firings
// every 5 s) and global (count, sum, min, max, mean and last, final only); and the flush set of
// the flush events. The rollups' aggregations are those whose merge the oracle computes exactly:
// the values are integers, so sums and means do not depend on the order partials merge in, and
// last breaks ties between entities by the larger value. Late events go to the late topic, one record per set an event
// is late for (so that the suite can check that none is lost in a crash); events more than five
// minutes ahead of their record's timestamp are dead-lettered.
//
// Its region rollup computes RegionAt itself; TopologyJoined looks the region up in a table.
func Topology() (*topology.Topology, error) { return build(false) }

// TopologyJoined is Topology with the region of each event looked up, by event time, in the
// registry table (RegistryTopic, filled with RegistryRecords): the same cells, through a table
// join. The failure suite runs it.
func TopologyJoined() (*topology.Topology, error) { return build(true) }

func build(joined bool) (*topology.Topology, error) {
	b := topology.New(Name).LateTopic(LateTopic)
	src := topology.NewSource(b, SourceTopic, topology.JSON[Event](),
		func(e Event) string { return e.Entity },
		func(e Event) time.Time { return time.UnixMilli(e.Time) }).
		EventType(func(e Event) string { return e.Kind })
	region := func(e Event) string { return RegionAt(e.Entity, e.Time) }
	if joined {
		registry := topology.NewTable[Place](b, "regions", RegistryTopic, topology.JSON[Place]()).
			ValueTime(func(p Place) time.Time { return time.UnixMilli(p.From) })
		topology.Join(src, registry, func(e Event) string { return e.Entity }, func(e Event, p Place, found bool) (Event, error) {
			e.Region = Missing
			if found {
				e.Region = p.Region
			}
			return e, nil
		})
		region = func(e Event) string { return e.Region }
	}
	src.Aggregate(SetTumble, tumbleSpec).Grace(tumbleGrace).Types(TypeMeasurement).
		Emit(topology.EarlyEvery(5*time.Second)).
		Count("n").Sum("sum", "V").Max("max", "V")
	src.Aggregate(SetHop, hopSpec).Grace(hopGrace).Types(TypeMeasurement).
		Count("n").Min("min", "V")
	src.Aggregate(SetRegion, tumbleSpec).Grace(tumbleGrace).Types(TypeMeasurement).
		By(RegionDimension, region).
		Emit(topology.EarlyEvery(5*time.Second)).
		Count("n").Sum("sum", "V").Min("min", "V").Max("max", "V").Last("last", "V")
	src.Aggregate(SetGlobal, tumbleSpec).Grace(tumbleGrace).Types(TypeMeasurement).Global().
		Count("n").Sum("sum", "V").Min("min", "V").Max("max", "V").Mean("mean", "V").Last("last", "V")
	src.Aggregate(SetFlush, windows.Tumbling(time.Hour)).Grace(0).Types(TypeFlush).Count("n")
	return b.Build()
}
