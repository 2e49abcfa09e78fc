package hbase

import (
	"context"
	"fmt"
	"net"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
)

// ZooKeeperRoot is the parent znode HBase registers under unless zookeeper.znode.parent says otherwise.
const ZooKeeperRoot = "/hbase"

// ZooKeeperLocator reads the locations of the active master and of hbase:meta from ZooKeeper.
type ZooKeeperLocator struct {
	// Quorum lists host:port pairs, comma separated, as users' hbase.zookeeper.quorum settings hold them.
	Quorum string
	// Root is the znode parent; ZooKeeperRoot when empty.
	Root string
	// SessionTimeout bounds the ZooKeeper session; 10 s when zero.
	SessionTimeout time.Duration
}

// do runs fn on a ZooKeeper session with the quorum, the znode parent's path given, and closes
// the session after.
func (l ZooKeeperLocator) do(ctx context.Context, fn func(conn *zk.Conn, root string) error) error {
	servers := strings.Split(l.Quorum, ",")
	timeout := l.SessionTimeout
	if timeout == 0 {
		timeout = 10 * time.Second
	}
	// The library retries its connects in the background and reports no dial error: the dialer
	// keeps the last one, so that a quorum that cannot be reached fails with why (refused,
	// unresolvable, timed out) rather than with the context's deadline alone.
	var dialMu sync.Mutex
	var lastDial error
	dialer := func(network, address string, timeout time.Duration) (net.Conn, error) {
		c, err := net.DialTimeout(network, address, timeout)
		if err != nil {
			dialMu.Lock()
			lastDial = err
			dialMu.Unlock()
		}
		return c, err
	}
	conn, events, err := zk.Connect(servers, timeout, zk.WithLogInfo(false), zk.WithLogger(discardLogger{}), zk.WithDialer(dialer))
	if err != nil {
		return fmt.Errorf("hbase: connect zookeeper %s: %w", l.Quorum, err)
	}
	defer func() {
		conn.Close()
		// Close does not wait for the session's goroutines. The library closes the event channel
		// once they are done: drain it, so no ZooKeeper goroutine outlives this call (bounded, in
		// case a future version keeps it open).
		t := time.NewTimer(2 * time.Second)
		defer t.Stop()
		for {
			select {
			case _, ok := <-events:
				if !ok {
					return
				}
			case <-t.C:
				return
			}
		}
	}()
	// Wait for the session so that a dead quorum fails by the context rather than after retries.
	for {
		select {
		case <-ctx.Done():
			dialMu.Lock()
			cause := lastDial
			dialMu.Unlock()
			if cause != nil {
				return fmt.Errorf("hbase: zookeeper %s: no session (%w): %v", l.Quorum, ctx.Err(), cause)
			}
			return fmt.Errorf("hbase: zookeeper %s: no session: %w", l.Quorum, ctx.Err())
		case ev := <-events:
			if ev.State == zk.StateHasSession {
				root := l.Root
				if root == "" {
					root = ZooKeeperRoot
				}
				return fn(conn, root)
			}
		}
	}
}

func (l ZooKeeperLocator) read(ctx context.Context, node string) ([]byte, error) {
	var b []byte
	err := l.do(ctx, func(conn *zk.Conn, root string) error {
		p := path.Join(root, node)
		var err error
		if b, _, err = conn.Get(p); err != nil {
			return fmt.Errorf("hbase: zookeeper %s: read %s: %w", l.Quorum, p, err)
		}
		return nil
	})
	return b, err
}

// RegionServers returns the region servers registered in ZooKeeper (the live ones: a server's
// ephemeral znode goes when its session ends), sorted by address.
func (l ZooKeeperLocator) RegionServers(ctx context.Context) ([]ServerName, error) {
	var out []ServerName
	err := l.do(ctx, func(conn *zk.Conn, root string) error {
		p := path.Join(root, "rs")
		names, _, err := conn.Children(p)
		if err != nil {
			return fmt.Errorf("hbase: zookeeper %s: list %s: %w", l.Quorum, p, err)
		}
		for _, n := range names {
			sn, err := parseServerNameString(n)
			if err != nil {
				return fmt.Errorf("hbase: zookeeper %s: %s: %w", l.Quorum, p, err)
			}
			out = append(out, sn)
		}
		return nil
	})
	slices.SortFunc(out, func(a, b ServerName) int { return strings.Compare(a.Addr(), b.Addr()) })
	return out, err
}

// MetaRegionServer returns the server that hosts hbase:meta and the state ZooKeeper records for it.
func (l ZooKeeperLocator) MetaRegionServer(ctx context.Context) (ServerName, RegionState, error) {
	b, err := l.read(ctx, "meta-region-server")
	if err != nil {
		return ServerName{}, 0, err
	}
	return parseMetaRegionServer(b)
}

// Master returns the active master.
func (l ZooKeeperLocator) Master(ctx context.Context) (ServerName, error) {
	b, err := l.read(ctx, "master")
	if err != nil {
		return ServerName{}, err
	}
	return parseMaster(b)
}

type discardLogger struct{}

// Printf drops go-zookeeper's log lines; failures reach callers as errors.
func (discardLogger) Printf(string, ...any) {}
