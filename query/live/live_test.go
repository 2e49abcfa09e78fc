package live

import (
	"strings"
	"testing"
	"time"

	"github.com/abacus-stream/abacus/internal/plan"
	"github.com/abacus-stream/abacus/state"
	"github.com/abacus-stream/abacus/topology"
	"github.com/abacus-stream/abacus/windows"
)

func TestNewRefusesNilTopology(t *testing.T) {
	for name, topo := range map[string]*topology.Topology{"nil": nil, "zero": {}} {
		if _, err := New(topo, Config{Brokers: []string{"127.0.0.1:1"}}); err == nil || !strings.Contains(err.Error(), "topology is nil or zero") {
			t.Fatalf("New(%s topology): %v, want an error naming the topology", name, err)
		}
	}
}

// TestOpenWindowsOfARollup: the live total of an early-firing rollup's window is what its owner
// holds, the final partials merged and the early partials of the other partitions; an entity's
// contributions are never read as a total; a window given up (too large) is not shown.
func TestOpenWindowsOfARollup(t *testing.T) {
	type ev struct {
		D string
		T int64
	}
	b := topology.New("t")
	src := topology.NewSource(b, "in", topology.JSON[ev](), func(e ev) string { return e.D }, func(e ev) time.Time { return time.UnixMilli(e.T) })
	src.Aggregate("all", windows.Tumbling(time.Minute)).Grace(0).Global().Emit(topology.EarlyEvery(time.Second)).Count("n")
	src.Aggregate("minute", windows.Tumbling(time.Minute)).Grace(0).Count("n")
	topo, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	p := plan.Of(topo)
	all, minute := p.SetByName("all"), p.SetByName("minute")
	count := func(n int) []byte {
		acc := all.Aggs[0].New()
		for range n {
			acc.Add(ev{}, 0)
		}
		return acc.AppendBinary(nil)
	}
	owner := &state.Entity{StreamTime: 30_000, Windows: []state.Window{
		{Set: all.Index, Start: 0, End: 60_000, Revision: 5, Aggs: [][]byte{count(5)}},                        // partition 0 final
		{Set: all.Index, Start: 0, End: 60_000, Key: state.SlotKey(0), Final: true, Revision: 5},              // its marker
		{Set: all.Index, Start: 0, End: 60_000, Key: state.SlotKey(1), Revision: 3, Aggs: [][]byte{count(3)}}, // early
		{Set: all.Index, Start: 60_000, End: 120_000, Final: true},                                            // given up
	}}
	ws, err := openWindows(all, topology.GlobalKey, owner)
	if err != nil {
		t.Fatal(err)
	}
	if len(ws) != 1 || ws[0].Values["n"].Int != 8 || ws[0].Revision != 8 || !ws[0].Live || ws[0].Entity != topology.GlobalKey {
		t.Fatalf("live windows of the owner: %+v", ws)
	}
	device := &state.Entity{StreamTime: 30_000, Windows: []state.Window{
		{Set: all.Index, Start: 0, End: 60_000, Key: topology.GlobalKey, Revision: 2, Aggs: [][]byte{count(2)}}, // a contribution
		{Set: minute.Index, Start: 0, End: 60_000, Revision: 2, Aggs: [][]byte{count(2)}},
	}}
	if ws, err := openWindows(all, topology.GlobalKey, device); err != nil || len(ws) != 0 {
		t.Fatalf("an entity's contribution read as the rollup's total: %+v %v", ws, err)
	}
	if ws, err := openWindows(minute, "all", device); err != nil || len(ws) != 1 || ws[0].Values["n"].Int != 2 {
		t.Fatalf("the entity's own window: %+v %v", ws, err)
	}
}
