package query

import (
	"fmt"
	"strconv"
	"time"
)

// ParseTime reads RFC 3339, milliseconds since the epoch, or a duration relative to now ("-6h");
// "" is the zero time.
func ParseTime(v string, now time.Time) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	if ms, err := strconv.ParseInt(v, 10, 64); err == nil {
		return time.UnixMilli(ms), nil
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(v); err == nil {
		return now.Add(d), nil
	}
	return time.Time{}, fmt.Errorf("%q is not RFC 3339, milliseconds since the epoch, or a duration like -6h", v)
}
