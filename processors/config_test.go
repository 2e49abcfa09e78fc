package processors_test

import (
	"strings"
	"testing"

	"github.com/abacus-stream/abacus/processors"
	"github.com/abacus-stream/abacus/topology"
)

// TestNewRefusesUnbuiltTopology: a nil or zero topology is an error naming it, not a panic.
func TestNewRefusesUnbuiltTopology(t *testing.T) {
	for name, topo := range map[string]*topology.Topology{"nil": nil, "zero": {}} {
		if _, err := processors.New(topo, processors.Config{Brokers: []string{"127.0.0.1:1"}}); err == nil || !strings.Contains(err.Error(), "topology is nil or zero") {
			t.Errorf("New(%s topology): %v, want an error naming the topology", name, err)
		}
	}
}
