package query

import (
	"context"
	"sync"
)

// DefaultMaxScans is how many window scans a reader runs at once, over all requests.
const DefaultMaxScans = 16

// scanSlots share a reader's concurrent scans among the requests that want them. A freed slot
// goes to the waiting request that has taken the fewest so far, the oldest first: a one-entity
// panel's scan waits for one scan to end, not behind every scan of the fleet panels that asked
// before it (with a first-come queue, sixteen dashboards put a one-entity panel behind a hundred
// scans). Counting the scans taken, not those held, matters between a fleet request's scans: one
// that holds none for a moment has still taken dozens, and a one-entity panel goes first.
type scanSlots struct {
	mu      sync.Mutex
	free    int
	waiting []*slotWaiter
}

// slotUser is one request: the scans it holds, and how many it has taken in all.
type slotUser struct{ held, taken int }

type slotWaiter struct {
	u     *slotUser
	ready chan struct{}
}

func newScanSlots(n int) *scanSlots {
	if n <= 0 {
		n = DefaultMaxScans
	}
	return &scanSlots{free: n}
}

// acquire takes a slot for u, waiting while none is free; it fails only when ctx ends first.
func (s *scanSlots) acquire(ctx context.Context, u *slotUser) error {
	s.mu.Lock()
	if s.free > 0 {
		s.free--
		u.held++
		u.taken++
		s.mu.Unlock()
		return nil
	}
	w := &slotWaiter{u: u, ready: make(chan struct{})}
	s.waiting = append(s.waiting, w)
	s.mu.Unlock()
	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
		s.mu.Lock()
		for i, x := range s.waiting {
			if x == w {
				s.waiting = append(s.waiting[:i], s.waiting[i+1:]...)
				s.mu.Unlock()
				return ctx.Err()
			}
		}
		s.mu.Unlock()
		// Granted meanwhile: give it back.
		s.release(u)
		return ctx.Err()
	}
}

// release gives back a slot of u, to the waiting request that has taken the fewest.
func (s *scanSlots) release(u *slotUser) {
	s.mu.Lock()
	defer s.mu.Unlock()
	u.held--
	if len(s.waiting) == 0 {
		s.free++
		return
	}
	best := 0
	for i, w := range s.waiting {
		if w.u.taken < s.waiting[best].u.taken {
			best = i
		}
	}
	w := s.waiting[best]
	s.waiting = append(s.waiting[:best], s.waiting[best+1:]...)
	w.u.held++
	w.u.taken++
	close(w.ready)
}

// slotUserKey carries a request's slotUser, so that the scans of one request (Many's) count as
// one user.
type slotUserKey struct{}

// requestSlots is ctx with the request's slot user, made when ctx has none.
func requestSlots(ctx context.Context) (context.Context, *slotUser) {
	if u, ok := ctx.Value(slotUserKey{}).(*slotUser); ok {
		return ctx, u
	}
	u := &slotUser{}
	return context.WithValue(ctx, slotUserKey{}, u), u
}
