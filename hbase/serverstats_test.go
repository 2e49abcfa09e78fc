package hbase

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"
)

// statsOf is the stats of server addr, zero when the client never sent it anything.
func statsOf(c *Client, addr string) ServerStats {
	for _, s := range c.ServerStats() {
		if s.Server == addr {
			return s
		}
	}
	return ServerStats{}
}

// TestServerStatsCountFailures: a refused dial and a server that never answers each count as a
// request and an error of their own server, with the error kept; a call the caller cancels is not
// the server's error; nothing is left in flight afterwards.
func TestServerStatsCountFailures(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()

	silent, _ := silentServer(t, false) // a paused region server: reads, never answers

	c := bareClient(Config{ZooKeeper: "127.0.0.1:1", RPCTimeout: 300 * time.Millisecond})
	defer c.Close()
	if _, _, err := c.rpc(context.Background(), serviceClient, dead, "Get", getBuf(), nil); err == nil {
		t.Fatal("a call to a closed port succeeded")
	}
	s := statsOf(c, dead)
	if s.Requests != 1 || s.Errors != 1 || s.DialErrors != 1 || s.InFlight != 0 {
		t.Fatalf("refused dial: %+v, want 1 request, 1 error, 1 dial error, none in flight", s)
	}
	if !strings.Contains(s.LastError, dead) || s.LastErrorAt.IsZero() {
		t.Fatalf("refused dial: last error %q at %v, want one naming %s", s.LastError, s.LastErrorAt, dead)
	}

	done := make(chan error, 1)
	go func() {
		_, _, err := c.rpc(context.Background(), serviceClient, silent, "Get", getBuf(), nil)
		done <- err
	}()
	deadline := time.Now().Add(5 * time.Second)
	for statsOf(c, silent).InFlight != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("the call to the silent server never showed in flight: %+v", statsOf(c, silent))
		}
		time.Sleep(time.Millisecond)
	}
	if err := <-done; err == nil || !strings.Contains(err.Error(), "no answer within") {
		t.Fatalf("call to a silent server: %v, want no answer within the RPC timeout", err)
	}
	s = statsOf(c, silent)
	if s.Requests != 1 || s.Errors != 1 || s.DialErrors != 0 || s.InFlight != 0 || s.RequestTime < 300*time.Millisecond {
		t.Fatalf("silent server: %+v, want 1 request, 1 error that is no dial error, none in flight, >= 300ms in requests", s)
	}

	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(50 * time.Millisecond); cancel() }()
	if _, _, err := c.rpc(ctx, serviceClient, silent, "Get", getBuf(), nil); err == nil {
		t.Fatal("a cancelled call succeeded")
	}
	s = statsOf(c, silent)
	if s.Requests != 2 || s.Errors != 1 {
		t.Fatalf("after a call the caller cancelled: %+v, want 2 requests and still 1 error", s)
	}
	if got := len(c.ServerStats()); got != 2 {
		t.Fatalf("%d servers in the stats, want 2", got)
	}
}

// TestServerStatsOfRealServer: against the real HBase, actions are counted on the server that
// holds their regions, refused ones as action errors with the server's exception kept, and
// nothing stays in flight.
func TestServerStatsOfRealServer(t *testing.T) {
	c := testClient(t)
	table := testTable(t, c, "srvstats", fam("f"), [][]byte{[]byte("m")})
	ctx := testContext(t)
	before := map[string]ServerStats{}
	for _, s := range c.ServerStats() {
		before[s.Server] = s
	}
	var ms []*Mutation
	for i := range 40 {
		family := "f"
		if i%8 == 3 {
			family = "nope"
		}
		ms = append(ms, NewPut(table, []byte(fmt.Sprintf("%c%02d", 'a'+byte(i%2)*20, i))).Add(family, []byte("q"), 7, []byte("v")))
	}
	var be *BatchError
	if err := c.Apply(ctx, ms); !errors.As(err, &be) || be.Failed != 5 {
		t.Fatalf("apply: %v, want 5 of 40 refused for the missing family", err)
	}
	var sent, refused, requests int64
	sawError := false
	for _, s := range c.ServerStats() {
		b := before[s.Server]
		sent += s.ActionsSent - b.ActionsSent
		refused += s.ActionErrors - b.ActionErrors
		requests += s.Requests - b.Requests
		if s.InFlight != 0 || s.Waiting != 0 {
			t.Errorf("server %s: %d in flight, %d waiting after the Apply returned", s.Server, s.InFlight, s.Waiting)
		}
		if s.ActionErrors > b.ActionErrors && strings.Contains(s.LastError, "NoSuchColumnFamily") {
			sawError = true
		}
		if s.Errors != b.Errors {
			t.Errorf("server %s: %d failed requests, want none (only actions were refused)", s.Server, s.Errors-b.Errors)
		}
	}
	if sent != 40 || refused != 5 || requests < 1 || !sawError {
		t.Fatalf("per server: %d actions sent, %d refused, %d requests, exception kept %v; want 40, 5, >= 1, true: %+v",
			sent, refused, requests, sawError, c.ServerStats())
	}
}
