package hbase

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestRegionAdmin lists, splits, unassigns and assigns regions of a real table, and checks what
// hbase:meta and the region server say after each step.
func TestRegionAdmin(t *testing.T) {
	c := testClient(t)
	table := testTable(t, c, "regadmin", fam("f"), [][]byte{[]byte("m")})
	ctx := testContext(t)
	adm := c.Admin()
	// Tables whose names extend this one's sort next to it in hbase:meta: their regions must not
	// be listed with it.
	for _, suffix := range []string{"x", "_"} {
		if err := adm.CreateTable(ctx, TableSpec{Name: table + suffix, Families: fam("f")}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = adm.DisableTable(context.Background(), table+suffix)
			_ = adm.DeleteTable(context.Background(), table+suffix)
		})
	}
	var ms []*Mutation
	for i := range 100 {
		ms = append(ms, put1(table, fmt.Sprintf("a%03d", i), "q", 1, "v"))
	}
	if err := c.Apply(ctx, ms); err != nil {
		t.Fatal(err)
	}
	rs, err := adm.Regions(ctx, table)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 2 || len(rs[0].StartKey) != 0 || string(rs[0].EndKey) != "m" || string(rs[1].StartKey) != "m" {
		t.Fatalf("regions of a table split at m: %+v", rs)
	}
	for _, r := range rs {
		if !r.Serving() || r.Table != table || r.EncodedName == "" || !bytes.HasSuffix(r.Name, []byte(r.EncodedName+".")) {
			t.Fatalf("region %+v: want serving, of %s, with its encoded name", r, table)
		}
	}
	loads, err := adm.RegionLoads(ctx, table)
	if err != nil {
		t.Fatal(err)
	}
	if l := loads[string(rs[0].Name)]; l.WriteRequests < 100 {
		t.Fatalf("load of the region written 100 times: %+v (all: %d regions)", l, len(loads))
	}

	at, err := adm.SplitPoint(ctx, rs[0])
	if err != nil || !rs[0].Contains(at) || bytes.Equal(at, rs[0].StartKey) {
		t.Fatalf("split point of %q: %q, %v", rs[0].Name, at, err)
	}
	if err := adm.SplitRegion(ctx, rs[0], at); err != nil {
		t.Fatalf("split at %q: %v", at, err)
	}
	after, err := adm.Regions(ctx, table)
	if err != nil {
		t.Fatal(err)
	}
	var serving []RegionInfo
	for _, r := range after {
		if bytes.Equal(r.Name, rs[0].Name) {
			if r.Serving() || !r.Split || !r.Offline {
				t.Fatalf("split parent after the split: %+v", r)
			}
			continue
		}
		if !r.Serving() {
			t.Fatalf("region %+v not serving after the split", r)
		}
		serving = append(serving, r)
	}
	if len(serving) != 3 || string(serving[0].EndKey) != string(at) || string(serving[1].StartKey) != string(at) ||
		string(serving[1].EndKey) != "m" || serving[0].ID <= rs[0].ID {
		t.Fatalf("regions after splitting at %q: %+v", at, serving)
	}
	// The client had the parent cached; its writes follow the daughters.
	if err := c.Apply(ctx, ms); err != nil {
		t.Fatalf("write after the split: %v", err)
	}
	if n := countRows(t, c, Scan{Table: table}); n != 100 {
		t.Fatalf("%d rows after the split, want 100", n)
	}

	// Unassigned, a region takes no writes; the other regions do.
	closed := serving[0]
	if err := adm.UnassignRegion(ctx, closed.Name); err != nil {
		t.Fatalf("unassign: %v", err)
	}
	now, err := adm.Regions(ctx, table)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range now {
		if bytes.Equal(r.Name, closed.Name) && (r.Serving() || r.State != "CLOSED") {
			t.Fatalf("unassigned region: %+v, want CLOSED", r)
		}
	}
	short, cancel := context.WithTimeout(ctx, 2*time.Second)
	err = c.Apply(short, []*Mutation{put1(table, "a000", "q", 2, "closed"), put1(table, "z", "q", 2, "open")})
	cancel()
	var be *BatchError
	if !errors.As(err, &be) || be.Errs[0] == nil || !IsRetriable(be.Errs[0]) || be.Errs[1] != nil {
		t.Fatalf("write to a closed and an open region: %v, want the closed one's to fail as retriable, the other to land", err)
	}
	if err := adm.AssignRegion(ctx, closed.Name); err != nil {
		t.Fatalf("assign: %v", err)
	}
	if err := c.Apply(ctx, []*Mutation{put1(table, "a000", "q", 2, "reopened")}); err != nil {
		t.Fatalf("write after assign: %v", err)
	}
	res, err := c.Get(ctx, Get{Table: table, Row: []byte("a000")})
	if v, _ := res.Value("f", "q"); err != nil || string(v) != "reopened" {
		t.Fatalf("get after assign: %q, %v", v, err)
	}
	// One region server: the master has nowhere to move a region, and says so by doing nothing.
	if err := adm.MoveRegion(ctx, closed.Name, ""); err != nil {
		t.Fatalf("move: %v", err)
	}
}

// TestApplyFollowsSplitsAndMoves writes without pause while the busiest region is split again
// and again and regions are unassigned and assigned: every write lands exactly once, the client
// follows each split to the daughters, and a retry resends only the actions that failed, never a
// whole batch.
func TestApplyFollowsSplitsAndMoves(t *testing.T) {
	if testing.Short() {
		t.Skip("splits regions of a real table for half a minute")
	}
	c := testClient(t)
	table := testTable(t, c, "splitload", fam("f"), [][]byte{[]byte("4"), []byte("8"), []byte("c")})
	ctx := testContext(t)
	adm := c.Admin()
	before := c.Stats()

	var written atomic.Int64
	var partial, whole atomic.Int64 // batches whose retries resent some, or all, of their actions
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		rng := rand.New(rand.NewPCG(1, 2))
		seq := 0
		for {
			select {
			case <-stop:
				return
			default:
			}
			ms := make([]*Mutation, 400)
			for i := range ms {
				// Unique rows spread over the whole key space, so every region takes writes.
				ms[i] = put1(table, fmt.Sprintf("%08x-%d", rng.Uint32(), seq), "q", 7, "v")
				seq++
			}
			s0 := c.Stats()
			todo := ms
			for len(todo) > 0 {
				err := c.Apply(ctx, todo)
				if err == nil {
					break
				}
				var be *BatchError
				if !errors.As(err, &be) {
					t.Errorf("apply: %v", err)
					return
				}
				var again []*Mutation
				for i, e := range be.Errs {
					if e == nil {
						continue
					}
					if !IsRetriable(e) {
						t.Errorf("write failed for good during splits and moves: %v", e)
						return
					}
					again = append(again, todo[i])
				}
				todo = again
			}
			resent := c.Stats().ActionsResent - s0.ActionsResent
			switch {
			case resent >= int64(len(ms)):
				whole.Add(1)
			case resent > 0:
				partial.Add(1)
			}
			written.Add(int64(len(ms)))
		}
	})

	splits, bounces := 0, 0
	for round := range 3 {
		time.Sleep(2 * time.Second)
		// Split the busiest serving region at the middle of its rows.
		loads, err := adm.RegionLoads(ctx, table)
		if err != nil {
			t.Fatal(err)
		}
		rs, err := adm.Regions(ctx, table)
		if err != nil {
			t.Fatal(err)
		}
		var serving []RegionInfo
		for _, r := range rs {
			if r.Serving() {
				serving = append(serving, r)
			}
		}
		sort.Slice(serving, func(i, j int) bool {
			return loads[string(serving[i].Name)].WriteRequests > loads[string(serving[j].Name)].WriteRequests
		})
		// The busiest region that can be split: a daughter holds references to its parent's
		// files until a compaction rewrites them, and the master refuses to split it until then.
		var at []byte
		split := false
		for _, r := range serving {
			if at, err = adm.SplitPoint(ctx, r); err != nil {
				continue
			}
			if err = adm.SplitRegion(ctx, r, at); err == nil {
				split = true
				break
			}
			if !strings.Contains(err.Error(), "NOT splittable") {
				t.Fatalf("split %d of %q at %q: %v", round, r.Name, at, err)
			}
		}
		if !split {
			t.Fatalf("split %d: no region could be split: %v", round, err)
		}
		splits++
		time.Sleep(time.Second)
		// Close another region for a moment, then open it again.
		rs, err = adm.Regions(ctx, table)
		if err != nil {
			t.Fatal(err)
		}
		var target *RegionInfo
		for i := range rs {
			if rs[i].Serving() && !bytes.Equal(rs[i].StartKey, at) {
				target = &rs[i]
			}
		}
		if err := adm.UnassignRegion(ctx, target.Name); err != nil {
			t.Fatalf("unassign %q: %v", target.Name, err)
		}
		time.Sleep(500 * time.Millisecond)
		if err := adm.AssignRegion(ctx, target.Name); err != nil {
			t.Fatalf("assign %q: %v", target.Name, err)
		}
		bounces++
	}
	time.Sleep(time.Second)
	close(stop)
	wg.Wait()
	if t.Failed() {
		return
	}

	rs, err := adm.Regions(ctx, table)
	if err != nil {
		t.Fatal(err)
	}
	nserving := 0
	for _, r := range rs {
		if r.Serving() {
			nserving++
		}
	}
	if nserving != 4+splits {
		t.Fatalf("%d regions serving after %d splits of 4, want %d", nserving, splits, 4+splits)
	}
	rows := scanRows(t, c, Scan{Table: table, MaxVersions: AllVersions})
	if int64(len(rows)) != written.Load() {
		t.Fatalf("%d rows in the table, %d written", len(rows), written.Load())
	}
	seen := map[string]bool{}
	for _, r := range rows {
		if seen[r] {
			t.Fatalf("row %s read twice", r)
		}
		seen[r] = true
	}
	st := c.Stats()
	sent, resent := st.ActionsSent-before.ActionsSent, st.ActionsResent-before.ActionsResent
	t.Logf("%d rows written in %d splits and %d unassign/assigns: %d actions sent, %d of them resends; %d relocations, %d meta lookups; %d batches resent in part, %d whole",
		written.Load(), splits, bounces, sent, resent, st.Relocations-before.Relocations, st.RegionLookups-before.RegionLookups, partial.Load(), whole.Load())
	if sent != written.Load()+resent {
		t.Fatalf("%d actions sent for %d rows and %d resends: something was sent that was neither", sent, written.Load(), resent)
	}
	if st.Relocations == before.Relocations || resent == 0 {
		t.Fatal("no region was ever refused: the splits and moves did not meet the writes, so the test proves nothing")
	}
	if partial.Load() == 0 {
		t.Fatal("no batch had only part of its actions resent")
	}
}

// TestRegionMovedGoesToNewServer: a RegionMovedException names the region's new server, in the
// ExceptionResponse or, inside a Multi response, in its message; the client caches the region
// there at once instead of asking hbase:meta, which may still name the old server.
func TestRegionMovedGoesToNewServer(t *testing.T) {
	for msg, want := range map[string]string{
		"Region moved to: hostname=rs2.example port=16020 startCode=1796043956983. As of locationSeqNum=42.": "rs2.example:16020",
		"Region moved to: hostname=10.0.0.7 port=16021 startCode=1.":                                         "10.0.0.7:16021",
		"something else":                     "",
		"Region moved to: hostname= port=1.": "",
	} {
		if got := movedTo(msg); got != want {
			t.Errorf("movedTo(%q) = %q, want %q", msg, got, want)
		}
	}
	c := bareClient(Config{})
	r := &region{table: "t", name: []byte("t,,1.abc."), addr: "rs1:16020"}
	c.regions.add(r)
	exc := remoteError("multi", "rs1:16020", "org.apache.hadoop.hbase.exceptions.RegionMovedException",
		"org.apache.hadoop.hbase.exceptions.RegionMovedException: Region moved to: hostname=rs2 port=16020 startCode=5. As of locationSeqNum=9.\n\tat ...", false)
	if exc.Kind != KindRelocate || exc.MovedTo != "rs2:16020" {
		t.Fatalf("RegionMovedException: %+v, want relocate to rs2:16020", exc)
	}
	c.relocate(r, exc)
	if got := c.regions.lookup("t", []byte("k")); got == nil || got.addr != "rs2:16020" || !bytes.Equal(got.name, r.name) {
		t.Fatalf("cache after RegionMoved: %+v, want the same region on rs2:16020", got)
	}
	// Without a destination, the region is forgotten and looked up again.
	c.relocate(c.regions.lookup("t", []byte("k")), remoteError("multi", "rs2:16020", "org.apache.hadoop.hbase.NotServingRegionException", "x", false))
	if got := c.regions.lookup("t", []byte("k")); got != nil {
		t.Fatalf("cache after NotServingRegion: %+v, want nothing", got)
	}
}
