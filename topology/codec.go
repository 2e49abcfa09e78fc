package topology

import (
	"bytes"
	"fmt"

	// encoding/json's API and semantics on the implementation of encoding/json/v2 (this module
	// mirrors it until Go 1.27 ships it): the same values accepted and decoded the same way, at
	// about half the CPU and two allocations per event instead of eight. Events are decoded once
	// by the processor and once by the facts sink, so this is a large share of both. From Go
	// 1.27 on, encoding/json itself runs on that implementation: import it again then.
	json "github.com/go-json-experiment/json/v1"
)

// Codec turns a record value into an event and back. It is goka's codec interface, declared here
// so that a topology needs no Kafka client: goka's codecs (goka.Codec) satisfy it as they are.
type Codec interface {
	Encode(value any) (data []byte, err error)
	Decode(data []byte) (value any, err error)
}

// Default limits of JSONCodec: a producer controls every byte of a record, and a record past one
// of them is refused before it is parsed (dead-lettered as undecodable, the limit named).
const (
	// DefaultJSONMaxBytes is Kafka's default largest record (message.max.bytes, about 1 MiB).
	DefaultJSONMaxBytes = 1 << 20
	// DefaultJSONMaxDepth is deeper than any event a device or service sends, and shallow enough
	// that parsing cannot recurse without bound.
	DefaultJSONMaxDepth = 32
	// DefaultJSONMaxFields bounds the object members of one value (all objects together), so that
	// a record of tiny members cannot make a decoder into maps allocate without bound.
	DefaultJSONMaxFields = 10_000
)

// JSONCodec is a Codec that reads and writes E as JSON. Decode refuses, before parsing, a
// value longer than MaxBytes, nested deeper than MaxDepth, or with more than MaxFields object
// members; zero fields mean the defaults above. Encode has no limits: it writes what abacus built.
type JSONCodec[E any] struct {
	MaxBytes  int // default DefaultJSONMaxBytes
	MaxDepth  int // default DefaultJSONMaxDepth: nested objects and arrays
	MaxFields int // default DefaultJSONMaxFields: object members in the whole value
}

// JSON returns the built-in JSON codec for events of type E, with the default limits. For other
// limits, use JSONCodec[E]{MaxBytes: ..., MaxDepth: ..., MaxFields: ...}.
func JSON[E any]() JSONCodec[E] { return JSONCodec[E]{} }

// JSONLimitError is the error of a value past a limit of JSONCodec: Limit names it as the Go
// field (MaxBytes, MaxDepth, MaxFields).
type JSONLimitError struct {
	Limit string
	Max   int
	What  string // e.g. "nesting deeper than 32"
}

func (e *JSONLimitError) Error() string {
	return fmt.Sprintf("%s, over the limit of %d (topology.JSONCodec.%s)", e.What, e.Max, e.Limit)
}

// checkJSON enforces the limits in one pass over the bytes, outside strings; it does not
// validate the JSON (the decoder does).
func (c JSONCodec[E]) checkJSON(data []byte) error {
	maxBytes, maxDepth, maxFields := c.MaxBytes, c.MaxDepth, c.MaxFields
	if maxBytes <= 0 {
		maxBytes = DefaultJSONMaxBytes
	}
	if maxDepth <= 0 {
		maxDepth = DefaultJSONMaxDepth
	}
	if maxFields <= 0 {
		maxFields = DefaultJSONMaxFields
	}
	if len(data) > maxBytes {
		return &JSONLimitError{Limit: "MaxBytes", Max: maxBytes, What: fmt.Sprintf("%d bytes", len(data))}
	}
	depth, fields := 0, 0
	for i := 0; i < len(data); i++ {
		switch data[i] {
		case '"':
			i = stringEnd(data, i+1)
		case '{', '[':
			if depth++; depth > maxDepth {
				return &JSONLimitError{Limit: "MaxDepth", Max: maxDepth, What: fmt.Sprintf("nesting deeper than %d", maxDepth)}
			}
		case '}', ']':
			depth--
		case ':':
			if fields++; fields > maxFields {
				return &JSONLimitError{Limit: "MaxFields", Max: maxFields, What: fmt.Sprintf("more than %d object members", maxFields)}
			}
		}
	}
	return nil
}

// stringEnd is the index of the quote that ends the string whose contents start at i (the first
// quote not escaped by a backslash), or len(data) when there is none.
func stringEnd(data []byte, i int) int {
	start := i
	for {
		j := bytes.IndexByte(data[i:], '"')
		if j < 0 {
			return len(data)
		}
		i += j
		k := i // an odd run of backslashes before the quote escapes it
		for k > start && data[k-1] == '\\' {
			k--
		}
		if (i-k)%2 == 0 {
			return i
		}
		i++
	}
}

// Encode implements Codec.
func (JSONCodec[E]) Encode(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("json encode %T: %w", v, err)
	}
	return b, nil
}

// Decode implements Codec; the value is an E. A value past a limit is refused with a
// *JSONLimitError naming it.
func (c JSONCodec[E]) Decode(data []byte) (any, error) {
	var e E
	if err := c.checkJSON(data); err != nil {
		return nil, fmt.Errorf("json decode %T: %w", e, err)
	}
	if err := json.Unmarshal(data, &e); err != nil {
		return nil, fmt.Errorf("json decode %T: %w", e, err)
	}
	return e, nil
}

// RawCodec passes record values through as []byte.
type RawCodec struct{}

// Raw returns the built-in raw-bytes codec: events are the record values as []byte.
func Raw() RawCodec { return RawCodec{} }

// Encode implements Codec.
func (RawCodec) Encode(v any) ([]byte, error) {
	b, ok := v.([]byte)
	if !ok {
		return nil, fmt.Errorf("raw codec: cannot encode %T, want []byte", v)
	}
	return b, nil
}

// Decode implements Codec. It copies, because the consumer may reuse its buffer.
func (RawCodec) Decode(data []byte) (any, error) { return append([]byte(nil), data...), nil }

var _ Codec = JSONCodec[struct{}]{}
