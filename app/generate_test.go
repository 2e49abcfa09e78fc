package app

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/abacus-stream/abacus/examples/devices"
	"github.com/abacus-stream/abacus/topology"
)

// TestGenerate: abacus generate runs the program's generator against the configured brokers
// until -for ends, and stops cleanly.
func TestGenerate(t *testing.T) {
	for _, v := range EnvVars() {
		t.Setenv(v, "")
	}
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation(), kfake.DefaultNumPartitions(2))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	adm, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	if _, err := kadm.NewClient(adm).CreateTopics(context.Background(), 2, 1, nil, devices.Topic, devices.RegistryTopic); err != nil { // admin create's part
		t.Fatal(err)
	}
	conf := filepath.Join(t.TempDir(), "abacus.yaml")
	if err := os.WriteFile(conf, fmt.Appendf(nil, "topology: devices\nkafka: {brokers: [%q]}\nhbase: {embedded: cells}\n", cluster.ListenAddrs()[0]), 0o644); err != nil {
		t.Fatal(err)
	}
	p := Program{
		Topologies: []func() (*topology.Topology, error){devices.Topology},
		DemoGenerator: func(ctx context.Context, cl *kgo.Client) error {
			_, err := devices.Generator{Devices: 3, PerSecond: 200, Seed: 7}.Run(ctx, cl)
			return err
		},
	}
	var out bytes.Buffer
	t0 := time.Now()
	if code := p.Run(context.Background(), []string{"generate", "-config", conf, "-for", "2s"}, &out, &out); code != 0 {
		t.Fatalf("generate: exit %d\n%s", code, out.String())
	}
	if took := time.Since(t0); took > 20*time.Second || !strings.Contains(out.String(), "generating sample events") {
		t.Fatalf("generate -for 2s took %v: %s", took, out.String())
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.ConsumeTopics(devices.Topic))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n := 0
	for n < 100 && ctx.Err() == nil {
		n += cl.PollFetches(ctx).NumRecords()
	}
	if n < 100 {
		t.Fatalf("generate produced %d readings in 2 s at 200 a second", n)
	}
	// A config that renames the sources: the generator would write the declared names.
	t.Setenv("ABACUS_TOPIC_PREFIX", "dev-")
	out.Reset()
	if code := p.Run(context.Background(), []string{"generate", "-config", conf}, &out, &out); code != 1 || !strings.Contains(out.String(), "renames to [dev-device-readings dev-device-registry]") {
		t.Fatalf("generate under a prefix: exit %d\n%s", code, out.String())
	}
	// One that renames only the table: the registry the generator fills would not be the table
	// the processor reads.
	t.Setenv("ABACUS_TOPIC_PREFIX", "")
	named := filepath.Join(t.TempDir(), "named.yaml")
	body, _ := os.ReadFile(conf)
	if err := os.WriteFile(named, append(body, "topics:\n  names: {device-registry: fleet-registry}\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if code := p.Run(context.Background(), []string{"generate", "-config", named}, &out, &out); code != 1 || !strings.Contains(out.String(), "renames to [device-readings fleet-registry]") {
		t.Fatalf("generate with the table renamed: exit %d\n%s", code, out.String())
	}
	t.Setenv("ABACUS_TOPIC_PREFIX", "")
	if code := (Program{Topologies: p.Topologies}).Run(context.Background(), []string{"generate", "-config", conf}, &out, &out); code != 2 {
		t.Fatalf("generate without a generator: exit %d, want a usage error", code)
	}
}
