package hbase

import (
	"context"
	"fmt"
	"path"
	"strings"
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

func (l ZooKeeperLocator) read(ctx context.Context, node string) ([]byte, error) {
	servers := strings.Split(l.Quorum, ",")
	timeout := l.SessionTimeout
	if timeout == 0 {
		timeout = 10 * time.Second
	}
	conn, events, err := zk.Connect(servers, timeout, zk.WithLogInfo(false), zk.WithLogger(discardLogger{}))
	if err != nil {
		return nil, fmt.Errorf("hbase: connect zookeeper %s: %w", l.Quorum, err)
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
			return nil, fmt.Errorf("hbase: zookeeper %s: %w", l.Quorum, ctx.Err())
		case ev := <-events:
			if ev.State == zk.StateHasSession {
				goto connected
			}
		}
	}
connected:
	root := l.Root
	if root == "" {
		root = ZooKeeperRoot
	}
	p := path.Join(root, node)
	b, _, err := conn.Get(p)
	if err != nil {
		return nil, fmt.Errorf("hbase: zookeeper %s: read %s: %w", l.Quorum, p, err)
	}
	return b, nil
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
