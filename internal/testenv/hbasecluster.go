package testenv

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/abacus-stream/abacus/hbase"
	"github.com/abacus-stream/abacus/internal/testenv/gate"
)

// Environment of the HBase cluster that `HBASE_REGIONSERVERS=3 SERVICES=hbase
// testenv/services.sh start` runs; its `env` prints them (and ABACUS_HBASE_ZK, so that every
// HBase test of a run on it uses the cluster).
const (
	EnvHBaseCluster    = "ABACUS_HBASE_CLUSTER_ZK"
	EnvHBaseClusterRS  = "ABACUS_HBASE_CLUSTER_REGIONSERVERS"
	EnvHBaseClusterDir = "ABACUS_HBASE_CLUSTER_DIR"
	// EnvRequireHBaseCluster makes a missing HBase cluster fail TestHBaseCluster* tests instead
	// of skipping them (testenv/run-tests.sh sets it in its HBase-cluster stage).
	EnvRequireHBaseCluster = "ABACUS_REQUIRE_HBASE_CLUSTER"
)

const hbaseClusterHint = "start one with `HBASE_REGIONSERVERS=3 SERVICES=hbase testenv/services.sh start` and eval its `env` " +
	"(testenv/run-tests.sh does this in its HBase-cluster stage)"

// HBaseCluster is the real HBase cluster of testenv/services.sh: a ZooKeeper, an HMaster and N
// region servers, each its own JVM. Tests SIGKILL, stop, pause and start region servers through
// it; region server n (1-based) listens on the cluster port + 10 + n.
type HBaseCluster struct {
	ZooKeeper string
	Servers   int
	dir       string
	port      int // ZooKeeper's port, the script's HBASE_CLUSTER_PORT
}

// HBaseClusterFor returns the running HBase cluster, or skips the test when none is configured
// (fails it when ABACUS_REQUIRE_HBASE_CLUSTER=1). The test holds the cluster alone until it ends:
// two tests killing region servers at once would each see the other's outage as its own.
func HBaseClusterFor(t testing.TB) *HBaseCluster {
	t.Helper()
	fail := t.Skip
	if os.Getenv(EnvRequireHBaseCluster) == "1" {
		fail = t.Fatal
	}
	zk := os.Getenv(EnvHBaseCluster)
	if zk == "" {
		fail(EnvHBaseCluster + " is unset: no HBase cluster; " + hbaseClusterHint)
		return nil
	}
	n, err := strconv.Atoi(os.Getenv(EnvHBaseClusterRS))
	if err != nil || n < 2 {
		fail(fmt.Sprintf("%s=%q: the cluster needs at least 2 region servers", EnvHBaseClusterRS, os.Getenv(EnvHBaseClusterRS)))
		return nil
	}
	_, p, err := net.SplitHostPort(zk)
	if err != nil {
		t.Fatalf("%s=%s: %v", EnvHBaseCluster, zk, err)
	}
	port, _ := strconv.Atoi(p)
	c := &HBaseCluster{ZooKeeper: zk, Servers: n, dir: os.Getenv(EnvHBaseClusterDir), port: port}
	if c.dir == "" {
		fail(EnvHBaseClusterDir + " is unset: tests could not kill and restart region servers; " + hbaseClusterHint)
		return nil
	}
	c.lock(t)
	if conn, err := net.DialTimeout("tcp", zk, 2*time.Second); err != nil {
		fail(fmt.Sprintf("HBase cluster's ZooKeeper %s not reachable: %v; %s", zk, err, hbaseClusterHint))
		return nil
	} else {
		conn.Close()
	}
	return c
}

// lock takes the cluster's test lock until the test ends, and then starts every region server a
// test left stopped or paused, so the next test finds the whole cluster.
func (c *HBaseCluster) lock(t testing.TB) {
	t.Helper()
	holdTestLock(t, filepath.Join(c.dir, "hbase-cluster"), "the HBase cluster", func() {
		for n := 1; n <= c.Servers; n++ {
			c.Resume(t, n) // a paused one first: start-rs leaves a running process alone
			c.Start(t, n)
		}
	})
}

// Addr is region server n's host:port.
func (c *HBaseCluster) Addr(n int) string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(c.port+10+n))
}

// Number is the region server number of a host:port the cluster's servers listen on, 0 if none.
func (c *HBaseCluster) Number(addr string) int {
	for n := 1; n <= c.Servers; n++ {
		if c.Addr(n) == addr {
			return n
		}
	}
	return 0
}

// Kill SIGKILLs region server n; Stop stops it cleanly; Start starts it and waits until it
// registered; Pause and Resume SIGSTOP and SIGCONT it.
func (c *HBaseCluster) Kill(t testing.TB, n int) { t.Helper(); c.script(t, "kill-rs", strconv.Itoa(n)) }

// Stop stops region server n cleanly (its regions close and move first).
func (c *HBaseCluster) Stop(t testing.TB, n int) { t.Helper(); c.script(t, "stop-rs", strconv.Itoa(n)) }

// Start starts region server n (if stopped) and waits until it registered with the master.
func (c *HBaseCluster) Start(t testing.TB, n int) {
	t.Helper()
	c.script(t, "start-rs", strconv.Itoa(n))
}

// Pause SIGSTOPs region server n: its sockets stay open and nothing answers.
func (c *HBaseCluster) Pause(t testing.TB, n int) {
	t.Helper()
	c.script(t, "pause-rs", strconv.Itoa(n))
}

// Resume SIGCONTs region server n if it runs (a stopped one is left alone).
func (c *HBaseCluster) Resume(t testing.TB, n int) {
	t.Helper()
	pid, err := os.ReadFile(filepath.Join(c.dir, "hbase-cluster", "rs-"+strconv.Itoa(n)+".pid"))
	if err != nil {
		return
	}
	if p, err := strconv.Atoi(string(bytes.TrimSpace(pid))); err == nil {
		_ = syscall.Kill(p, syscall.SIGCONT)
	}
}

// MetaServer is the region server number hbase:meta is open on, as ZooKeeper says.
func (c *HBaseCluster) MetaServer(t testing.TB) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sn, _, err := hbase.ZooKeeperLocator{Quorum: c.ZooKeeper}.MetaRegionServer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	n := c.Number(sn.Addr())
	if n == 0 {
		t.Fatalf("hbase:meta on %s, not a region server of the cluster", sn.Addr())
	}
	return n
}

// Live lists the region servers registered in ZooKeeper, as host:port,startcode (what a move
// names), keyed by number.
func (c *HBaseCluster) Live(t testing.TB) map[int]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ss, err := hbase.ZooKeeperLocator{Quorum: c.ZooKeeper}.RegionServers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]string{}
	for _, s := range ss {
		if n := c.Number(s.Addr()); n != 0 {
			out[n] = s.String()
		}
	}
	return out
}

// script runs testenv/services.sh in the cluster's mode, data folder and ports.
func (c *HBaseCluster) script(t testing.TB, args ...string) {
	t.Helper()
	cmd := exec.Command(gate.ServicesScript(t), args...)
	cmd.Env = append(os.Environ(), "SERVICES=hbase", "HBASE_REGIONSERVERS="+strconv.Itoa(c.Servers),
		"HBASE_CLUSTER_PORT="+strconv.Itoa(c.port), "ABACUS_TESTENV_DIR="+c.dir)
	if err := runLogged(t, cmd); err != nil {
		t.Fatal(err)
	}
}
