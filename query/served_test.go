package query

import (
	"testing"

	"github.com/abacus-stream/abacus/topology"
)

// The query package keeps its own copies of the topology's names for entity sets and the global
// key (it needs no topology code); they must not drift apart, or global rollups would be read
// under a key nothing writes.
func TestRollupNamesMatchTopology(t *testing.T) {
	if GlobalKey != topology.GlobalKey || EntityDimension != topology.EntityDimension {
		t.Fatalf("query has GlobalKey %q and EntityDimension %q, topology %q and %q", GlobalKey, EntityDimension, topology.GlobalKey, topology.EntityDimension)
	}
}
