package query

import (
	"context"
	"sync"
)

// DefaultMaxScans is how many window scans a reader runs at once, over all requests.
const DefaultMaxScans = 16

// scanSlots share a reader's concurrent scans among the requests that want them. A freed slot
// goes to the waiting request that holds the fewest, the oldest first: a one-entity panel's scan
// waits for one scan to end, not behind every scan of the fleet panels that asked before it
// (with a first-come queue, sixteen dashboards put a one-entity panel behind a hundred scans).
type scanSlots struct {
	mu      sync.Mutex
	free    int
	waiting []*slotWaiter
}

// slotUser is one request: the scans it holds.
type slotUser struct{ held int }

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

// release gives back a slot of u, to the waiting request that holds the fewest.
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
		if w.u.held < s.waiting[best].u.held {
			best = i
		}
	}
	w := s.waiting[best]
	s.waiting = append(s.waiting[:best], s.waiting[best+1:]...)
	w.u.held++
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
