// Command abacus runs, administers and queries abacus topologies; `abacus demo` runs the device
// telemetry example with no servers. Build your own binary around your topologies with app.Main:
// see the README's tour.
package main

import (
	"context"
	"time"

	"github.com/abacus-stream/abacus/app"
	"github.com/abacus-stream/abacus/examples/devices"
	"github.com/abacus-stream/abacus/topology"
	"github.com/twmb/franz-go/pkg/kgo"
)

func main() {
	app.Main(app.Program{
		Topologies: []func() (*topology.Topology, error){devices.Topology},
		DemoTopics: map[string]int32{devices.Topic: 4},
		DemoGenerator: func(ctx context.Context, cl *kgo.Client) error {
			g := devices.Generator{Devices: 20, PerSecond: 100, Jitter: 3 * time.Second, LatePercent: 2, DuplicatePercent: 1, Seed: 7,
				History: time.Hour, MoveEvery: 2 * time.Minute}
			_, err := g.Run(ctx, cl)
			return err
		},
	})
}
