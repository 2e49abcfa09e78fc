package plan_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/abacus-stream/abacus/internal/golden"
	"github.com/abacus-stream/abacus/internal/plan"
	"github.com/abacus-stream/abacus/windows"
)

// TestGoldenNames pins the names this package gives to what is stored and sent: keys of the
// processor's table, the loop topic, window and layout names and a layout's hash. A deployment
// keeps them in its changelogs, topics and partition records, so a change of any of them is a
// change of a stored format, and shows as a diff of testdata/golden/names.txt.
func TestGoldenNames(t *testing.T) {
	var b strings.Builder
	line := func(what string, v any) { fmt.Fprintf(&b, "%s: %v\n", what, v) }
	line("GlobalKey", plan.GlobalKey)
	line("RollupStateKey(fleet, all)", plan.RollupStateKey("fleet", plan.GlobalKey))
	line("RollupStateKey(by-region, eu/west)", plan.RollupStateKey("by-region", "eu/west"))
	line("LoopTopic(devices)", plan.LoopTopic("devices"))
	line("TickKeyPrefix", plan.TickKeyPrefix)
	line("EmitFinal, EmitEveryUpdate, EmitEarly", fmt.Sprint(plan.EmitFinal, plan.EmitEveryUpdate, plan.EmitEarly))
	tumbling := windows.Tumbling(time.Minute)
	hopping := windows.Hopping(10*time.Minute, time.Minute)
	session := windows.Session(30 * time.Second)
	for _, w := range []windows.Spec{tumbling, hopping, session} {
		line("WindowName("+w.String()+")", plan.WindowName(w))
	}
	p := &plan.Plan{Sets: []*plan.Set{
		{Name: "minute", Window: tumbling, Aggs: []plan.Agg{{Name: "n", Kind: "count"}, {Name: "max_temp", Kind: "max"}}},
		{Name: "fleet", Window: tumbling, Rollup: &plan.Rollup{}, Aggs: []plan.Agg{{Name: "n", Kind: "count"}}},
		{Name: "by-region", Window: hopping, Rollup: &plan.Rollup{Dimension: "region"}, Aggs: []plan.Agg{{Name: "p99", Kind: "quantiles"}}},
		{Name: "visits", Window: session, Aggs: []plan.Agg{{Name: "sum", Kind: "sum"}}},
	}}
	for _, s := range p.Sets {
		line("LayoutWindow("+s.Name+")", plan.LayoutWindow(s))
	}
	l := p.Layout()
	line("Layout hash of the four sets above", fmt.Sprintf("%08x", l.Hash))
	golden.CheckText(t, "names", "names kept in a deployment's state and topics (one per line)", b.String())
}

// TestReservedKeys: the keys the processor keeps for itself are never taken for an entity's, and
// an entity's key is never taken for one of them.
func TestReservedKeys(t *testing.T) {
	for _, k := range []string{"__offset", plan.TickKeyPrefix + "3", plan.RollupStateKey("fleet", plan.GlobalKey)} {
		if !plan.ReservedKey(k) {
			t.Errorf("ReservedKey(%q) = false, want true", k)
		}
	}
	for _, k := range []string{"dev-1", "abacus", "all", "abacus-tick", "abacus-rollup", "__offsets"} {
		if plan.ReservedKey(k) {
			t.Errorf("ReservedKey(%q) = true: an entity with that key would be lost", k)
		}
	}
}

// TestWindowNamesDistinguishWindows: two specs share a name only if they assign the same windows;
// a set's layout window also changes with its rollup key.
func TestWindowNamesDistinguishWindows(t *testing.T) {
	specs := []windows.Spec{windows.Tumbling(time.Minute), windows.Tumbling(time.Hour), windows.Hopping(time.Hour, time.Minute),
		windows.Hopping(time.Hour, 2*time.Minute), windows.Session(time.Minute), windows.Session(time.Hour)}
	seen := map[string]windows.Spec{}
	for _, s := range specs {
		n := plan.WindowName(s)
		if prev, ok := seen[n]; ok {
			t.Errorf("%v and %v are both named %q", prev, s, n)
		}
		seen[n] = s
	}
	w := windows.Tumbling(time.Minute)
	names := map[string]bool{}
	for _, s := range []*plan.Set{{Window: w}, {Window: w, Rollup: &plan.Rollup{}}, {Window: w, Rollup: &plan.Rollup{Dimension: "region"}},
		{Window: w, Rollup: &plan.Rollup{Dimension: "site"}}} {
		names[plan.LayoutWindow(s)] = true
	}
	if len(names) != 4 {
		t.Errorf("an entity set and rollups by other keys share layout windows: %v", names)
	}
}
