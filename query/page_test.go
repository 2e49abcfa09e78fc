package query

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/abacus-stream/abacus/query/internal/querytest"
)

// TestPageCutsAtTheLimitAndSaysWhereTheNextStarts: Reader.Page holds at most Limit windows per
// entity, gives Next only for the entities the limit cut (not for one that has exactly Limit
// windows), and following Next walks every window once, in either order and within From/To.
func TestPageCutsAtTheLimitAndSaysWhereTheNextStarts(t *testing.T) {
	for name, open := range querytest.Stores(t) {
		t.Run(name, func(t *testing.T) {
			st, table := open(t)
			querytest.Seed(t, st, table, 4) // windows 0..9 of ab1 and ab12
			ctx := context.Background()
			r := newReader(t, st, table)
			both := []string{"ab1", "ab12"}
			at := func(min int64) time.Time { return time.UnixMilli(min * minute) }
			page := func(o Options) Page {
				t.Helper()
				p, err := r.Page(ctx, "minute", both, o)
				if err != nil {
					t.Fatal(err)
				}
				return p
			}

			for _, limit := range []int{10, 11, 0} { // exactly the limit, under it, no limit
				if p := page(Options{Limit: limit}); p.Truncated() || p.Next != nil || len(p.Windows["ab1"]) != 10 || len(p.Windows["ab12"]) != 10 {
					t.Fatalf("limit %d of 10 windows: truncated %v, next %+v, %d and %d windows",
						limit, p.Truncated(), p.Next, len(p.Windows["ab1"]), len(p.Windows["ab12"]))
				}
			}

			// One window past the limit: cut, and the next page ends before the last one shown.
			p := page(Options{Limit: 9, NoLive: true})
			if got := starts(p.Windows["ab12"]); got != "9,8,7,6,5,4,3,2,1," || !p.Truncated() || len(p.Next) != 2 {
				t.Fatalf("limit 9 of 10: windows %s, next %+v", got, p.Next)
			}
			if want := (Options{To: at(1), Limit: 9, NoLive: true}); !reflect.DeepEqual(p.Next["ab12"], want) {
				t.Fatalf("limit 9, newest first: next %+v, want %+v", p.Next["ab12"], want)
			}

			// Oldest first the next page starts 1 ms after the last start shown; To stays.
			p = page(Options{Limit: 4, OldestFirst: true, To: at(8)})
			if got := starts(p.Windows["ab1"]); got != "0,1,2,3," {
				t.Fatalf("oldest first: windows %s", got)
			}
			if want := (Options{From: at(3).Add(time.Millisecond), To: at(8), Limit: 4, OldestFirst: true}); !reflect.DeepEqual(p.Next["ab1"], want) {
				t.Fatalf("oldest first: next %+v, want %+v", p.Next["ab1"], want)
			}

			// Following Next walks [From, To) once: the last page holds exactly the limit and
			// has no Next.
			for _, oldest := range []bool{false, true} {
				o := Options{From: at(2), To: at(8), Limit: 3, OldestFirst: oldest}
				var walked string
				for pages := 0; ; pages++ {
					if pages > 3 {
						t.Fatalf("oldest first %v: paging does not end (%s)", oldest, walked)
					}
					p := page(o)
					walked += starts(p.Windows["ab1"]) + "|"
					next, ok := p.Next["ab1"]
					if !ok {
						break
					}
					o = next
				}
				want := "7,6,5,|4,3,2,|"
				if oldest {
					want = "2,3,4,|5,6,7,|"
				}
				if walked != want {
					t.Fatalf("oldest first %v: pages %s, want %s", oldest, walked, want)
				}
			}

			if _, err := r.Page(ctx, "minute", both, Options{Limit: -1}); err == nil {
				t.Fatal("negative limit accepted")
			}
		})
	}
}

// TestPageOfLiveWindows: a window still open in the processors counts towards the limit like a
// stored one, so the page's cut and its next page cover it too.
func TestPageOfLiveWindows(t *testing.T) {
	st, table := querytest.CellStore(t)
	querytest.Seed(t, st, table, 4)
	live := fakeLive{"minute/ab1": {{Entity: "ab1", Set: "minute", Start: time.UnixMilli(10 * minute), End: time.UnixMilli(11 * minute), Revision: 1}}}
	r := newReader(t, st, table).WithLive(live)
	p, err := r.Page(context.Background(), "minute", []string{"ab1"}, Options{Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	if got := starts(p.Windows["ab1"]); got != "10,9," || !p.Windows["ab1"][0].Live {
		t.Fatalf("windows %s", got)
	}
	if got := fmt.Sprint(p.Next["ab1"].To.UnixMilli() / minute); got != "9" {
		t.Fatalf("next page ends before window %s, want 9", got)
	}
}
