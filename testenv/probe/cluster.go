package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/abacus-stream/abacus/hbase"
)

// clusterCommand runs one of the HBase cluster's operator commands (testenv/services.sh regions,
// move-region, balance) and returns what to print.
func clusterCommand(ctx context.Context, quorum, cmd string, args []string) (string, error) {
	cl, err := hbase.NewClient(ctx, hbase.Config{ZooKeeper: quorum})
	if err != nil {
		return "", err
	}
	defer cl.Close()
	adm := cl.Admin()
	switch cmd {
	case "regions": // regions TABLE...: where each region is open, and hbase:meta
		var b strings.Builder
		sn, _, err := hbase.ZooKeeperLocator{Quorum: quorum}.MetaRegionServer(ctx)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "hbase:meta %s\n", sn.Addr())
		for _, t := range args {
			rs, err := adm.Regions(ctx, t)
			if err != nil {
				return "", err
			}
			for _, r := range rs {
				fmt.Fprintf(&b, "%s %s start=%q end=%q %s %s\n", t, r.EncodedName, r.StartKey, r.EndKey, r.Server, r.State)
			}
		}
		return strings.TrimSuffix(b.String(), "\n"), nil
	case "move": // move TABLE ENCODED HOST:PORT
		if len(args) != 3 {
			return "", fmt.Errorf("move TABLE ENCODED_REGION HOST:PORT")
		}
		rs, err := adm.Regions(ctx, args[0])
		if err != nil {
			return "", err
		}
		var name []byte
		for _, r := range rs {
			if r.EncodedName == args[1] {
				name = r.Name
			}
		}
		if name == nil {
			return "", fmt.Errorf("table %s has no region %s", args[0], args[1])
		}
		dest, err := liveServer(ctx, quorum, args[2])
		if err != nil {
			return "", err
		}
		if err := adm.MoveRegion(ctx, name, dest); err != nil {
			return "", err
		}
		return fmt.Sprintf("moved %s of %s to %s", args[1], args[0], dest), nil
	case "balance":
		res, err := adm.Balance(ctx)
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("balancer ran=%v: %d moves calculated, %d executed", res.Ran, res.MovesCalculated, res.MovesExecuted), nil
	}
	return "", fmt.Errorf("unknown cluster command %q", cmd)
}

// liveServer names the live region server at addr as a move wants it: host:port,startcode.
func liveServer(ctx context.Context, quorum, addr string) (string, error) {
	servers, err := hbase.ZooKeeperLocator{Quorum: quorum}.RegionServers(ctx)
	if err != nil {
		return "", err
	}
	var live []string
	for _, s := range servers {
		if s.Addr() == addr {
			return s.String(), nil
		}
		live = append(live, s.Addr())
	}
	return "", fmt.Errorf("no live region server at %s (live: %s)", addr, strings.Join(live, " "))
}
