package app

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/abacus-stream/abacus/examples/devices"
	"github.com/abacus-stream/abacus/topology"
)

// TestVerifyReportsDrift: admin verify names every family setting of a table that differs from
// the config (TTL and compression included, which it used to ignore), and fails; admin create
// says so too but goes on; an unknown codec is a config error with a guess.
func TestVerifyReportsDrift(t *testing.T) {
	for _, v := range EnvVars() {
		t.Setenv(v, "")
	}
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DefaultNumPartitions(2))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	dir := t.TempDir()
	conf := filepath.Join(dir, "abacus.yaml")
	write := func(aggregates string) {
		t.Helper()
		if err := os.WriteFile(conf, fmt.Appendf(nil, "topology: devices\nkafka: {brokers: [%q]}\nhbase: {embedded: %q}\n"+
			"membership: {mode: dynamic}\nsinks:\n  aggregates: %s\n", cluster.ListenAddrs()[0], filepath.Join(dir, "cells"), aggregates), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	p := Program{Topologies: []func() (*topology.Topology, error){devices.Topology}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	run := func(args ...string) (int, string) {
		var out bytes.Buffer
		code := p.Run(ctx, args, &out, &out)
		return code, out.String()
	}

	write("{ttl: 1h}")
	if code, out := run("admin", "create", "-config", conf, "-partitions", "2"); code != 0 {
		t.Fatalf("admin create: %d\n%s", code, out)
	}
	if code, out := run("admin", "verify", "-config", conf); code != 0 {
		t.Fatalf("admin verify of what create made: %d\n%s", code, out)
	}
	write("{ttl: 2h, compression: GZ}")
	code, out := run("admin", "verify", "-config", conf)
	for _, want := range []string{"TTL is 1h0m0s, the configuration says 2h0m0s", "COMPRESSION is NONE, the configuration says GZ"} {
		if code != 1 || !strings.Contains(out, want) {
			t.Errorf("admin verify of a drifted table: exit %d, want 1 and %q\n%s", code, want, out)
		}
	}
	if code, out := run("admin", "create", "-config", conf, "-partitions", "2"); code != 0 || !strings.Contains(out, "exists, differing from the config: table devices_aggregates family d: TTL is 1h0m0s") {
		t.Errorf("admin create over a drifted table: exit %d\n%s", code, out)
	}
	write("{compression: snapy}")
	if code, out := run("admin", "verify", "-config", conf); code == 0 || !strings.Contains(out, `sinks.aggregates.compression: "snapy" is not one of NONE, GZ, SNAPPY`) || !strings.Contains(out, "did you mean SNAPPY?") {
		t.Errorf("an unknown codec: exit %d\n%s", code, out)
	}
}

// TestKafkaSilentFailsInBound: a broker address that takes connections and never answers fails a
// command within kafka.connect_timeout, naming the address and the setting.
func TestKafkaSilentFailsInBound(t *testing.T) {
	for _, v := range EnvVars() {
		t.Setenv(v, "")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() { // accept and say nothing
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	conf := filepath.Join(t.TempDir(), "abacus.yaml")
	if err := os.WriteFile(conf, fmt.Appendf(nil, "topology: devices\nkafka: {brokers: [%q], connect_timeout: 1s}\nhbase: {embedded: cells}\n", ln.Addr().String()), 0o644); err != nil {
		t.Fatal(err)
	}
	p := Program{Topologies: []func() (*topology.Topology, error){devices.Topology}}
	var out bytes.Buffer
	t0 := time.Now()
	code := p.Run(context.Background(), []string{"admin", "create", "-config", conf}, &out, &out)
	if took := time.Since(t0); code != 1 || took > 15*time.Second || !strings.Contains(out.String(), ln.Addr().String()) ||
		!strings.Contains(out.String(), "no answer within 1s (kafka.connect_timeout)") {
		t.Fatalf("a silent broker: exit %d after %v:\n%s", code, took, out.String())
	}
}
