package testenv

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/abacus-stream/abacus/hbase"
	"github.com/abacus-stream/abacus/internal/testenv/gate"
)

// The HBase cluster (HBASE_REGIONSERVERS=3 SERVICES=hbase testenv/services.sh start) is opt-in:
// its tests skip unless `testenv/services.sh env` of that mode was evaluated.
const (
	envHBaseCluster    = "ABACUS_HBASE_CLUSTER_ZK"
	envHBaseClusterRS  = "ABACUS_HBASE_CLUSTER_REGIONSERVERS"
	envHBaseClusterDir = "ABACUS_HBASE_CLUSTER_DIR"
)

type hbaseCluster struct {
	zk, dir string
	servers int
	port    int // ZooKeeper's port, the script's HBASE_CLUSTER_PORT
}

func hbaseClusterFor(t *testing.T) *hbaseCluster {
	t.Helper()
	zk := os.Getenv(envHBaseCluster)
	if zk == "" {
		t.Skip(envHBaseCluster + " is unset: no HBase cluster; start one with " +
			"`HBASE_REGIONSERVERS=3 SERVICES=hbase testenv/services.sh start` and eval its `env`")
	}
	zk = gate.Find(t, "HBase cluster", envHBaseCluster, zk)
	n, err := strconv.Atoi(os.Getenv(envHBaseClusterRS))
	if err != nil || n < 2 {
		t.Skipf("%s=%q: the cluster needs at least 2 region servers", envHBaseClusterRS, os.Getenv(envHBaseClusterRS))
	}
	_, p, err := net.SplitHostPort(zk)
	if err != nil {
		t.Fatal(err)
	}
	port, _ := strconv.Atoi(p)
	return &hbaseCluster{zk: zk, dir: os.Getenv(envHBaseClusterDir), servers: n, port: port}
}

// script runs testenv/services.sh in the cluster's mode.
func (c *hbaseCluster) script(t *testing.T, args ...string) {
	t.Helper()
	cmd := exec.Command(gate.ServicesScript(t), args...)
	cmd.Env = append(os.Environ(), "SERVICES=hbase", "HBASE_REGIONSERVERS="+strconv.Itoa(c.servers),
		"HBASE_CLUSTER_PORT="+strconv.Itoa(c.port), "ABACUS_TESTENV_DIR="+c.dir)
	out, err := cmd.CombinedOutput()
	t.Logf("services.sh %v:\n%s", args, out)
	if err != nil {
		t.Fatalf("services.sh %v: %v", args, err)
	}
}

// serverNumber maps a region server's host:port to the script's N (port = cluster port + 10 + N).
func (c *hbaseCluster) serverNumber(t *testing.T, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	port, _ := strconv.Atoi(p)
	return port - c.port - 10
}

// TestHBaseClusterKillRegionServer writes rows into regions spread over the cluster's region
// servers, SIGKILLs the one holding most of them, and measures how long until every region is open
// elsewhere and every row (acknowledged, so far only in the dead server's WAL) reads back through
// the client that was connected before the kill.
func TestHBaseClusterKillRegionServer(t *testing.T) {
	c := hbaseClusterFor(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cl, err := hbase.NewClient(ctx, hbase.Config{ZooKeeper: c.zk})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	table := fmt.Sprintf("cluster_kill_%d", time.Now().UnixNano())
	var splits [][]byte
	for i := 1; i < 6; i++ {
		splits = append(splits, []byte(fmt.Sprintf("r%d", i)))
	}
	if err := cl.Admin().CreateTable(ctx, hbase.TableSpec{Name: table,
		Families: []hbase.FamilySpec{{Name: "f"}}, SplitKeys: splits}); err != nil {
		t.Fatal(err)
	}
	DropTableAtEnd(t, cl, table)

	regions, err := cl.Admin().Regions(ctx, table)
	if err != nil {
		t.Fatal(err)
	}
	perServer := map[string]int{}
	for _, r := range regions {
		perServer[r.Server]++
	}
	t.Logf("%d regions on %d servers: %v", len(regions), len(perServer), perServer)
	if len(perServer) < 2 {
		t.Fatalf("regions all on one server: %v", perServer)
	}

	rows := 600
	put := func(ctx context.Context, cl *hbase.Client, i int, v string) error {
		row := []byte(fmt.Sprintf("r%d-%04d", i%6, i))
		return cl.Apply(ctx, []*hbase.Mutation{hbase.NewPut(table, row).Add("f", []byte("q"), 0, []byte(v))})
	}
	get := func(ctx context.Context, cl *hbase.Client, i int, want string) error {
		row := []byte(fmt.Sprintf("r%d-%04d", i%6, i))
		res, err := cl.Get(ctx, hbase.Get{Table: table, Row: row})
		if err != nil {
			return err
		}
		if v, ok := res.Value("f", "q"); !ok || string(v) != want {
			return fmt.Errorf("row %s: got %q (found %v), want %q", row, v, ok, want)
		}
		return nil
	}
	for i := 0; i < rows; i++ {
		if err := put(ctx, cl, i, "v1"); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < rows; i++ {
		if err := get(ctx, cl, i, "v1"); err != nil {
			t.Fatal(err)
		}
	}

	victim, most := "", 0
	servers := make([]string, 0, len(perServer))
	for s := range perServer {
		servers = append(servers, s)
	}
	sort.Strings(servers)
	for _, s := range servers {
		if perServer[s] > most {
			victim, most = s, perServer[s]
		}
	}
	n := c.serverNumber(t, victim)
	t.Cleanup(func() { c.script(t, "start-rs", strconv.Itoa(n)) })
	killed := time.Now()
	c.script(t, "kill-rs", strconv.Itoa(n))

	// Every region open on another server, as hbase:meta says.
	var reassigned time.Duration
	for {
		rs, err := cl.Admin().Regions(ctx, table)
		moved := err == nil && len(rs) == len(regions)
		for _, r := range rs {
			if !r.Serving() || r.Server == victim {
				moved = false
			}
		}
		if moved {
			reassigned = time.Since(killed)
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("regions not reassigned %v after the kill: %v", time.Since(killed), err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// Every row back (the dead server's WAL was split and replayed), and writes taken again,
	// through the client that knew the regions before the kill: it must find where they went
	// (a refused dial forgets the dead server's regions), not keep dialling the dead address.
	var firstWrite, readBack time.Duration
	onVictim := map[int]bool{} // row prefix r<k> -> its region was on the killed server
	for _, r := range regions {
		for k := 0; k < 6; k++ {
			key := []byte(fmt.Sprintf("r%d-", k))
			if r.Server == victim && bytes.Compare(key, r.StartKey) >= 0 && (len(r.EndKey) == 0 || bytes.Compare(key, r.EndKey) < 0) {
				onVictim[k] = true
			}
		}
	}
	for i := 0; i < rows; i++ {
		for {
			octx, ocancel := context.WithTimeout(ctx, 10*time.Second)
			err := get(octx, cl, i, "v1")
			if err == nil {
				err = put(octx, cl, i, "v2")
			}
			ocancel()
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("row %d not readable and writable %v after the kill: %v", i, time.Since(killed), err)
			}
			time.Sleep(200 * time.Millisecond)
		}
		if firstWrite == 0 && onVictim[i%6] {
			firstWrite = time.Since(killed)
		}
	}
	readBack = time.Since(killed)
	fresh, err := hbase.NewClient(ctx, hbase.Config{ZooKeeper: c.zk})
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	for i := 0; i < rows; i++ {
		if err := get(ctx, fresh, i, "v2"); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("client stats after the kill: %+v", cl.Stats())
	t.Logf("SIGKILLed region server %d (%s, %d of %d regions): all regions open elsewhere after %v, "+
		"first write to a moved region after %v, all %d rows read back and rewritten by the pre-kill client after %v", n, victim, most, len(regions),
		reassigned.Round(time.Millisecond), firstWrite.Round(time.Millisecond), rows, readBack.Round(time.Millisecond))
}
