// Package topology is the Go API in which users declare what abacus computes: source topics and
// how to read entity and event time from their events, windows with an explicit grace period, the
// aggregations per window, when totals are emitted and what happens to late and future events.
//
// A declaration is checked as a whole by Builder.Build, which names the field at fault in its
// error; the result, a *Topology, is an immutable description that the processors package runs.
// Its methods describe it (names, topics, sets) but cannot change it: the compiled form the engine
// runs (internal/plan) is out of reach of user code. This package must never talk to Kafka, read a
// clock or hold state: it only describes.
//
//	b := topology.New("sensors")
//	src := topology.NewSource(b, "readings", topology.JSON[Reading](),
//		func(r Reading) string { return r.Device },
//		func(r Reading) time.Time { return time.UnixMilli(r.TS) })
//	src.Aggregate("device-hourly", windows.Tumbling(time.Hour)).Grace(5*time.Minute).
//		Count("events").Max("max_temp", "Temp").Mean("avg_temp", "Temp")
//	topo, err := b.Build()
package topology

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/abacus-stream/abacus/accum"
	"github.com/abacus-stream/abacus/deadletter"
	"github.com/abacus-stream/abacus/internal/plan"
	"github.com/abacus-stream/abacus/windows"
)

// DefaultMaxFutureSkew is how far past its record's timestamp an event time may be before the
// event goes to the dead-letter topic, unless Builder.MaxFutureSkew says otherwise.
const DefaultMaxFutureSkew = 5 * time.Minute

// Defaults of the input limits (Builder.Limits).
const (
	DefaultMaxRecordBytes = 1 << 20 // a record value
	DefaultMaxEntityBytes = 1024    // an entity, which is a key of the state table and of HBase rows
	// DefaultMaxMessageBytes bounds every message abacus writes to Kafka for a record: an
	// entity's state (a changelog message), a dead letter, a late record. It stays below Kafka's
	// default limits (a producer's 1,000,000 bytes, a topic's 1,048,588) with room for the
	// record's framing.
	DefaultMaxMessageBytes = deadletter.DefaultMaxBytes
)

// minMessageBytes is the smallest MaxMessageBytes: a set-aside record's headers (reason, detail,
// source, key) must fit beside some of its value.
const minMessageBytes = 16 << 10

// ErrInvalid is wrapped by every error Build returns.
var ErrInvalid = errors.New("invalid topology")

// Builder collects a topology's declarations. It is not safe for concurrent use.
type Builder struct {
	name       string
	totals     string
	deadLetter string
	late       string
	skew       time.Duration
	maxRecord  int
	maxEntity  int
	maxMessage int
	sources    []sourceDecl
	sets       []setDecl
	tables     []tableDecl
}

// sourceDecl and setDecl let the generic Source and AggregateSet register with the non-generic
// Builder; each compiles itself at Build time.
type sourceDecl interface {
	compile() (*plan.Source, error)
}

type setDecl interface {
	compile(source int) (*plan.Set, error)
	sourceTopic() string
	name() string
	finerName() string // the set a Coarser set is of; "" for others
}

// New starts a topology. The name is also the default goka group, and it prefixes the default
// topic names: <name>-totals, <name>-dead-letter.
func New(name string) *Builder {
	return &Builder{name: name, skew: DefaultMaxFutureSkew, maxRecord: DefaultMaxRecordBytes, maxEntity: DefaultMaxEntityBytes,
		maxMessage: DefaultMaxMessageBytes}
}

// TotalsTopic sets the topic the window totals go to (default <name>-totals).
func (b *Builder) TotalsTopic(topic string) *Builder { b.totals = topic; return b }

// DeadLetterTopic sets the topic for undecodable events and events too far in the future
// (default <name>-dead-letter).
func (b *Builder) DeadLetterTopic(topic string) *Builder { b.deadLetter = topic; return b }

// LateTopic routes events that arrive after their window closed to topic. Without it, late events
// are counted and dropped.
func (b *Builder) LateTopic(topic string) *Builder { b.late = topic; return b }

// MaxFutureSkew sets how far ahead of its record's timestamp (the producer's create time or the
// broker's append time) an event time may be (default DefaultMaxFutureSkew). Later events go to
// the dead-letter topic: one wrong clock must not be able to push stream time forward and close
// every open window. The record, not the processor's clock, is the reference, so the processor,
// the facts sink and any replay judge an event alike.
func (b *Builder) MaxFutureSkew(d time.Duration) *Builder { b.skew = d; return b }

// Limits bounds what a producer can make abacus hold: record values larger than maxRecordBytes
// and entities longer than maxEntityBytes go to the dead-letter topic as too large (defaults
// DefaultMaxRecordBytes and DefaultMaxEntityBytes).
func (b *Builder) Limits(maxRecordBytes, maxEntityBytes int) *Builder {
	b.maxRecord, b.maxEntity = maxRecordBytes, maxEntityBytes
	return b
}

// MaxMessageBytes bounds the messages abacus writes to Kafka for a record (default
// DefaultMaxMessageBytes); keep it below the smallest of the producer's and the topics' limits
// (max.message.bytes). A dead letter or late record that would pass it carries its original value
// cut short, with the header abacus.value-bytes giving the value's length; an event whose applying
// would make its entity's state pass it goes to the dead-letter topic as too large: a state the
// changelog refuses would stop the processor.
func (b *Builder) MaxMessageBytes(n int) *Builder { b.maxMessage = n; return b }

// Topology is a checked, immutable topology, ready for processors.New. Its methods describe it.
// Only Builder.Build makes one: the methods of a zero Topology describe an empty topology, and
// processors.New, sinks and query refuse it.
type Topology struct {
	// Compiled carries the plan the engine and sinks run to abacus's own packages (plan.Of);
	// nothing outside the module can read it.
	plan.Compiled
}

// empty is what a zero Topology describes.
var empty = &plan.Plan{}

// pl is the topology's plan; empty for a nil or zero Topology, so that describing one does not
// panic.
func (t *Topology) pl() *plan.Plan {
	if t == nil {
		return empty
	}
	if p := plan.Of(t); p != nil {
		return p
	}
	return empty
}

// Name is the topology's name: the default processor group and topic prefix.
func (t *Topology) Name() string { return t.pl().Name }

// TotalsTopic is the topic the window totals go to.
func (t *Topology) TotalsTopic() string { return t.pl().TotalsTopic }

// DeadLetterTopic is the topic of records that cannot be processed, with their reasons.
func (t *Topology) DeadLetterTopic() string { return t.pl().DeadLetter }

// LateTopic is the topic late events are routed to, or "" when they are counted and dropped.
func (t *Topology) LateTopic() string { return t.pl().LateTopic }

// MaxFutureSkew is how far ahead an event time may be before the event is dead-lettered.
func (t *Topology) MaxFutureSkew() time.Duration { return t.pl().MaxFutureSkew }

// SourceInfo describes a source topic.
type SourceInfo struct {
	Topic       string
	Repartition bool     // the record key is not the entity: events are re-keyed by entity
	Sets        []string // the aggregate sets it feeds
}

// Sources describes the source topics, in declaration order.
func (t *Topology) Sources() []SourceInfo {
	out := make([]SourceInfo, len(t.pl().Sources))
	for i, s := range t.pl().Sources {
		out[i] = SourceInfo{Topic: s.Topic, Repartition: s.Repartition}
		for _, si := range s.Sets {
			out[i].Sets = append(out[i].Sets, t.pl().Sets[si].Name)
		}
	}
	return out
}

// SourceTopics lists the source topics, in declaration order.
func (t *Topology) SourceTopics() []string {
	out := make([]string, len(t.pl().Sources))
	for i, s := range t.pl().Sources {
		out[i] = s.Topic
	}
	return out
}

// TableTopics lists the topics of the topology's tables (NewTable), in declaration order, each
// once.
func (t *Topology) TableTopics() []string {
	var out []string
	for _, tb := range t.pl().Tables {
		if !slices.Contains(out, tb.Topic) {
			out = append(out, tb.Topic)
		}
	}
	return out
}

// SetInfo describes an aggregate set.
type SetInfo struct {
	Name         string
	Source       string // the source topic
	Window       windows.Spec
	Grace        time.Duration
	Emit         Emission
	Types        []string // event types it takes; empty: all
	Aggregations []string // aggregation names, in declaration order
	// Rollup is set for a set keyed by something other than the source's entity (By, Global).
	Rollup bool
	// Dimension names what the set's keys are: EntityDimension for an entity set, the name
	// given to By for a rollup, "" for a global rollup (whose one key is plan.GlobalKey).
	Dimension string
	// Coarsens names the set this one is a coarser form of (AggregateSet.Coarser); "" for others.
	Coarsens string
	// Kinds are the aggregations' kinds ("count", "sum", "min", "max", "mean", "last",
	// "distinct hll", "quantiles ddsketch ...", "custom ..."), as Aggregations orders them.
	Kinds []string
}

// Sets describes the aggregate sets, in declaration order.
func (t *Topology) Sets() []SetInfo {
	out := make([]SetInfo, len(t.pl().Sets))
	for i, s := range t.pl().Sets {
		out[i] = setInfo(t.pl(), s)
	}
	return out
}

// Set describes the aggregate set called name.
func (t *Topology) Set(name string) (SetInfo, bool) {
	s := t.pl().SetByName(name)
	if s == nil {
		return SetInfo{}, false
	}
	return setInfo(t.pl(), s), true
}

// SetNames lists the aggregate sets' names, in declaration order.
func (t *Topology) SetNames() []string {
	out := make([]string, len(t.pl().Sets))
	for i, s := range t.pl().Sets {
		out[i] = s.Name
	}
	return out
}

func setInfo(p *plan.Plan, s *plan.Set) SetInfo {
	info := SetInfo{Name: s.Name, Source: p.Sources[s.Source].Topic, Window: s.Window,
		Grace: time.Duration(s.Grace) * time.Millisecond, Emit: Emission{mode: s.Emit, every: s.EmitEvery},
		Dimension: EntityDimension}
	if s.Rollup != nil {
		info.Rollup, info.Dimension = true, s.Rollup.Dimension
	}
	for typ := range s.Types {
		info.Types = append(info.Types, typ)
	}
	slices.Sort(info.Types)
	for _, a := range s.Aggs {
		info.Aggregations = append(info.Aggregations, a.Name)
		info.Kinds = append(info.Kinds, a.Kind)
	}
	if s.Finer != nil {
		info.Coarsens = s.Finer.Name
	}
	return info
}

// GlobalKey is the one key of a global rollup (AggregateSet.Global): the entity its totals and
// rows have.
const GlobalKey = plan.GlobalKey

// Topics lists every topic the topology names: its sources, then the totals, dead-letter and (if
// set) late topics, then its tables' topics.
func (t *Topology) Topics() []string {
	if t.pl() == empty {
		return nil
	}
	out := t.SourceTopics()
	out = append(out, t.pl().TotalsTopic, t.pl().DeadLetter)
	if t.pl().LateTopic != "" {
		out = append(out, t.pl().LateTopic)
	}
	for _, tb := range t.TableTopics() {
		if !slices.Contains(out, tb) {
			out = append(out, tb)
		}
	}
	return out
}

// WithTopicNames returns a copy of the topology whose topics are renamed: names maps a topic the
// topology declares (a source, the totals, dead-letter or late topic) to the name it has in one
// environment, and prefix is put before every topic name that names does not map. One compiled
// topology can so run against dev-… and prod-… topics. A name that is not one of the topology's
// topics, or two topics that end up with one name, is an error.
func (t *Topology) WithTopicNames(prefix string, names map[string]string) (*Topology, error) {
	declared := t.Topics()
	var errs []error
	for from, to := range names {
		if !slices.Contains(declared, from) {
			errs = append(errs, fmt.Errorf("%q is not a topic of topology %s (it has %v)", from, t.pl().Name, declared))
		}
		if to == "" {
			errs = append(errs, fmt.Errorf("%q is renamed to an empty name", from))
		}
	}
	rename := func(topic string) string {
		if to, ok := names[topic]; ok {
			return to
		}
		return prefix + topic
	}
	seen := map[string]string{}
	for _, from := range declared {
		to := rename(from)
		if other, dup := seen[to]; dup {
			errs = append(errs, fmt.Errorf("topics %q and %q would both be named %q", other, from, to))
		}
		seen[to] = from
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w %q: topic names: %w", ErrInvalid, t.pl().Name, errors.Join(errs...))
	}
	p := *t.pl()
	p.TotalsTopic, p.DeadLetter = rename(p.TotalsTopic), rename(p.DeadLetter)
	if p.LateTopic != "" {
		p.LateTopic = rename(p.LateTopic)
	}
	p.Sources = make([]*plan.Source, len(t.pl().Sources))
	for i, s := range t.pl().Sources {
		c := *s
		c.Topic = rename(s.Topic)
		p.Sources[i] = &c
	}
	p.Tables = make([]*plan.Table, len(t.pl().Tables))
	for i, tb := range t.pl().Tables {
		c := *tb
		c.Topic = rename(tb.Topic)
		p.Tables[i] = &c
	}
	return &Topology{plan.Compile(&p)}, nil
}

// rollupStateOverhead is what a rollup owner's state holds beside its merged accumulators for one
// window: the window itself, its slots' final markers (a few bytes per source partition) and the
// layout's description, for a group of up to a few hundred partitions.
const rollupStateOverhead = 4 << 10

// fitsMessages refuses a rollup set whose merged accumulators could make its owner's state larger
// than a message: a state the changelog refuses cannot be written, and the window's total would be
// lost. Aggregations without a bound (quantiles over any range, custom ones) are checked when
// the processor merges them.
func fitsMessages(s *plan.Set, maxMessage int) error {
	if s.Rollup == nil {
		return nil
	}
	n := rollupStateOverhead
	for _, a := range s.Aggs {
		n += a.MaxBytes
	}
	if n > maxMessage {
		return fmt.Errorf("aggregate set %q: a rollup's merged state can reach %d bytes (a HyperLogLog alone takes %d), more than MaxMessageBytes %d: raise MaxMessageBytes or drop an aggregation",
			s.Name, n, accum.DistinctMaxBytes, maxMessage)
	}
	return nil
}

// Build checks every declaration and returns the topology, or an error naming each field at fault.
func (b *Builder) Build() (*Topology, error) {
	var errs []error
	if b.name == "" {
		errs = append(errs, errors.New("topology name is empty"))
	}
	if b.skew <= 0 {
		errs = append(errs, fmt.Errorf("MaxFutureSkew must be positive, got %v", b.skew))
	}
	if b.maxRecord <= 0 || b.maxEntity <= 0 {
		errs = append(errs, fmt.Errorf("Limits must be positive, got %d record bytes and %d entity bytes", b.maxRecord, b.maxEntity))
	}
	if b.maxMessage < minMessageBytes {
		errs = append(errs, fmt.Errorf("MaxMessageBytes must be at least %d, got %d", minMessageBytes, b.maxMessage))
	}
	t := &plan.Plan{Name: b.name, TotalsTopic: b.totals, DeadLetter: b.deadLetter, LateTopic: b.late, MaxFutureSkew: b.skew,
		MaxRecordBytes: b.maxRecord, MaxEntityBytes: b.maxEntity, MaxMessageBytes: b.maxMessage}
	if t.TotalsTopic == "" {
		t.TotalsTopic = b.name + "-totals"
	}
	if t.DeadLetter == "" {
		t.DeadLetter = b.name + "-dead-letter"
	}
	if len(b.sources) == 0 {
		errs = append(errs, errors.New("no source declared (use topology.NewSource)"))
	}
	tableNames := map[string]bool{}
	for _, td := range b.tables {
		def, err := td.compile()
		if err == nil && tableNames[def.Name] {
			err = fmt.Errorf("table %q: name declared twice", def.Name)
		}
		if err != nil {
			errs = append(errs, err)
			def = &plan.Table{} // keeps the indexes of the tables after it
		}
		tableNames[def.Name] = true
		t.Tables = append(t.Tables, def)
	}
	topics := map[string]int{}
	for _, s := range b.sources {
		def, err := s.compile()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if _, dup := topics[def.Topic]; dup {
			errs = append(errs, fmt.Errorf("source %q: declared twice", def.Topic))
			continue
		}
		topics[def.Topic] = len(t.Sources)
		t.Sources = append(t.Sources, def)
	}
	names := map[string]bool{}
	for _, s := range b.sets {
		if names[s.name()] {
			errs = append(errs, fmt.Errorf("aggregate set %q: name declared twice", s.name()))
			continue
		}
		names[s.name()] = true
		src, ok := topics[s.sourceTopic()]
		if !ok {
			continue // the source failed to compile and said so
		}
		def, err := s.compile(src)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if err := fitsMessages(def, b.maxMessage); err != nil {
			errs = append(errs, err)
			continue
		}
		if fn := s.finerName(); fn != "" {
			i := slices.IndexFunc(t.Sets, func(f *plan.Set) bool { return f.Name == fn })
			if i < 0 {
				continue // the finer set failed to compile and said so
			}
			def.Finer = t.Sets[i]
		}
		def.Index = uint16(len(t.Sets))
		t.Sets = append(t.Sets, def)
		t.Sources[src].Sets = append(t.Sources[src].Sets, def.Index)
	}
	if len(b.sources) > 0 && len(b.sets) == 0 {
		errs = append(errs, errors.New("no aggregate set declared (use Source.Aggregate)"))
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w %q: %w", ErrInvalid, b.name, errors.Join(errs...))
	}
	return &Topology{plan.Compile(t)}, nil
}
