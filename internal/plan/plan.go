// Package plan is the compiled form of a topology that the engine runs: how to decode each
// source's records and read an event's entity, time and type; each aggregate set's window, grace,
// emission and aggregations as accumulators.
//
// Package topology builds a Plan and keeps it behind its immutable, read-only Topology; the parts
// of abacus that run a topology (the processor engine, the test driver, the facts sink, live
// views) get it with Of. Nothing outside abacus can reach it, so no user code can change a
// topology after Build checked it. A Plan must be treated as read-only by everyone.
package plan

import (
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/abacus-stream/abacus/state"

	"github.com/abacus-stream/abacus/totals"
	"github.com/abacus-stream/abacus/windows"
)

// Event is a decoded source event, type-erased.
type Event = any

// Accumulator is one aggregation's running state in one window. The engine decodes it from the
// entity state, adds events or merges other accumulators of the same aggregation (session
// windows), and encodes it back.
type Accumulator interface {
	// Add applies one event with its event time in ms.
	Add(e Event, eventTime int64)
	// Merge folds other, an accumulator of the same aggregation, into this one.
	Merge(other Accumulator) error
	// Value is the aggregate's current value; the engine fills in the name.
	Value() totals.Value
	// AppendBinary appends the accumulator's encoding, which Decode of its Agg reads.
	AppendBinary(b []byte) []byte
}

// Agg is a compiled aggregation.
type Agg struct {
	Name string
	// Kind names what the aggregation computes and how its accumulator is encoded ("count",
	// "sum", "custom <type> <version>"...): state written under one kind cannot be read as
	// another, so a topology that changes the kind under the same name is refused at start.
	Kind   string
	New    func() Accumulator
	Decode func([]byte) (Accumulator, error)
	// NoMerge is set for an aggregation whose accumulators cannot be merged (a custom one without
	// Merge): it cannot be in a session set, whose windows merge, or in a rollup set, whose
	// partial totals merge.
	NoMerge bool
	// MaxBytes bounds the accumulator's encoding, whatever it is fed (a count's few bytes, a
	// HyperLogLog's dense registers); 0 when nothing bounds it (a DDSketch over any range, a
	// custom aggregation). A rollup owner's state holds one merged accumulator per window.
	MaxBytes int
}

// EmitMode says when an aggregate set emits totals (topology.EmitMode is this type).
type EmitMode uint8

// The emission modes.
const (
	EmitFinal       EmitMode = iota + 1 // once, when the window closes
	EmitEveryUpdate                     // after every applied event, and the final
	EmitEarly                           // at most every EmitEvery of wall-clock time, and the final
)

// Set is a compiled aggregate set.
type Set struct {
	Name      string
	Index     uint16 // position in Plan.Sets
	Source    int    // index in Plan.Sources
	Window    windows.Spec
	Grace     int64 // ms
	Emit      EmitMode
	EmitEvery time.Duration   // EmitEarly only
	Types     map[string]bool // nil: every event type
	// Where, if set, keeps only the events it returns true for.
	Where func(Event) bool
	// Rollup, if set, keys the set by something other than the source's entity.
	Rollup *Rollup
	Aggs   []Agg
	// Finer, if set, is the set this one is a coarser form of (topology AggregateSet.Coarser):
	// an earlier set of the same source, key and aggregations whose tumbling window divides
	// this one's. The set takes an event only when Finer applied it.
	Finer *Set
}

// Rollup is how a rollup set keys its windows: by Key(event) under the dimension's name, or, for a
// global rollup (Dimension ""), one key for all events (GlobalKey).
type Rollup struct {
	Dimension string
	Key       func(Event) string // nil for a global rollup
}

// GlobalKey is the one key of a global rollup: the entity of its totals and of its rows.
const GlobalKey = "all"

// Global reports whether the rollup has one key for all events.
func (r *Rollup) Global() bool { return r.Dimension == "" }

// KeyOf is the rollup key of an event.
func (r *Rollup) KeyOf(e Event) string {
	if r.Key == nil {
		return GlobalKey
	}
	return r.Key(e)
}

// Accepts reports whether an event of type typ feeds the set (Where is asked apart: it runs user
// code on the event).
func (s *Set) Accepts(typ string) bool { return s.Types == nil || s.Types[typ] }

// Takes reports whether the event e of type typ feeds the set.
func (s *Set) Takes(e Event, typ string) bool {
	return s.Accepts(typ) && (s.Where == nil || s.Where(e))
}

// Source is a compiled source: how to decode its records and read entity, event time and type.
type Source struct {
	Topic string
	// Decode turns a record value into an event; an error sends the record to the dead-letter topic.
	Decode func([]byte) (Event, error)
	// Encode turns an event into a record value, as the source's codec does (test drivers and
	// generators produce with it).
	Encode func(Event) ([]byte, error)
	// Entity returns the entity the event aggregates under.
	Entity func(Event) string
	// EventTime returns the event time in ms since the Unix epoch.
	EventTime func(Event) int64
	// Type returns the event type, or "" when the source declares none.
	Type func(Event) string
	// Repartition is set when the record key is not the entity: the engine re-keys events through
	// its loop topic, carrying the source position so that deduplication stays exact.
	Repartition bool
	// Sets are the indexes of the aggregate sets fed by this source.
	Sets []uint16
	// Joins enrich each decoded event from tables, in order, before any set sees it.
	Joins []Join
}

// Table is a compiled table: values by key, read from a (compacted) topic, each valid from its
// own time until the key's next version, which events look up by their event time.
type Table struct {
	Name  string
	Topic string
	// Decode turns a record value into a table value; a record it refuses is counted and leaves
	// the key's version before it in force.
	Decode func([]byte) (any, error)
	// ValueTime is the time from which a value is valid, in ms; nil: the record's timestamp.
	ValueTime func(any) int64
	// Grace is how long an event may wait for the table to catch up with its event time.
	Grace time.Duration
	// History is how far back in table time superseded versions are kept, for events (and
	// replays) that far behind the newest version.
	History time.Duration
}

// Join enriches a source's events from a table: Apply gets the event, the value its table held
// for Key(event) at the event's time, and whether there was one; its result is the event the sets
// see, and an error sends the record to the dead-letter topic.
type Join struct {
	Table int // index in Plan.Tables
	Key   func(Event) string
	Apply func(e Event, value any, found bool) (Event, error)
}

// Plan is a compiled topology.
type Plan struct {
	Name          string
	TotalsTopic   string
	DeadLetter    string
	LateTopic     string // empty: late events are dropped
	MaxFutureSkew time.Duration
	// MaxRecordBytes and MaxEntityBytes bound what a producer can make the engine hold: a record
	// value, and an entity (the state key), larger than these is dead-lettered as too large.
	MaxRecordBytes int
	MaxEntityBytes int
	// MaxMessageBytes bounds each message written to Kafka for a record: a state write of an
	// entity, a dead letter, a late record (see topology.Builder.MaxMessageBytes).
	MaxMessageBytes int
	Sources         []*Source
	Sets            []*Set
	Tables          []*Table
}

// Future reports whether an event time lies further ahead than MaxFutureSkew of its record's
// timestamp (the producer's create time or the broker's append time). The record, not a clock,
// is the reference, so every role and every replay judges an event the same way. A record with
// no timestamp is never judged from the future.
func (p *Plan) Future(eventTime int64, record time.Time) bool {
	return windows.FromFuture(eventTime, record, p.MaxFutureSkew)
}

// ReservedKey reports whether a key cannot be an entity: goka keeps its table offset under
// "__offset", a partition keeps its own record under its tick key ("abacus-tick-N"), and the
// owner of a rollup key keeps its merged windows under RollupKeyPrefix.
func ReservedKey(k string) bool {
	return k == "__offset" || strings.HasPrefix(k, TickKeyPrefix) || strings.HasPrefix(k, RollupKeyPrefix)
}

// RollupKeyPrefix starts the state keys of rollup keys: RollupKeyPrefix + set + "/" + key.
const RollupKeyPrefix = "abacus-rollup/"

// RollupStateKey is the state key under which the owner of a rollup set's key merges its windows.
func RollupStateKey(set, key string) string { return RollupKeyPrefix + set + "/" + key }

// HasRollups reports whether any set is a rollup.
func (p *Plan) HasRollups() bool {
	for _, s := range p.Sets {
		if s.Rollup != nil {
			return true
		}
	}
	return false
}

// LoopSuffix ends the name of a processor group's loop topic (LoopTopic).
const LoopSuffix = "-loop"

// LoopTopic is the loop topic of a processor group: re-keyed events, rollup partials, progress and
// ticks go through it. Its name is part of a deployment's state: it must never change.
func LoopTopic(group string) string { return group + LoopSuffix }

// VersionsTopic is where a processor group keeps the versions it read of a table (compacted, one
// record per key and version): the table's topic, compacted, keeps only each key's newest value,
// and an event replayed later needs the version valid at its time. Part of a deployment's state:
// the name must never change.
func VersionsTopic(group, table string) string { return group + "-table-" + table }

// TickKeyPrefix starts the keys of the ticks each partition is sent, under which it also keeps
// its own record in the table.
const TickKeyPrefix = "abacus-tick-"

// SetByName returns the set with the given name, or nil.
func (p *Plan) SetByName(name string) *Set {
	for _, s := range p.Sets {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// SourceByTopic returns the source reading topic, or nil.
func (p *Plan) SourceByTopic(topic string) *Source {
	for _, s := range p.Sources {
		if s.Topic == topic {
			return s
		}
	}
	return nil
}

// Compiled holds a Plan inside topology.Topology, which embeds it. Its one method is unexported, so
// users' code, which can name neither this package nor the method, cannot reach the plan, while
// the engine, sinks and query read it through Of with the type checked at compile time (plan
// cannot import topology, which imports plan).
type Compiled struct{ p *Plan }

// Compile wraps p for embedding in topology.Topology.
func Compile(p *Plan) Compiled { return Compiled{p: p} }

func (c Compiled) compiled() *Plan { return c.p }

// Holder is what carries a plan: a *topology.Topology.
type Holder interface{ compiled() *Plan }

// Of returns the plan of a *topology.Topology: nil for a nil or zero one (not made by Build).
func Of(t Holder) *Plan {
	if t == nil {
		return nil
	}
	if v := reflect.ValueOf(t); v.Kind() == reflect.Pointer && v.IsNil() {
		return nil // a nil *topology.Topology: its promoted method would dereference it
	}
	return t.compiled()
}

// Layout is the shape of the plan's state: its sets, in order, with their windows and
// aggregations (names and kinds), in order (state.Entity refers to it by hash).
func (p *Plan) Layout() state.Layout {
	sets := make([]state.LayoutSet, len(p.Sets))
	for i, s := range p.Sets {
		sets[i] = state.LayoutSet{Name: s.Name, Window: LayoutWindow(s)}
		for _, a := range s.Aggs {
			sets[i].Aggs = append(sets[i].Aggs, a.Name)
			sets[i].Kinds = append(sets[i].Kinds, a.Kind)
		}
	}
	return state.NewLayout(sets)
}

// LayoutWindow is what a set's layout says of its windows: WindowName, and, for a rollup set,
// by what it is keyed, so that a set that changes its key is refused at start as one that
// changes its window is (its windows' state cannot be kept).
func LayoutWindow(s *Set) string {
	n := WindowName(s.Window)
	switch {
	case s.Rollup == nil:
		return n
	case s.Rollup.Global():
		return n + " global"
	}
	return n + " by " + s.Rollup.Dimension
}

// WindowName names a window spec so that two specs with one name assign the same windows. The
// name is stored in every partition's layout description (state.LayoutSet.Window) and compared
// at each restart, so it must never change; windows.Spec.String is the form shown to people.
func WindowName(s windows.Spec) string {
	switch s.Kind() {
	case windows.KindHopping:
		return "hopping " + strconv.FormatInt(s.Size(), 10) + " " + strconv.FormatInt(s.Advance(), 10)
	case windows.KindSession:
		return "session " + strconv.FormatInt(s.Gap(), 10)
	}
	return "tumbling " + strconv.FormatInt(s.Size(), 10)
}
