// Package deadletter is the one format of the records abacus sets aside: dead letters (records no
// role can process, with the reason) and late events (routed to the late topic). The processor and
// both sinks write them through this package, so one consumer reads both topics the same way.
//
// A set-aside record is keyed by the coordinates of the record it stands for (topic/partition@
// offset) and carries only values fixed by that record, by the reason and by who set it aside
// (the group and the record it was processing), never a clock reading or a process name. The
// processor writes each once, even across crashes (it finds what it wrote before, by those
// fields); a sink's repeat after a crash is an identical record, which a compacted topic or a
// consumer drops. The original key, value, timestamp and headers are kept; the Kafka timestamp a
// writer gives it is the time of the write (retention counts from there), the original's is
// HeaderTimestamp.
//
// It is a leaf: it imports nothing from abacus and knows no Kafka client.
package deadletter

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Header names on set-aside records, beside the original record's own headers.
const (
	HeaderFormat    = "abacus.format"    // the version of this format: Format
	HeaderReason    = "abacus.reason"    // a Reason
	HeaderDetail    = "abacus.detail"    // what exactly was wrong, for people
	HeaderSource    = "abacus.source"    // the original record's coordinates, topic/partition@offset
	HeaderKey       = "abacus.key"       // the original record's key (the record's own key is the source)
	HeaderTimestamp = "abacus.timestamp" // the original record's timestamp, ms since the epoch
	HeaderSet       = "abacus.set"       // the aggregate set an event was late for (late records only)
	// HeaderValueBytes is the original value's length, on a record whose value was cut to fit a
	// Kafka message (Record.Fit); absent when the value is whole.
	HeaderValueBytes = "abacus.value-bytes"
	// HeaderGroup and HeaderBy say who set the record aside: the processor group, and the record
	// whose callback wrote it (topic/partition@offset; a loop record's for a re-keyed event, not
	// the source's). After a crash the processor reads them back to find what it already wrote
	// for the records it processes again. Absent on a sink's records.
	HeaderGroup = "abacus.group"
	HeaderBy    = "abacus.by"
)

// Format is the version of the set-aside record format that RecordHeaders writes (in
// HeaderFormat). Records written before it was there have no such header and are read as version 1.
// HeaderGroup and HeaderBy came later without a version change: they are optional, and a reader
// that does not know them takes them for original headers.
const Format = "1"

// Reason says why a record was set aside.
type Reason string

// The reasons.
const (
	Undecodable  Reason = "undecodable"    // the value cannot be decoded as the source's events
	Future       Reason = "future"         // the event time is further ahead than MaxFutureSkew
	EntityNotKey Reason = "entity-not-key" // the record key is not the entity, and the source does not repartition
	NoEntity     Reason = "no-entity"      // the record has no key, or its event has an empty entity
	ReservedKey  Reason = "reserved-key"   // the entity is a key the state store keeps for itself
	TooLarge     Reason = "too-large"      // the record passes a size limit
	Panic        Reason = "panic"          // user code (decoder, extractor, aggregation) panicked on it
	UserError    Reason = "user-error"     // user code (an aggregation's Decode) returned an error on its state
	Rejected     Reason = "rejected"       // the store refused its cells for good (no such family, too large)
	Invalid      Reason = "invalid"        // a totals record that is not valid
	Late         Reason = "late"           // the event came after its windows closed (late topic)
	Unjoined     Reason = "unjoined"       // a join with a table refused the event (a missing key, by the topology's choice)
)

// Source is the position of the original record.
type Source struct {
	Topic     string
	Partition int32
	Offset    int64
}

// String is topic/partition@offset, the key of the set-aside record.
func (s Source) String() string {
	return s.Topic + "/" + strconv.FormatInt(int64(s.Partition), 10) + "@" + strconv.FormatInt(s.Offset, 10)
}

// ParseSource reads a Source written by String.
func ParseSource(v string) (Source, error) {
	at := strings.LastIndexByte(v, '@')
	slash := strings.LastIndexByte(v[:max(at, 0)], '/')
	if at < 0 || slash < 0 {
		return Source{}, fmt.Errorf("deadletter: source %q is not topic/partition@offset", v)
	}
	p, err1 := strconv.ParseInt(v[slash+1:at], 10, 32)
	o, err2 := strconv.ParseInt(v[at+1:], 10, 64)
	if err1 != nil || err2 != nil || slash == 0 {
		return Source{}, fmt.Errorf("deadletter: source %q is not topic/partition@offset", v)
	}
	return Source{Topic: v[:slash], Partition: int32(p), Offset: o}, nil
}

// Header is one record header.
type Header struct {
	Key   string
	Value []byte
}

// Record is a set-aside record: the original record and why it was set aside.
type Record struct {
	Source Source
	Reason Reason
	Detail string
	Set    string // the aggregate set: a late record's, or a window's whose final total user code failed

	// The original record.
	Key       []byte
	Value     []byte
	Timestamp time.Time
	Headers   []Header
	// ValueBytes is the original value's length when Value was cut (Fit), else 0.
	ValueBytes int

	// Group and By say which processor group set the record aside, processing which record
	// (HeaderGroup, HeaderBy); empty on a sink's.
	Group string
	By    Source
}

// Identity is what makes two set-aside records the same one: the topic they go to, their key (the
// source), reason and set. A processor that finds a record of this identity in topic does not
// write it again.
func (r *Record) Identity(topic string) string {
	return topic + "\x00" + r.Source.String() + "\x00" + string(r.Reason) + "\x00" + r.Set
}

// DefaultMaxBytes is the size a set-aside record is cut to (Fit) unless its writer is told
// otherwise: below Kafka's default limits (a producer's 1,000,000 bytes, a topic's 1,048,588),
// with room for the record's framing.
const DefaultMaxBytes = 900 << 10

// recordOverhead is what a Kafka record adds to its key, value and headers, at most: its length,
// attributes, timestamp and offset deltas, and the lengths of key, value, header count and each
// header's key and value as varints; and its share of the batch header.
const (
	recordOverhead = 96
	headerOverhead = 10
)

// Size is the most the record takes in a Kafka message, as produced (RecordKey, Value,
// RecordHeaders).
func (r *Record) Size() int {
	n := recordOverhead + len(r.RecordKey()) + len(r.Value)
	for _, h := range r.RecordHeaders() {
		n += headerOverhead + len(h.Key) + len(h.Value)
	}
	return n
}

// Fit cuts the record down to at most limit bytes as a Kafka message (Size), so that setting a
// record aside never fails for its size: first the detail to 1 KiB, then the value, whose
// original length HeaderValueBytes then gives, then the original headers, last first. It reports
// whether it cut anything. A limit too small for what is left (abacus's own headers and the
// original key) leaves the record larger than limit.
func (r *Record) Fit(limit int) bool {
	over := r.Size() - limit
	if over <= 0 {
		return false
	}
	if len(r.Detail) > 1024 {
		r.Detail = r.Detail[:1024]
		over = r.Size() - limit
	}
	if over > 0 && len(r.Value) > 0 {
		if r.ValueBytes == 0 {
			r.ValueBytes = len(r.Value)
			over = r.Size() - limit // the header that says so
		}
		r.Value = r.Value[:max(0, len(r.Value)-over)]
		over = r.Size() - limit
	}
	for over > 0 && len(r.Headers) > 0 {
		r.Headers = r.Headers[:len(r.Headers)-1]
		over = r.Size() - limit
	}
	return true
}

// RecordKey is the key to produce the record with: its source.
func (r *Record) RecordKey() []byte { return []byte(r.Source.String()) }

// RecordHeaders are the headers to produce the record with: abacus's, then the original ones.
func (r *Record) RecordHeaders() []Header {
	h := make([]Header, 0, 9+len(r.Headers))
	h = append(h,
		Header{HeaderFormat, []byte(Format)},
		Header{HeaderReason, []byte(r.Reason)},
		Header{HeaderDetail, []byte(r.Detail)},
		Header{HeaderSource, []byte(r.Source.String())},
		Header{HeaderKey, r.Key},
		Header{HeaderTimestamp, strconv.AppendInt(nil, r.Timestamp.UnixMilli(), 10)},
	)
	if r.Set != "" {
		h = append(h, Header{HeaderSet, []byte(r.Set)})
	}
	if r.ValueBytes > 0 {
		h = append(h, Header{HeaderValueBytes, strconv.AppendInt(nil, int64(r.ValueBytes), 10)})
	}
	if r.Group != "" {
		h = append(h, Header{HeaderGroup, []byte(r.Group)}, Header{HeaderBy, []byte(r.By.String())})
	}
	return append(h, r.Headers...)
}

// Parse reads a set-aside record back from what was produced.
func Parse(value []byte, headers []Header) (Record, error) {
	r := Record{Value: value}
	var src string
	for _, h := range headers {
		switch h.Key {
		case HeaderFormat:
			if string(h.Value) != Format {
				return r, fmt.Errorf("deadletter: format version %q unknown (written by a newer abacus?), this one reads %s", h.Value, Format)
			}
		case HeaderReason:
			r.Reason = Reason(h.Value)
		case HeaderDetail:
			r.Detail = string(h.Value)
		case HeaderSource:
			src = string(h.Value)
		case HeaderKey:
			r.Key = h.Value
		case HeaderTimestamp:
			ms, err := strconv.ParseInt(string(h.Value), 10, 64)
			if err != nil {
				return r, fmt.Errorf("deadletter: header %s %q is not ms", HeaderTimestamp, h.Value)
			}
			r.Timestamp = time.UnixMilli(ms)
		case HeaderSet:
			r.Set = string(h.Value)
		case HeaderValueBytes:
			n, err := strconv.Atoi(string(h.Value))
			if err != nil || n < 0 {
				return r, fmt.Errorf("deadletter: header %s %q is not a length", HeaderValueBytes, h.Value)
			}
			r.ValueBytes = n
		case HeaderGroup:
			r.Group = string(h.Value)
		case HeaderBy:
			by, err := ParseSource(string(h.Value))
			if err != nil {
				return r, fmt.Errorf("deadletter: header %s: %w", HeaderBy, err)
			}
			r.By = by
		default:
			r.Headers = append(r.Headers, h)
		}
	}
	if r.Reason == "" || src == "" {
		return r, errors.New("deadletter: record without abacus.reason or abacus.source headers")
	}
	var err error
	r.Source, err = ParseSource(src)
	return r, err
}

// Error is an error that says why its record is set aside.
type Error struct {
	Reason Reason
	Err    error
}

func (e *Error) Error() string { return string(e.Reason) + ": " + e.Err.Error() }

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Errorf returns an error for a record set aside for reason.
func Errorf(reason Reason, format string, args ...any) error {
	return &Error{Reason: reason, Err: fmt.Errorf(format, args...)}
}

// ReasonOf returns the reason an error carries (see Error), or fallback.
func ReasonOf(err error, fallback Reason) Reason {
	var e *Error
	if errors.As(err, &e) {
		return e.Reason
	}
	return fallback
}
