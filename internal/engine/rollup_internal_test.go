package engine

import (
	"testing"
	"time"

	"github.com/abacus-stream/abacus/internal/plan"
	"github.com/abacus-stream/abacus/windows"
)

// TestNextRollupClose: progress is sent when it passes a rollup window's close; the next close
// after x is the smallest end plus grace past x over the rollup sets (entity sets do not count).
func TestNextRollupClose(t *testing.T) {
	e := &Engine{plan: &plan.Plan{Sets: []*plan.Set{
		{Window: windows.Tumbling(time.Minute), Grace: 10_000, Rollup: &plan.Rollup{}},
		{Window: windows.Hopping(2*time.Minute, 30*time.Second), Grace: 5_000, Rollup: &plan.Rollup{Dimension: "r"}},
		{Window: windows.Tumbling(time.Second), Grace: 0}, // an entity set
	}}}
	for _, c := range []struct{ x, want int64 }{
		{0, 5_000},         // hopping [-120s, 0) closes at 5 s
		{5_000, 10_000},    // tumbling [-60s, 0) at 10 s
		{10_000, 35_000},   // hopping [-90s, 30s) at 35 s
		{69_999, 70_000},   // tumbling [0, 60s) at 70 s
		{-70_000, -55_000}, // before the epoch: hopping [-180s, -60s) at -55 s
		{-50_001, -50_000}, // tumbling [-120s, -60s) at -50 s
	} {
		if got := e.nextRollupClose(c.x); got != c.want {
			t.Errorf("nextRollupClose(%d) = %d, want %d", c.x, got, c.want)
		}
	}
}
