// Package topology is the Go API in which users declare what abacus computes: source topics and
// how to read entity and event time from their events, windows with an explicit grace period, the
// aggregations per window, when totals are emitted and what happens to late and future events.
//
// A declaration is checked as a whole by Builder.Build, which names the field at fault in its
// error; the result, a *Topology, is an immutable description that the processors package runs.
// This package must never talk to Kafka, read a clock or hold state: it only describes.
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
	"time"

	"github.com/lovoo/goka"
)

// DefaultMaxFutureSkew is how far past the wall clock an event time may be before the event goes
// to the dead-letter topic, unless Builder.MaxFutureSkew says otherwise.
const DefaultMaxFutureSkew = 5 * time.Minute

// ErrInvalid is wrapped by every error Build returns.
var ErrInvalid = errors.New("invalid topology")

// Builder collects a topology's declarations. It is not safe for concurrent use.
type Builder struct {
	name       string
	totals     string
	deadLetter string
	late       string
	skew       time.Duration
	sources    []sourceDecl
	sets       []setDecl
	errs       []error
}

// sourceDecl and setDecl let the generic Source and AggregateSet register with the non-generic
// Builder; each compiles itself at Build time.
type sourceDecl interface {
	compile() (*SourceDef, error)
}

type setDecl interface {
	compile(source int) (*SetDef, error)
	sourceTopic() string
	name() string
}

// New starts a topology. The name is also the default goka group, and it prefixes the default
// topic names: <name>-totals, <name>-dead-letter.
func New(name string) *Builder {
	return &Builder{name: name, skew: DefaultMaxFutureSkew}
}

// TotalsTopic sets the topic the window totals go to (default <name>-totals).
func (b *Builder) TotalsTopic(topic string) *Builder { b.totals = topic; return b }

// DeadLetterTopic sets the topic for undecodable events and events too far in the future
// (default <name>-dead-letter).
func (b *Builder) DeadLetterTopic(topic string) *Builder { b.deadLetter = topic; return b }

// LateTopic routes events that arrive after their window closed to topic. Without it, late events
// are counted and dropped.
func (b *Builder) LateTopic(topic string) *Builder { b.late = topic; return b }

// MaxFutureSkew sets how far ahead of the processor's wall clock an event time may be (default
// DefaultMaxFutureSkew). Later events go to the dead-letter topic: one wrong clock must not be
// able to push stream time forward and close every open window.
func (b *Builder) MaxFutureSkew(d time.Duration) *Builder { b.skew = d; return b }

func (b *Builder) errorf(format string, args ...any) {
	b.errs = append(b.errs, fmt.Errorf(format, args...))
}

// Topology is a checked, immutable topology, ready for processors.New.
type Topology struct {
	Name          string
	TotalsTopic   string
	DeadLetter    string
	LateTopic     string // empty: late events are dropped
	MaxFutureSkew time.Duration
	Sources       []*SourceDef
	Sets          []*SetDef
}

// Build checks every declaration and returns the topology, or an error naming each field at fault.
func (b *Builder) Build() (*Topology, error) {
	errs := append([]error(nil), b.errs...)
	if b.name == "" {
		errs = append(errs, errors.New("topology name is empty"))
	}
	if b.skew <= 0 {
		errs = append(errs, fmt.Errorf("MaxFutureSkew must be positive, got %v", b.skew))
	}
	t := &Topology{Name: b.name, TotalsTopic: b.totals, DeadLetter: b.deadLetter, LateTopic: b.late, MaxFutureSkew: b.skew}
	if t.TotalsTopic == "" {
		t.TotalsTopic = b.name + "-totals"
	}
	if t.DeadLetter == "" {
		t.DeadLetter = b.name + "-dead-letter"
	}
	if len(b.sources) == 0 {
		errs = append(errs, errors.New("no source declared (use topology.NewSource)"))
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
	return t, nil
}

// Event is a decoded source event as the engine sees it, type-erased.
type Event = any

// SourceDef is a compiled source: how to decode its records and read entity, event time and type.
type SourceDef struct {
	Topic string
	// Decode turns a record value into an event; an error sends the record to the dead-letter topic.
	Decode func([]byte) (Event, error)
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
}

// goka codecs are accepted for sources; this keeps the import explicit in the API.
var _ goka.Codec = Raw()
