package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/abacus-stream/abacus/examples/devices"
	"github.com/abacus-stream/abacus/membership"
)

// TestRunStopsStartedRolesWhenOneFailsToStart: when a role cannot start (one whose member id
// another process of the host holds), run stops the roles it started before it and returns only
// once they have stopped; before, they ran on after run returned, without their host locks and
// with the deployment closed under them.
func TestRunStopsStartedRolesWhenOneFailsToStart(t *testing.T) {
	for _, c := range []struct{ started, refused string }{
		{RoleProcessor, RoleAggregates},
		{RoleAggregates, RoleFacts},
	} {
		t.Run(c.started+"-then-"+c.refused, func(t *testing.T) { runWithRefusedRole(t, c.started, c.refused) })
	}
}

func runWithRefusedRole(t *testing.T, started, refused string) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation(), kfake.DefaultNumPartitions(2))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	topo, err := devices.Topology()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg := &Config{Topology: topo.Name(), Kafka: KafkaConfig{Brokers: cluster.ListenAddrs()}}
	cfg.HBase.Embedded = filepath.Join(dir, "cells")
	cfg.Processor.StoragePath = filepath.Join(dir, "state")
	cfg.Membership.Mode = "static"
	cfg.Membership.InstanceID = fmt.Sprintf("start-fail-%d", time.Now().UnixNano())
	cfg.EnsureDefaults()

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	d, err := open(ctx, cfg, topo, slog.New(slog.NewTextHandler(io.Discard, nil)), needs{kafka: true, store: true})
	if err != nil {
		t.Fatal(err)
	}
	defer d.shutdown()
	if err := d.ensureTables(ctx); err != nil {
		t.Fatal(err)
	}
	specs, err := d.topicSpecs(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.ensureTopics(ctx, specs); err != nil {
		t.Fatal(err)
	}

	release, err := membership.Lock(cfg.groupOf(refused), cfg.memberID(refused))
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	err = d.run(ctx, []string{started, refused}, startOptions{})
	var clash *membership.ClashError
	if !errors.As(err, &clash) {
		t.Fatalf("run: %v, want the %s's member id refused", err, refused)
	}
	rs := d.ops.lookup(started)
	if rs == nil {
		t.Fatalf("the %s was never started", started)
	}
	rs.mu.Lock()
	phase := rs.phase
	rs.mu.Unlock()
	if phase != "stopped" {
		t.Fatalf("the %s is %q (%v) after run returned, want stopped", started, phase, rs.err)
	}
	if ctx.Err() != nil {
		t.Fatalf("run took until the test's deadline: %v", ctx.Err())
	}
}
