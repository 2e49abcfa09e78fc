package main

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/abacus-stream/abacus/hbase"
)

// Fault kinds of -hbase-cluster, where HBase is a ZooKeeper, a master and three region servers
// (testenv/services.sh HBASE_REGIONSERVERS=3) instead of one process.
const (
	faultRSKill   = "rs-kill"     // a region server other than hbase:meta's SIGKILLed, started again
	faultMetaKill = "meta-kill"   // the region server holding hbase:meta SIGKILLed, started again
	faultMoves    = "region-move" // regions moved by hand to other servers, then the balancer run
)

// cluster is what the faults know of the HBase cluster: its ZooKeeper and where its region
// servers listen (server n on port+10+n, as services.sh lays them out).
type cluster struct {
	zk      string
	port    int
	servers int
}

// number is the region server number of addr (host:port), 0 when it is none of the cluster's.
func (c *cluster) number(addr string) int {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(p)
	if n -= c.port + 10; n < 1 || n > c.servers {
		return 0
	}
	return n
}

// metaServer is the number of the region server ZooKeeper says holds hbase:meta.
func (c *cluster) metaServer(ctx context.Context) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	sn, _, err := hbase.ZooKeeperLocator{Quorum: c.zk}.MetaRegionServer(ctx)
	if err != nil {
		return 0, err
	}
	if n := c.number(sn.Addr()); n != 0 {
		return n, nil
	}
	return 0, fmt.Errorf("hbase:meta on %s, none of the cluster's region servers", sn.Addr())
}

// rsKill SIGKILLs a region server (meta's, or a random other one) while the pipeline writes, and
// starts it again after a few seconds: its regions, and meta with it, are reassigned once the
// master expires the dead server, their WALs split and replayed.
func (f *faults) rsKill(ctx context.Context, meta bool) error {
	f.hbaseMu.Lock()
	defer f.hbaseMu.Unlock()
	c := f.cluster
	m, err := c.metaServer(ctx)
	if err != nil {
		return err
	}
	victim := m
	if !meta {
		victim = 1 + (m+f.rng.IntN(c.servers-1))%c.servers // any server but meta's
	}
	n := strconv.Itoa(victim)
	t0 := time.Now()
	if _, err := f.svc.run(ctx, "hbase", "kill-rs", n); err != nil {
		return err
	}
	what := "region server " + n
	if meta {
		what += " (hbase:meta's)"
	}
	wait := time.Duration(3+f.rng.IntN(15)) * time.Second
	f.logf("%s SIGKILLed; starting it again in %v", what, wait)
	select {
	case <-ctx.Done():
	case <-time.After(wait):
	}
	if _, err := f.svc.run(context.WithoutCancel(ctx), "hbase", "start-rs", n); err != nil {
		return err
	}
	kind := faultRSKill
	if meta {
		kind = faultMetaKill
		// Meta is reopened on a live server: wait until ZooKeeper names one, to count the move.
		deadline := time.Now().Add(3 * time.Minute)
		for time.Now().Before(deadline) {
			now, err := c.metaServer(ctx)
			if err == nil && now != 0 {
				f.mu.Lock()
				if now != m {
					f.metaMoves++
				}
				f.mu.Unlock()
				f.logf("hbase:meta on region server %d after the kill (was %d)", now, m)
				break
			}
			time.Sleep(time.Second)
		}
	}
	f.note(kind)
	f.logf("%s back after %v", what, time.Since(t0).Round(time.Second))
	return nil
}

// moveRegions moves a few serving regions of each table to another live server, then runs the
// balancer, which moves regions back.
func (f *faults) moveRegions(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	live, err := hbase.ZooKeeperLocator{Quorum: f.cluster.zk}.RegionServers(ctx)
	if err != nil {
		return err
	}
	if len(live) < 2 {
		return fmt.Errorf("%d live region servers: nowhere to move a region", len(live))
	}
	adm := f.hb.Admin()
	moved := 0
	for _, table := range f.tables {
		rs, err := adm.Regions(ctx, table)
		if err != nil {
			return err
		}
		for _, k := range f.rng.Perm(len(rs)) {
			r := rs[k]
			if !r.Serving() {
				continue
			}
			var dest hbase.ServerName
			for _, i := range f.rng.Perm(len(live)) {
				if live[i].Addr() != r.Server {
					dest = live[i]
					break
				}
			}
			if err := adm.MoveRegion(ctx, r.Name, dest.String()); err != nil {
				return fmt.Errorf("move %s region %s to %s: %w", table, r.EncodedName, dest.Addr(), err)
			}
			moved++
			if moved%3 == 0 {
				break
			}
		}
	}
	res, err := adm.Balance(ctx)
	if err != nil {
		return fmt.Errorf("balancer after %d moves: %w", moved, err)
	}
	f.mu.Lock()
	f.regionMoves += moved + res.MovesExecuted
	f.mu.Unlock()
	f.note(faultMoves)
	f.logf("moved %d regions by hand, then the balancer moved %d", moved, res.MovesExecuted)
	return nil
}
