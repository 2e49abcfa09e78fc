package app

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/abacus-stream/abacus/examples/devices"
	"github.com/abacus-stream/abacus/query"
	"github.com/abacus-stream/abacus/topology"
	"github.com/abacus-stream/abacus/totals"
)

// TestRollupOutputs: what app shows of the devices example's sets (the query API's sets, the
// lines of admin verify, abacus query's table and JSON) says which sets are rollups and by what,
// and leaves an entity set's output as it was.
func TestRollupOutputs(t *testing.T) {
	topo, err := devices.Topology()
	if err != nil {
		t.Fatal(err)
	}
	served := map[string]query.ServedSet{}
	for _, s := range ServedSets(topo.Sets()) {
		served[s.Name] = s
	}
	if s := served["region-minute"]; !s.Rollup || s.Dimension != "region" || s.KeyName() != "region" {
		t.Fatalf("region-minute served as %+v", s)
	}
	if s := served["fleet-minute"]; !s.Global() || s.KeyName() != "" {
		t.Fatalf("fleet-minute served as %+v", s)
	}
	if s := served["minute"]; s.Rollup || s.Dimension != query.EntityDimension {
		t.Fatalf("minute served as %+v", s)
	}

	info := func(name string) topology.SetInfo {
		s, ok := topo.Set(name)
		if !ok {
			t.Fatalf("no set %s", name)
		}
		return s
	}
	for name, want := range map[string]string{"minute": "by entity", "region-minute": "rollup by region", "fleet-minute": "global rollup (key all)"} {
		if got := describeSet(info(name)); got != want {
			t.Errorf("describeSet(%s) = %q, want %q", name, got, want)
		}
	}

	w := query.Window{Start: time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC), Final: true,
		Values: map[string]totals.Value{"count": {Name: "count", Kind: totals.KindInt, Int: 7}}}
	table := func(set, key string) string {
		var b bytes.Buffer
		if err := printTable(&b, info(set), map[string][]query.Window{key: {w}}); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	if got := strings.Fields(strings.SplitN(table("minute", "device-001"), "\n", 2)[0]); got[0] != "entity" {
		t.Fatalf("entity set's table heading: %v", got)
	}
	if got := table("region-minute", "eu-west"); !strings.HasPrefix(strings.TrimSpace(got), "region") || !strings.Contains(got, "eu-west") {
		t.Fatalf("rollup's table:\n%s", got)
	}
	if got := table("fleet-minute", "all"); !strings.HasPrefix(strings.TrimSpace(got), "key") || !strings.Contains(got, " all ") {
		t.Fatalf("global rollup's table:\n%s", got)
	}

	js := func(set, key string) []map[string]any {
		var b bytes.Buffer
		if err := printJSON(&b, info(set), map[string][]query.Window{key: {w}}); err != nil {
			t.Fatal(err)
		}
		var out []map[string]any
		if err := json.Unmarshal(b.Bytes(), &out); err != nil || len(out) != 1 {
			t.Fatalf("%s JSON %s: %v", set, b.String(), err)
		}
		return out
	}
	if o := js("minute", "device-001")[0]; o["entity"] != "device-001" || o["rollup"] != nil || o["dimension"] != nil {
		t.Fatalf("entity set's JSON changed: %v", o)
	}
	if o := js("region-minute", "eu-west")[0]; o["entity"] != "eu-west" || o["rollup"] != true || o["dimension"] != "region" {
		t.Fatalf("rollup's JSON: %v", o)
	}

	// A global rollup reads its one key without -entity, and refuses any other.
	if keys, err := queryKeys(info("fleet-minute"), ""); err != nil || strings.Join(keys, ",") != topology.GlobalKey {
		t.Fatalf("global rollup's keys: %v %v", keys, err)
	}
	if _, err := queryKeys(info("fleet-minute"), "eu-west"); err == nil {
		t.Fatal("a global rollup took -entity eu-west")
	}
	if keys, err := queryKeys(info("region-minute"), "eu-west,us-east"); err != nil || len(keys) != 2 {
		t.Fatalf("rollup's keys: %v %v", keys, err)
	}
}
