package hbase

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// silentServer accepts connections and reads whatever comes, answering nothing; when hangUp is
// set it closes each connection after the first bytes instead. It counts accepted connections.
func silentServer(t *testing.T, hangUp bool) (addr string, accepted *atomic.Int32) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	accepted = new(atomic.Int32)
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			go func() {
				defer nc.Close()
				if hangUp {
					buf := make([]byte, 1)
					_, _ = nc.Read(buf)
					return
				}
				_, _ = io.Copy(io.Discard, nc)
			}()
		}
	}()
	return ln.Addr().String(), accepted
}

func bareClient(cfg Config) *Client {
	c := &Client{cfg: cfg, conns: map[string]*conn{}, dials: map[string]*dialWait{}, sems: map[string]chan struct{}{}}
	c.cfg.EnsureDefaults()
	return c
}

// TestRPCTimeoutOnSilentServer: a server that never answers cannot hang a call past RPCTimeout, and
// the error is retriable.
func TestRPCTimeoutOnSilentServer(t *testing.T) {
	addr, _ := silentServer(t, false)
	c := bareClient(Config{RPCTimeout: 100 * time.Millisecond})
	defer c.Close()
	_, _, err := c.rpc(context.Background(), serviceClient, addr, "Get", getBuf(), nil)
	var e *Error
	if !errors.As(err, &e) || e.Kind != KindBackoff || !strings.Contains(e.Message, "no answer") {
		t.Fatalf("call to a silent server: %v, want a retriable timeout", err)
	}
}

// TestReconnectAfterHangUp: a connection the server closes fails its call as KindReconnect; the
// next call dials a new connection.
func TestReconnectAfterHangUp(t *testing.T) {
	addr, accepted := silentServer(t, true)
	c := bareClient(Config{RPCTimeout: 5 * time.Second})
	defer c.Close()
	for i := 1; i <= 2; i++ {
		_, _, err := c.rpc(context.Background(), serviceClient, addr, "Get", getBuf(), nil)
		var e *Error
		if !errors.As(err, &e) || e.Kind != KindReconnect {
			t.Fatalf("call %d on a hung-up connection: %v, want KindReconnect", i, err)
		}
		if got := accepted.Load(); got != int32(i) {
			t.Fatalf("after call %d: %d connections accepted, want %d", i, got, i)
		}
	}
	c.Close()
	if n := connGoroutines(); n != 0 {
		t.Fatalf("%d connection goroutines left after Close", n)
	}
}

// TestDroppedConnectionFailsCallsAsRetriable: when one call's reconnect-class error makes the
// client drop a connection, the other calls pending on it fail as retriable, never as ErrClosed
// (which a caller would take as permanent).
func TestDroppedConnectionFailsCallsAsRetriable(t *testing.T) {
	addr, _ := silentServer(t, false)
	c := bareClient(Config{RPCTimeout: 10 * time.Second})
	defer c.Close()
	errs := make(chan error, 3)
	for range 3 {
		go func() {
			_, _, err := c.rpc(context.Background(), serviceClient, addr, "Get", getBuf(), nil)
			errs <- err
		}()
	}
	// Wait until the calls are pending on the one connection, then drop it as a reconnect error does.
	deadline := time.Now().Add(5 * time.Second)
	for {
		c.mu.Lock()
		var pending int
		for _, cn := range c.conns {
			cn.mu.Lock()
			pending += len(cn.pending)
			cn.mu.Unlock()
		}
		c.mu.Unlock()
		if pending == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("calls never pending (%d)", pending)
		}
		time.Sleep(5 * time.Millisecond)
	}
	c.dropConn(addr)
	for range 3 {
		err := <-errs
		var e *Error
		if errors.Is(err, ErrClosed) || !errors.As(err, &e) || e.Kind != KindReconnect || !IsRetriable(err) {
			t.Fatalf("call on a dropped connection failed with %v, want a retriable reconnect error", err)
		}
	}
}

// TestZooKeeperLookupIsBounded: with ZooKeeper down, locating hbase:meta fails as retriable after
// ZooKeeperTimeout, even under a context without a deadline: a write issued during an outage
// returns its failure to its caller instead of waiting for ZooKeeper to come back.
func TestZooKeeperLookupIsBounded(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	c := bareClient(Config{ZooKeeper: addr, ZooKeeperTimeout: 300 * time.Millisecond, BackoffMin: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond})
	c.quorum = addr
	defer c.Close()
	t0 := time.Now()
	done := make(chan error, 1)
	go func() {
		_, err := c.metaServer(context.Background(), false)
		done <- err
	}()
	select {
	case err = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("locating hbase:meta with ZooKeeper down still waits after 10 s")
	}
	if took := time.Since(t0); err == nil || !IsRetriable(err) || took > 5*time.Second {
		t.Fatalf("locate hbase:meta with ZooKeeper down: %v after %v, want a retriable failure after about 300ms", err, took)
	}
	t0 = time.Now()
	err = c.Apply(context.Background(), []*Mutation{put1("t", "r", "q", 1, "v")})
	var be *BatchError
	if !errors.As(err, &be) || !IsRetriable(be.Errs[0]) || !strings.Contains(be.Errs[0].Error(), "zookeeper") || time.Since(t0) > 20*time.Second {
		t.Fatalf("apply with ZooKeeper down: %v after %v, want a retriable failure within the rounds' bound", err, time.Since(t0))
	}
}

// TestNewClientWaitsForZooKeeper: NewClient waits, round after round, for a ZooKeeper that does not
// answer yet, as a process started beside a cluster that is still starting needs; each lookup
// alone gives up after ZooKeeperTimeout.
func TestNewClientWaitsForZooKeeper(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	t0 := time.Now()
	_, err = NewClient(context.Background(), Config{ZooKeeper: addr, ZooKeeperTimeout: 100 * time.Millisecond,
		MaxRounds: 4, BackoffMin: 100 * time.Millisecond, BackoffMax: 100 * time.Millisecond})
	took := time.Since(t0)
	if err == nil || !IsRetriable(err) {
		t.Fatalf("new client with ZooKeeper down: %v, want a retriable failure", err)
	}
	if took < 600*time.Millisecond || took > 5*time.Second {
		t.Fatalf("new client gave up after %v: want 4 lookups of 100 ms with 100 ms between", took)
	}
}
