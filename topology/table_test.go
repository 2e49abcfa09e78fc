package topology_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/abacus-stream/abacus/topology"
	"github.com/abacus-stream/abacus/windows"
)

type tev struct {
	ID     string
	TS     int64
	Region string
}

type tval struct{ Region string }

// tableTopo declares a source joined with one table, changed by edit before Build.
func tableTopo(edit func(b *topology.Builder, src *topology.Source[tev])) (*topology.Topology, error) {
	b := topology.New("t")
	src := topology.NewSource(b, "in", topology.JSON[tev](), func(e tev) string { return e.ID },
		func(e tev) time.Time { return time.UnixMilli(e.TS) })
	src.Aggregate("m", windows.Tumbling(time.Minute)).Grace(0).Count("n")
	edit(b, src)
	return b.Build()
}

func join(src *topology.Source[tev], tb *topology.Table[tval]) {
	topology.Join(src, tb, func(e tev) string { return e.ID }, func(e tev, v tval, ok bool) (tev, error) {
		e.Region = v.Region
		return e, nil
	})
}

// TestTableDeclarations: a table's settings are checked at Build, each error naming the table;
// its topic is one of the topology's, renamed with the others.
func TestTableDeclarations(t *testing.T) {
	for _, c := range []struct {
		name string
		edit func(b *topology.Builder, src *topology.Source[tev])
		want string
	}{
		{"bad name", func(b *topology.Builder, src *topology.Source[tev]) {
			join(src, topology.NewTable[tval](b, "a b", "reg", topology.JSON[tval]()))
		}, `table "a b": the name must be`},
		{"no topic", func(b *topology.Builder, src *topology.Source[tev]) {
			join(src, topology.NewTable[tval](b, "reg", "", topology.JSON[tval]()))
		}, `table "reg": topic is empty`},
		{"no codec", func(b *topology.Builder, src *topology.Source[tev]) {
			join(src, topology.NewTable[tval](b, "reg", "reg", nil))
		}, `table "reg": codec is nil`},
		{"twice", func(b *topology.Builder, src *topology.Source[tev]) {
			topology.NewTable[tval](b, "reg", "reg", topology.JSON[tval]())
			topology.NewTable[tval](b, "reg", "reg2", topology.JSON[tval]())
		}, `table "reg": name declared twice`},
		{"negative grace", func(b *topology.Builder, src *topology.Source[tev]) {
			topology.NewTable[tval](b, "reg", "reg", topology.JSON[tval]()).Grace(-time.Second)
		}, `Grace must not be negative`},
		{"no history", func(b *topology.Builder, src *topology.Source[tev]) {
			topology.NewTable[tval](b, "reg", "reg", topology.JSON[tval]()).History(0)
		}, `History must be positive`},
		{"nil join", func(b *topology.Builder, src *topology.Source[tev]) {
			topology.Join(src, topology.NewTable[tval](b, "reg", "reg", topology.JSON[tval]()), nil, nil)
		}, `join with table "reg": key and join funcs must not be nil`},
		{"another topology's table", func(b *topology.Builder, src *topology.Source[tev]) {
			join(src, topology.NewTable[tval](topology.New("other"), "reg", "reg", topology.JSON[tval]()))
		}, `join with table "reg" of another topology`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := tableTopo(c.edit)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Build: %v, want an error containing %q", err, c.want)
			}
		})
	}
	topo, err := tableTopo(func(b *topology.Builder, src *topology.Source[tev]) {
		join(src, topology.NewTable[tval](b, "reg", "registry", topology.JSON[tval]()))
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(topo.Topics(), "registry") {
		t.Fatalf("Topics %v lacks the table's topic", topo.Topics())
	}
	renamed, err := topo.WithTopicNames("dev-", map[string]string{"registry": "devices-v2"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(renamed.Topics(), "devices-v2") || !slices.Contains(renamed.Topics(), "dev-in") {
		t.Fatalf("renamed Topics %v", renamed.Topics())
	}
}
