package schema

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/abacus-stream/abacus/totals"
)

// MetaQualifier is the qualifier of a window row's final flag and revision. Aggregate names may not
// start with '_' (ValidAggregateName), so it never meets one.
const MetaQualifier = "_meta"

// ValidAggregateName reports why name cannot qualify an aggregate cell, or nil.
func ValidAggregateName(name string) error {
	if name == "" || name[0] == '_' {
		return fmt.Errorf("aggregate name %q is empty or starts with '_', which is reserved", name)
	}
	return nil
}

// AppendCellValue appends v in the cell value encoding.
func AppendCellValue(b []byte, v totals.Value) ([]byte, error) {
	b = append(b, byte(v.Kind))
	switch v.Kind {
	case totals.KindInt:
		return binary.BigEndian.AppendUint64(b, uint64(v.Int)), nil
	case totals.KindFloat:
		return binary.BigEndian.AppendUint64(b, math.Float64bits(v.Float)), nil
	case totals.KindQuantiles:
		for _, q := range v.Quantiles {
			b = binary.BigEndian.AppendUint64(b, math.Float64bits(q.Q))
			b = binary.BigEndian.AppendUint64(b, math.Float64bits(q.Value))
		}
		return b, nil
	case totals.KindBytes:
		return append(b, v.Bytes...), nil
	}
	return nil, fmt.Errorf("unknown value kind %d", v.Kind)
}

// CellValueLen is how many bytes AppendCellValue appends for v (0 for a kind it refuses).
func CellValueLen(v totals.Value) int {
	switch v.Kind {
	case totals.KindInt, totals.KindFloat:
		return 9
	case totals.KindQuantiles:
		return 1 + 16*len(v.Quantiles)
	case totals.KindBytes:
		return 1 + len(v.Bytes)
	}
	return 0
}

// MetaLen is how many bytes AppendMeta appends.
const MetaLen = 9

// ParseCellValue reads a value written by AppendCellValue.
func ParseCellValue(name string, b []byte) (totals.Value, error) {
	if len(b) == 0 {
		return totals.Value{}, errors.New("schema: empty aggregate cell")
	}
	v := totals.Value{Name: name, Kind: totals.Kind(b[0])}
	b = b[1:]
	switch v.Kind {
	case totals.KindInt, totals.KindFloat:
		if len(b) != 8 {
			return v, fmt.Errorf("schema: aggregate cell %s: %d value bytes, want 8", name, len(b))
		}
		x := binary.BigEndian.Uint64(b)
		if v.Kind == totals.KindInt {
			v.Int = int64(x)
		} else {
			v.Float = math.Float64frombits(x)
		}
	case totals.KindQuantiles:
		if n := len(b) / 16; n > 0 {
			v.Quantiles = make([]totals.Quantile, 0, n)
		}
		var err error
		if v.Quantiles, err = appendQuantiles(v.Quantiles, name, b); err != nil {
			return v, err
		}
	case totals.KindBytes:
		v.Bytes = append([]byte(nil), b...)
	default:
		return v, fmt.Errorf("schema: aggregate cell %s: unknown kind %d", name, v.Kind)
	}
	return v, nil
}

// AppendQuantiles appends the quantiles of a cell of kind totals.KindQuantiles (a value written
// by AppendCellValue) to dst: what ParseCellValue reads, for a reader that keeps many cells'
// quantiles in one array rather than a list per cell.
func AppendQuantiles(dst []totals.Quantile, name string, b []byte) ([]totals.Quantile, error) {
	if len(b) == 0 || totals.Kind(b[0]) != totals.KindQuantiles {
		return dst, fmt.Errorf("schema: aggregate cell %s: not a cell of quantiles", name)
	}
	return appendQuantiles(dst, name, b[1:])
}

func appendQuantiles(dst []totals.Quantile, name string, b []byte) ([]totals.Quantile, error) {
	if len(b)%16 != 0 {
		return dst, fmt.Errorf("schema: aggregate cell %s: %d quantile bytes", name, len(b))
	}
	for ; len(b) > 0; b = b[16:] {
		dst = append(dst, totals.Quantile{
			Q: math.Float64frombits(binary.BigEndian.Uint64(b)), Value: math.Float64frombits(binary.BigEndian.Uint64(b[8:]))})
	}
	return dst, nil
}

// AppendMeta appends a MetaQualifier cell's value.
func AppendMeta(b []byte, final bool, revision uint64) []byte {
	var flags byte
	if final {
		flags = 1
	}
	return binary.BigEndian.AppendUint64(append(b, flags), revision)
}

// ParseMeta reads a MetaQualifier cell.
func ParseMeta(b []byte) (final bool, revision uint64, err error) {
	if len(b) != 9 {
		return false, 0, fmt.Errorf("schema: meta cell of %d bytes, want 9", len(b))
	}
	return b[0]&1 == 1, binary.BigEndian.Uint64(b[1:]), nil
}

// AppendFactQualifier appends the qualifier of a fact cell: the event type and the record's source
// position, type ":" partition ":" offset, so a replay of the record rewrites the same cell and two
// events of one entity at one time never share one.
func AppendFactQualifier(b []byte, eventType string, partition int32, offset int64) []byte {
	b = append(b, eventType...)
	b = append(b, ':')
	b = strconv.AppendInt(b, int64(partition), 10)
	b = append(b, ':')
	return strconv.AppendInt(b, offset, 10)
}

// ParseFactQualifier reads event type, source partition and offset back from a fact qualifier.
// The type may itself hold ':': the last two fields are the position.
func ParseFactQualifier(q []byte) (eventType string, partition int32, offset int64, err error) {
	s := string(q)
	j := strings.LastIndexByte(s, ':')
	i := -1
	if j > 0 {
		i = strings.LastIndexByte(s[:j], ':')
	}
	if i < 0 {
		return "", 0, 0, fmt.Errorf("schema: fact qualifier %q is not type:partition:offset", q)
	}
	p, perr := strconv.ParseInt(s[i+1:j], 10, 32)
	o, oerr := strconv.ParseInt(s[j+1:], 10, 64)
	if perr != nil || oerr != nil || p < 0 || o < 0 {
		return "", 0, 0, fmt.Errorf("schema: fact qualifier %q is not type:partition:offset", q)
	}
	return s[:i], int32(p), o, nil
}
