package testenv

import (
	"bytes"
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/abacus-stream/abacus/hbase"
)

// TestHBaseClusterKillRegionServer writes rows into regions spread over the cluster's region
// servers, SIGKILLs the one holding most of them, and measures how long until every region is open
// elsewhere and every row (acknowledged, so far only in the dead server's WAL) reads back through
// the client that was connected before the kill.
func TestHBaseClusterKillRegionServer(t *testing.T) {
	c := HBaseClusterFor(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cl, err := hbase.NewClient(ctx, hbase.Config{ZooKeeper: c.ZooKeeper})
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
	n := c.Number(victim)
	killed := time.Now()
	c.Kill(t, n)

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
	fresh, err := hbase.NewClient(ctx, hbase.Config{ZooKeeper: c.ZooKeeper})
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
