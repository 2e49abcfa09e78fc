package app

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/abacus-stream/abacus/examples/devices"
	"github.com/abacus-stream/abacus/processors"
	"github.com/abacus-stream/abacus/schema"
	"github.com/abacus-stream/abacus/topology"
)

// TestPrefixesKeepEnvironmentsApart: one config file (the example's, which names its processor
// group and its tables) run as dev- and as prod- on one Kafka and one HBase shares no consumer
// group, no topic the deployment writes (totals, dead letters, loop, changelog) and no table.
// Before, the example's processor.group and tables were taken as written: the two environments
// consumed from one group, restored one changelog and wrote one table.
func TestPrefixesKeepEnvironmentsApart(t *testing.T) {
	file, err := os.ReadFile(filepath.Join("..", "examples", "devices", "abacus.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	p := Program{Topologies: []func() (*topology.Topology, error){devices.Topology}}
	names := func(prefix string) (groups, topics, tables []string) {
		cfg, err := ParseConfig(file, func(string) (string, bool) { return "", false })
		if err != nil {
			t.Fatal(err)
		}
		cfg, topo, err := p.resolve(&common{}, cfg, func(k string) string {
			return map[string]string{"ABACUS_TOPIC_PREFIX": prefix}[k]
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range roles {
			if g := r.groupIn(cfg); g != "" {
				groups = append(groups, g)
			}
			if r.table != nil {
				tables = append(tables, r.table(cfg).Table)
				if r.holdsAggregates {
					tables = append(tables, schema.KeyIndexTable(r.table(cfg).Table))
				}
			}
		}
		tables = append(tables, cfg.Sinks.OffsetsTable, cfg.Sinks.BackfillTable)
		for _, s := range processors.TopicSpecs(topo, processors.Config{Group: cfg.Processor.Group}, 1) {
			topics = append(topics, s.Name)
		}
		return groups, topics, tables
	}
	dg, dt, dtab := names("dev-")
	pg, pt, ptab := names("prod-")
	for _, c := range []struct {
		what      string
		dev, prod []string
	}{{"group", dg, pg}, {"topic", dt, pt}, {"table", dtab, ptab}} {
		if len(c.dev) < 3 {
			t.Fatalf("%ss of dev-: %v", c.what, c.dev)
		}
		for _, n := range c.dev {
			if slices.Contains(c.prod, n) {
				t.Errorf("dev- and prod- share the %s %q", c.what, n)
			}
		}
	}
	if !slices.Contains(dg, "dev-devices") || !slices.Contains(dtab, "dev-devices_aggregates") {
		t.Errorf("the file's processor.group and table under dev-: %v %v", dg, dtab)
	}
	// A name that has the prefix already keeps it once.
	cfg := &Config{Topology: "devices", Topics: TopicsConfig{Prefix: "dev-"}}
	cfg.Processor.Group = "dev-devices"
	cfg.EnsureDefaults()
	cfg.EnsureDefaults()
	if cfg.Processor.Group != "dev-devices" || cfg.Sinks.Facts.Group != "dev-devices-facts-sink" {
		t.Errorf("prefixed twice: %q %q", cfg.Processor.Group, cfg.Sinks.Facts.Group)
	}
}
