package live

import (
	"strings"
	"testing"

	"github.com/abacus-stream/abacus/topology"
)

func TestNewRefusesNilTopology(t *testing.T) {
	for name, topo := range map[string]*topology.Topology{"nil": nil, "zero": {}} {
		if _, err := New(topo, Config{Brokers: []string{"127.0.0.1:1"}}); err == nil || !strings.Contains(err.Error(), "topology is nil or zero") {
			t.Fatalf("New(%s topology): %v, want an error naming the topology", name, err)
		}
	}
}
