// Command abacus-chaos is the abacus command with the chaos topology (package
// internal/chaos/stream, its region joined from a table) compiled in, built the way users build theirs (README, "Build your binary").
// The failure suite (bench/chaos) runs its roles as separate processes and kills them.
package main

import (
	"github.com/abacus-stream/abacus/app"
	"github.com/abacus-stream/abacus/internal/chaos/stream"
	"github.com/abacus-stream/abacus/topology"
)

func main() {
	app.Main(app.Program{Topologies: []func() (*topology.Topology, error){stream.TopologyJoined}})
}
