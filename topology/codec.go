package topology

import (
	"encoding/json"
	"fmt"

	"github.com/lovoo/goka"
)

// JSONCodec is a goka codec that reads and writes E as JSON.
type JSONCodec[E any] struct{}

// JSON returns the built-in JSON codec for events of type E.
func JSON[E any]() JSONCodec[E] { return JSONCodec[E]{} }

// Encode implements goka.Codec.
func (JSONCodec[E]) Encode(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("json encode %T: %w", v, err)
	}
	return b, nil
}

// Decode implements goka.Codec; the value is an E.
func (JSONCodec[E]) Decode(data []byte) (any, error) {
	var e E
	if err := json.Unmarshal(data, &e); err != nil {
		return nil, fmt.Errorf("json decode %T: %w", e, err)
	}
	return e, nil
}

// RawCodec passes record values through as []byte.
type RawCodec struct{}

// Raw returns the built-in raw-bytes codec: events are the record values as []byte.
func Raw() RawCodec { return RawCodec{} }

// Encode implements goka.Codec.
func (RawCodec) Encode(v any) ([]byte, error) {
	b, ok := v.([]byte)
	if !ok {
		return nil, fmt.Errorf("raw codec: cannot encode %T, want []byte", v)
	}
	return b, nil
}

// Decode implements goka.Codec. It copies, because the consumer may reuse its buffer.
func (RawCodec) Decode(data []byte) (any, error) { return append([]byte(nil), data...), nil }

var _ goka.Codec = JSONCodec[struct{}]{}
