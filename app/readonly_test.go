package app

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/abacus-stream/abacus/examples/devices"
	"github.com/abacus-stream/abacus/schema"
	"github.com/abacus-stream/abacus/store"
)

// readOnly is a store whose user may read but not create tables, as a query server's HBase
// user should be.
type readOnly struct {
	store.Store
	creates atomic.Int32
}

func (s *readOnly) EnsureTable(context.Context, schema.TableLayout) error {
	s.creates.Add(1)
	return errors.New("AccessDeniedException: Insufficient permissions (user=query, action=CREATE)")
}

// TestQueryServerCreatesNoTable: a process running only the query server creates nothing; it
// waits for the aggregate table `abacus admin create` makes, then serves, with a store that
// refuses every create. (It used to create the tables, and failed without that right.)
func TestQueryServerCreatesNoTable(t *testing.T) {
	topo, err := devices.Topology()
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cfg := &Config{Topology: topo.Name(), Kafka: KafkaConfig{Brokers: []string{"127.0.0.1:1"}}}
	cfg.HBase.Embedded = filepath.Join(t.TempDir(), "cells")
	cfg.Query.Listen, cfg.Query.NoLive = addr, true
	cfg.EnsureDefaults()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	d, err := open(ctx, cfg, topo, log, needs{store: true})
	if err != nil {
		t.Fatal(err)
	}
	defer d.shutdown()
	admin := d.st
	ro := &readOnly{Store: admin}
	d.st = ro

	prepared := make(chan error, 1)
	waiting := make(chan string, 10)
	go func() {
		prepared <- d.prepare(ctx, []string{RoleQuery}, &waiter{log: log, report: func(s string) { waiting <- s }})
	}()
	// No table yet: the query server waits for it, and says so.
	select {
	case err := <-prepared:
		t.Fatalf("prepare returned %v before the table existed", err)
	case w := <-waiting:
		t.Logf("waiting: %s", w)
	case <-time.After(10 * time.Second):
		t.Fatal("the query server neither waited for its table nor said so")
	}
	if err := admin.EnsureTable(ctx, d.layout(cfg.Sinks.Aggregates)); err != nil { // admin create, by its own user
		t.Fatal(err)
	}
	if err := <-prepared; err != nil {
		t.Fatalf("prepare once the table exists: %v", err)
	}
	if n := ro.creates.Load(); n != 0 {
		t.Fatalf("the query server tried to create tables %d times", n)
	}

	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- d.run(runCtx, []string{RoleQuery}, startOptions{}) }()
	for {
		resp, err := http.Get("http://" + addr + "/api/v1/windows?set=minute&entity=device-001")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("the query server does not serve: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("query server: %v", err)
	}
	if n := ro.creates.Load(); n != 0 {
		t.Fatalf("the query server tried to create tables %d times", n)
	}
}
