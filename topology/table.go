package topology

import (
	"fmt"
	"regexp"
	"time"

	"github.com/abacus-stream/abacus/internal/plan"
)

// Defaults of a table's settings.
const (
	// DefaultTableGrace is how long an event waits, at most, for a table that is behind its time.
	DefaultTableGrace = 5 * time.Second
	// DefaultTableHistory is how far back superseded versions are kept: as long as Kafka's default
	// retention, so that a replay of the sources' whole retention finds the versions it needs.
	DefaultTableHistory = 7 * 24 * time.Hour
)

// Table is a declared table of values of type V by key, read from a topic (usually compacted, a
// registry: devices and their region, customers and their plan). Events look it up by their event
// time (Join): each value is valid from its time until its key's next version, so an event sees
// the value its key had when the event happened, live and in any replay alike.
//
// Every processor instance reads the whole table (a "global" table, as goka's lookup tables and
// Kafka Streams' GlobalKTable are), and keeps the versions it read in a compacted topic of its
// group (<group>-table-<name>): compaction of the table's own topic keeps only each key's newest
// value, which a replay of older events could not use.
type Table[V any] struct {
	b         *Builder
	name      string
	topic     string
	codec     Codec
	valueTime func(V) time.Time
	grace     time.Duration
	history   time.Duration
	index     int
}

// NewTable declares a table named name (stable: it names the group's versions topic) read from
// topic, whose record keys are the table's keys and whose values codec decodes into a V. A record
// with no value (a tombstone) deletes its key from the record's time on.
func NewTable[V any](b *Builder, name, topic string, codec Codec) *Table[V] {
	t := &Table[V]{b: b, name: name, topic: topic, codec: codec, grace: DefaultTableGrace, history: DefaultTableHistory, index: len(b.tables)}
	b.tables = append(b.tables, t)
	return t
}

// ValueTime says from when a value is valid: a time the value carries (an "effective from"
// field). By default, its record's timestamp.
func (t *Table[V]) ValueTime(f func(V) time.Time) *Table[V] { t.valueTime = f; return t }

// Grace bounds how long an event waits for the table (default DefaultTableGrace). An event
// waits only while the table has records it has not read yet and none of them is as recent as the
// event: once the table has read every record the broker had, it answers at once. An event that
// waited the whole grace looks the table up as it is, and is counted
// (abacus_table_waits_expired_total).
func (t *Table[V]) Grace(d time.Duration) *Table[V] { t.grace = d; return t }

// History bounds how long superseded versions are kept, in table time (default
// DefaultTableHistory): a version is dropped once a newer version of its key is older than the
// newest value's time less History. An event further back than that (a replay of old events)
// finds the oldest version kept.
func (t *Table[V]) History(d time.Duration) *Table[V] { t.history = d; return t }

// tableName is what a table's name may be: it names a topic.
var tableName = regexp.MustCompile(`^[a-zA-Z0-9._-]{1,100}$`)

func (t *Table[V]) compile() (*plan.Table, error) {
	switch {
	case !tableName.MatchString(t.name):
		return nil, fmt.Errorf("table %q: the name must be 1 to 100 letters, digits, '.', '_' or '-' (it names a topic)", t.name)
	case t.topic == "":
		return nil, fmt.Errorf("table %q: topic is empty", t.name)
	case t.codec == nil:
		return nil, fmt.Errorf("table %q: codec is nil", t.name)
	case t.grace < 0:
		return nil, fmt.Errorf("table %q: Grace must not be negative, got %v", t.name, t.grace)
	case t.history <= 0:
		return nil, fmt.Errorf("table %q: History must be positive, got %v", t.name, t.history)
	}
	codec := t.codec
	def := &plan.Table{Name: t.name, Topic: t.topic, Grace: t.grace, History: t.history,
		Decode: func(b []byte) (any, error) {
			v, err := codec.Decode(b)
			if err != nil {
				return nil, err
			}
			switch x := v.(type) {
			case V:
				return v, nil
			case *V:
				if x != nil {
					return *x, nil
				}
			}
			return nil, fmt.Errorf("codec returned %T, the table declares %T", v, *new(V))
		}}
	if f := t.valueTime; f != nil {
		def.ValueTime = func(v any) int64 { return f(v.(V)).UnixMilli() }
	}
	return def, nil
}

// tableDecl lets the generic Table register with the Builder.
type tableDecl interface {
	compile() (*plan.Table, error)
}

// Join enriches every event of source s from table t: join gets the event, the value t held for
// key(event) at the event's time, and whether it held one (false for a key never seen, or deleted
// at that time), and returns the event the source's aggregate sets see (Where, By, the
// aggregations): typically the event with a field filled in from the value.
//
// What a missing key gives is join's choice, stated in code: a default value, a named bucket
// ("unknown"), or an error, which sends the record to the dead-letter topic with reason
// "unjoined" and the error's text. Joins of one source run in the order they were declared.
// The processor waits for tables at start, as goka does for its lookup tables.
func Join[E, V any](s *Source[E], t *Table[V], key func(E) string, join func(e E, v V, found bool) (E, error)) {
	s.joins = append(s.joins, joinDecl{table: t.index, tableName: t.name, build: func() (plan.Join, error) {
		if key == nil || join == nil {
			return plan.Join{}, fmt.Errorf("source %q: join with table %q: key and join funcs must not be nil", s.topic, t.name)
		}
		if t.b != s.b {
			return plan.Join{}, fmt.Errorf("source %q: join with table %q of another topology", s.topic, t.name)
		}
		return plan.Join{Table: t.index,
			Key: func(e plan.Event) string { return key(e.(E)) },
			Apply: func(e plan.Event, v any, found bool) (plan.Event, error) {
				var val V
				if found {
					val = v.(V)
				}
				out, err := join(e.(E), val, found)
				if err != nil {
					return nil, err
				}
				return out, nil
			}}, nil
	}})
}

// joinDecl is a declared join, built when its source compiles.
type joinDecl struct {
	table     int
	tableName string
	build     func() (plan.Join, error)
}
