package topology

import (
	"fmt"
	"time"

	"github.com/abacus-stream/abacus/internal/plan"
	"github.com/abacus-stream/abacus/windows"
)

// Source is a declared input topic whose events are of type E.
type Source[E any] struct {
	b           *Builder
	topic       string
	codec       Codec
	entity      func(E) string
	eventTime   func(E) time.Time
	eventType   func(E) string
	repartition bool
	joins       []joinDecl
}

// NewSource declares that topic carries events of type E, decoded by codec (JSON, Raw or any Codec,
// goka's included, whose Decode returns an E), aggregated per entity(e) at eventTime(e). Event time always
// comes from the event, never from a clock, so a replay lands every event in the same window.
//
// By default the record key must be the entity (the topic is partitioned by entity); otherwise
// call Repartition.
func NewSource[E any](b *Builder, topic string, codec Codec, entity func(E) string, eventTime func(E) time.Time) *Source[E] {
	s := &Source[E]{b: b, topic: topic, codec: codec, entity: entity, eventTime: eventTime}
	b.sources = append(b.sources, s)
	return s
}

// EventType declares how to read the event's type, which aggregate sets can filter on (Types).
func (s *Source[E]) EventType(f func(E) string) *Source[E] { s.eventType = f; return s }

// Repartition says the record key is not the entity: events are re-keyed by entity through the
// processor's loop topic, which carries their source topic, partition and offset so that a replay
// is still recognised and never counted twice.
func (s *Source[E]) Repartition() *Source[E] { s.repartition = true; return s }

// Aggregate declares an aggregate set over this source: one window spec, its grace period, and
// the aggregations computed per entity and window. Its name must be unique in the topology; it
// appears in every total it emits.
func (s *Source[E]) Aggregate(name string, spec windows.Spec) *AggregateSet[E] {
	a := &AggregateSet[E]{src: s, setName: name, spec: spec, emit: FinalOnly()}
	s.b.sets = append(s.b.sets, a)
	return a
}

func (s *Source[E]) compile() (*plan.Source, error) {
	switch {
	case s.topic == "":
		return nil, fmt.Errorf("source: topic is empty")
	case s.codec == nil:
		return nil, fmt.Errorf("source %q: codec is nil", s.topic)
	case s.entity == nil:
		return nil, fmt.Errorf("source %q: entity func is nil", s.topic)
	case s.eventTime == nil:
		return nil, fmt.Errorf("source %q: event time func is nil", s.topic)
	}
	codec, entity, eventTime, eventType := s.codec, s.entity, s.eventTime, s.eventType
	def := &plan.Source{
		Topic:       s.topic,
		Repartition: s.repartition,
		Decode: func(b []byte) (event, error) {
			v, err := codec.Decode(b)
			if err != nil {
				return nil, err
			}
			switch e := v.(type) {
			case E:
				return v, nil // already boxed: returning e would copy the event into a new box
			case *E:
				if e != nil {
					return *e, nil
				}
			}
			return nil, fmt.Errorf("codec returned %T, the source declares %T", v, *new(E))
		},
		Encode: func(e event) ([]byte, error) {
			if _, ok := e.(E); !ok {
				return nil, fmt.Errorf("source %q takes events of type %T, got %T", s.topic, *new(E), e)
			}
			return codec.Encode(e)
		},
		Entity:    func(e event) string { return entity(e.(E)) },
		EventTime: func(e event) int64 { return eventTime(e.(E)).UnixMilli() },
		Type:      func(event) string { return "" },
	}
	if eventType != nil {
		def.Type = func(e event) string { return eventType(e.(E)) }
	}
	for _, j := range s.joins {
		pj, err := j.build()
		if err != nil {
			return nil, err
		}
		def.Joins = append(def.Joins, pj)
	}
	return def, nil
}
