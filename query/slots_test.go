package query

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/abacus-stream/abacus/store"
	"golang.org/x/sync/errgroup"
)

// TestScanSlotsFavourSmallRequests: with every slot held by two fleet requests and more of their
// scans waiting, a freed slot goes to a request that holds none, though it asked last; then the
// fleet requests take turns by what they hold. A first-come queue would serve the fleet's
// waiting scans first.
func TestScanSlotsFavourSmallRequests(t *testing.T) {
	s := newScanSlots(4)
	ctx := context.Background()
	fleetA, fleetB, panel := &slotUser{}, &slotUser{}, &slotUser{}
	for _, u := range []*slotUser{fleetA, fleetA, fleetB, fleetB} {
		if err := s.acquire(ctx, u); err != nil {
			t.Fatal(err)
		}
	}
	got := make(chan *slotUser, 8)
	wait := func(u *slotUser) {
		go func() {
			if err := s.acquire(ctx, u); err == nil {
				got <- u
			}
		}()
		time.Sleep(20 * time.Millisecond) // queued in this order
	}
	wait(fleetA)
	wait(fleetA)
	wait(fleetB)
	wait(panel)
	s.release(fleetA) // fleetA 1, fleetB 2, panel 0: the panel first
	if u := <-got; u != panel {
		t.Fatalf("the freed slot went to a request holding %d, not to the one holding none", u.held)
	}
	s.release(fleetB) // fleetA 1, fleetB 1, panel 1: the oldest waiter, fleetA's
	if u := <-got; u != fleetA {
		t.Fatal("among equals the oldest waiter did not go first")
	}
	s.release(panel) // fleetA 2, fleetB 1: fleetB
	if u := <-got; u != fleetB {
		t.Fatal("the request holding fewer did not go first")
	}

	// A waiter whose context ends leaves the queue, and the slot it would have had stays free.
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	late := &slotUser{}
	go func() { done <- s.acquire(cctx, late) }()
	time.Sleep(20 * time.Millisecond)
	cancel()
	if err := <-done; err == nil {
		t.Fatal("acquire returned nil after its context ended without a slot")
	}
	s.release(fleetB) // goes to fleetA's last waiter, not to the cancelled one
	if u := <-got; u != fleetA {
		t.Fatal("a slot went to a cancelled waiter")
	}
	if late.held != 0 {
		t.Fatalf("a cancelled waiter holds %d slots", late.held)
	}
}

// countingScans is a source whose scans find nothing, slowly, counting how many run at once.
type countingScans struct {
	mu        sync.Mutex
	now, most int
}

func (c *countingScans) SaltBuckets(context.Context, string) (int, error) { return 4, nil }

func (c *countingScans) Scan(ctx context.Context, _ store.ScanSpec, _ func([]byte, []store.Cell) bool) error {
	c.mu.Lock()
	c.now++
	c.most = max(c.most, c.now)
	c.mu.Unlock()
	time.Sleep(2 * time.Millisecond)
	c.mu.Lock()
	c.now--
	c.mu.Unlock()
	return ctx.Err()
}

// TestReaderBoundsScans: however many requests come at once, a reader runs at most its
// MaxScans window scans at a time, and every request is answered.
func TestReaderBoundsScans(t *testing.T) {
	src := &countingScans{}
	r, err := NewReader(context.Background(), src, "t", "d")
	if err != nil {
		t.Fatal(err)
	}
	r = r.WithMaxScans(3)
	entities := make([]string, 40)
	for i := range entities {
		entities[i] = fmt.Sprintf("e%02d", i)
	}
	var g errgroup.Group
	for range 4 {
		g.Go(func() error { _, err := r.Many(context.Background(), "minute", entities, Options{}); return err })
		g.Go(func() error { _, err := r.Windows(context.Background(), "minute", "one", Options{}); return err })
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	if src.most > 3 || src.most < 2 {
		t.Fatalf("%d scans ran at once, want at most 3 (and more than one)", src.most)
	}
}

// TestScanSlotsCountWhatWasTaken: a fleet request that holds no slot for a moment, between its
// scans, has still taken many: a freed slot goes to a one-entity request that asked after it.
func TestScanSlotsCountWhatWasTaken(t *testing.T) {
	s := newScanSlots(1)
	ctx := context.Background()
	fleet, other, panel := &slotUser{}, &slotUser{}, &slotUser{}
	for range 5 { // the fleet request's earlier scans, each ended
		if err := s.acquire(ctx, fleet); err != nil {
			t.Fatal(err)
		}
		s.release(fleet)
	}
	if err := s.acquire(ctx, other); err != nil {
		t.Fatal(err)
	}
	got := make(chan *slotUser, 2)
	for _, u := range []*slotUser{fleet, panel} { // the fleet asks first, holding none
		go func() {
			if err := s.acquire(ctx, u); err == nil {
				got <- u
			}
		}()
		time.Sleep(20 * time.Millisecond)
	}
	s.release(other)
	if u := <-got; u != panel {
		t.Fatalf("the freed slot went to the request that had taken %d scans, not to the one that had taken none", u.taken)
	}
}
