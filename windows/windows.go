// Package windows assigns event times to windows (tumbling, hopping, session) and decides, from a
// partition's stream time and a grace period, whether a window is still open.
//
// It is pure arithmetic on milliseconds: it must never read a clock, touch Kafka or keep state, so
// that the same events always land in the same windows, on every replay.
package windows

import (
	"errors"
	"fmt"
	"time"
)

// Kind says how a Spec cuts time into windows.
type Kind uint8

// The window kinds.
const (
	KindTumbling Kind = iota + 1 // fixed size, no overlap
	KindHopping                  // fixed size, starting every Advance, overlapping
	KindSession                  // closes after an inactivity gap
)

// String names the kind as the topology API does.
func (k Kind) String() string {
	switch k {
	case KindTumbling:
		return "tumbling"
	case KindHopping:
		return "hopping"
	case KindSession:
		return "session"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Spec describes how events are grouped in time. Build one with Tumbling, Hopping or Session.
type Spec struct {
	kind    Kind
	size    int64 // ms; tumbling and hopping
	advance int64 // ms; hopping (equals size for tumbling)
	gap     int64 // ms; session
}

// Tumbling returns windows of the given size that do not overlap: [k*size, (k+1)*size).
func Tumbling(size time.Duration) Spec {
	return Spec{kind: KindTumbling, size: size.Milliseconds(), advance: size.Milliseconds()}
}

// Hopping returns windows of the given size that start every advance, so an event belongs to
// size/advance windows.
func Hopping(size, advance time.Duration) Spec {
	return Spec{kind: KindHopping, size: size.Milliseconds(), advance: advance.Milliseconds()}
}

// Session returns windows that group events closer than gap to each other: an event at t opens
// [t, t+gap), and windows that overlap merge.
func Session(gap time.Duration) Spec {
	return Spec{kind: KindSession, gap: gap.Milliseconds()}
}

// Kind reports the kind of window.
func (s Spec) Kind() Kind { return s.kind }

// Size is the window length in ms (0 for sessions).
func (s Spec) Size() int64 { return s.size }

// Advance is the distance between window starts in ms (0 for sessions).
func (s Spec) Advance() int64 { return s.advance }

// Gap is the session inactivity gap in ms (0 for other kinds).
func (s Spec) Gap() int64 { return s.gap }

// String describes the spec for people, as the query API and the CLI show it: "tumbling 1m0s",
// "hopping 5m0s every 1m0s", "session, gap 30s". (The stored topology layout names specs its own,
// fixed way, which must never change: see plan.WindowName.)
func (s Spec) String() string {
	ms := func(v int64) string { return (time.Duration(v) * time.Millisecond).String() }
	switch s.kind {
	case KindTumbling:
		return "tumbling " + ms(s.size)
	case KindHopping:
		return "hopping " + ms(s.size) + " every " + ms(s.advance)
	case KindSession:
		return "session, gap " + ms(s.gap)
	}
	return "unknown"
}

// ErrInvalidSpec is wrapped by every error Validate returns.
var ErrInvalidSpec = errors.New("invalid window spec")

// Validate reports a misconfigured spec, naming the offending field.
func (s Spec) Validate() error {
	switch s.kind {
	case KindTumbling:
		if s.size <= 0 {
			return fmt.Errorf("%w: tumbling size must be at least 1ms, got %dms", ErrInvalidSpec, s.size)
		}
	case KindHopping:
		if s.size <= 0 {
			return fmt.Errorf("%w: hopping size must be at least 1ms, got %dms", ErrInvalidSpec, s.size)
		}
		if s.advance <= 0 {
			return fmt.Errorf("%w: hopping advance must be at least 1ms, got %dms", ErrInvalidSpec, s.advance)
		}
		if s.advance > s.size {
			return fmt.Errorf("%w: hopping advance (%dms) is larger than size (%dms): events would fall between windows",
				ErrInvalidSpec, s.advance, s.size)
		}
	case KindSession:
		if s.gap <= 0 {
			return fmt.Errorf("%w: session gap must be at least 1ms, got %dms", ErrInvalidSpec, s.gap)
		}
	default:
		return fmt.Errorf("%w: no window kind (use windows.Tumbling, Hopping or Session)", ErrInvalidSpec)
	}
	return nil
}

// Window is a half-open interval of event time [Start, End) in ms since the Unix epoch.
type Window struct {
	Start int64
	End   int64
}

// Contains reports whether event time t falls in the window.
func (w Window) Contains(t int64) bool { return w.Start <= t && t < w.End }

// Overlaps reports whether two windows share any instant.
func (w Window) Overlaps(o Window) bool { return w.Start < o.End && o.Start < w.End }

// ClosesAt is the stream time at which the window closes: its end plus grace.
func (w Window) ClosesAt(grace int64) int64 { return w.End + grace }

// Closed reports whether the window is closed at the given stream time: stream time has reached
// its end plus grace, so no event may change it any more.
func (w Window) Closed(grace, streamTime int64) bool { return streamTime >= w.ClosesAt(grace) }

// floorDiv divides rounding towards negative infinity, so times before 1970 still land in the
// window that contains them.
func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

// Assign appends to dst the windows that event time t belongs to, oldest start first. For
// sessions it appends the single window [t, t+gap) that the event opens before any merge.
func (s Spec) Assign(t int64, dst []Window) []Window {
	switch s.kind {
	case KindTumbling:
		start := floorDiv(t, s.size) * s.size
		return append(dst, Window{Start: start, End: start + s.size})
	case KindHopping:
		last := floorDiv(t, s.advance) * s.advance
		first := last
		for first-s.advance > t-s.size {
			first -= s.advance
		}
		for start := first; start <= last; start += s.advance {
			dst = append(dst, Window{Start: start, End: start + s.size})
		}
		return dst
	case KindSession:
		return append(dst, Window{Start: t, End: t + s.gap})
	}
	return dst
}

// MergeSession returns the session window that results from adding w to the open sessions
// existing, and the indexes of the existing sessions it absorbs (they must be merged into the
// result and removed). Sessions merge when they overlap: two events closer than the gap share a
// session.
func MergeSession(existing []Window, w Window) (Window, []int) {
	var absorbed []int
	merged := w
	// One pass is not enough when w bridges two sessions that only overlap the grown result, so
	// repeat until nothing more joins.
	for changed := true; changed; {
		changed = false
		for i, e := range existing {
			if contains(absorbed, i) || !e.Overlaps(merged) {
				continue
			}
			absorbed = append(absorbed, i)
			merged.Start = min(merged.Start, e.Start)
			merged.End = max(merged.End, e.End)
			changed = true
		}
	}
	return merged, absorbed
}

func contains(xs []int, x int) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

// FromFuture reports whether an event time lies further ahead than skew of its record's
// timestamp (the producer's create time or the broker's append time). The record, not a clock, is
// the reference, so every role that reads the record, and every replay of it, judges the event
// alike. A record with no timestamp (zero or negative) is never judged from the future.
func FromFuture(eventTime int64, recordTime time.Time, skew time.Duration) bool {
	if recordTime.IsZero() || recordTime.UnixMilli() <= 0 {
		return false
	}
	return eventTime > recordTime.Add(skew).UnixMilli()
}
