package hbase

import (
	"bytes"
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

func TestPrefixEnd(t *testing.T) {
	for _, tc := range []struct{ in, want []byte }{
		{[]byte("ab1|"), []byte("ab1}")},
		{[]byte("ab1"), []byte("ab2")},
		{[]byte{'a', 0xff}, []byte("b")},
		{[]byte{0xff, 0xff}, nil},
	} {
		if got := prefixEnd(tc.in); !bytes.Equal(got, tc.want) {
			t.Errorf("prefixEnd(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestClassify(t *testing.T) {
	for class, want := range map[string]ErrorKind{
		"org.apache.hadoop.hbase.NotServingRegionException":                   KindRelocate,
		"org.apache.hadoop.hbase.exceptions.RegionMovedException":             KindRelocate,
		"org.apache.hadoop.hbase.CallQueueTooBigException":                    KindBackoff,
		"org.apache.hadoop.hbase.ipc.ServerNotRunningYetException":            KindReconnect,
		"org.apache.hadoop.hbase.regionserver.NoSuchColumnFamilyException":    KindPermanent,
		"org.apache.hadoop.hbase.TableNotFoundException":                      KindPermanent,
		"org.apache.hadoop.hbase.DoNotRetryIOException":                       KindPermanent,
		"org.apache.hadoop.hbase.SomethingNewException":                       KindBackoff,
		"org.apache.hadoop.hbase.regionserver.RegionServerStoppedException":   KindReconnect,
		"org.apache.hadoop.hbase.exceptions.FailedSanityCheckException":       KindPermanent,
		"org.apache.hadoop.hbase.quotas.RpcThrottlingException":               KindBackoff,
		"org.apache.hadoop.hbase.exceptions.UnknownProtocolException":         KindPermanent,
		"org.apache.hadoop.hbase.regionserver.RegionServerAbortedException":   KindReconnect,
		"org.apache.hadoop.hbase.PleaseHoldException":                         KindBackoff,
		"org.apache.hadoop.hbase.ipc.CallTimeoutException":                    KindBackoff,
		"org.apache.hadoop.hbase.regionserver.WrongRegionException":           KindRelocate,
		"org.apache.hadoop.hbase.exceptions.RegionOpeningException":           KindBackoff,
		"org.apache.hadoop.hbase.client.RetriesExhaustedWithDetailsException": KindBackoff,
		"org.apache.hadoop.hbase.UnknownScannerException":                     KindBackoff,
		"org.apache.hadoop.hbase.exceptions.OutOfOrderScannerNextException":   KindBackoff,
		"org.apache.hadoop.hbase.NamespaceNotFoundException":                  KindPermanent,
		"org.apache.hadoop.hbase.TableExistsException":                        KindPermanent,
		"org.apache.hadoop.hbase.MasterNotRunningException":                   KindBackoff,
		"org.apache.hadoop.hbase.RegionTooBusyException":                      KindBackoff,
		"org.apache.hadoop.hbase.ipc.FatalConnectionException":                KindPermanent,
		"org.apache.hadoop.hbase.quotas.SpaceLimitingException":               KindBackoff,
		"org.apache.hadoop.hbase.security.AccessDeniedException":              KindPermanent,
		"org.apache.hadoop.hbase.client.DoNotRetryRegionException":            KindBackoff,
		"java.io.IOException": KindBackoff,
		"org.apache.hadoop.hbase.regionserver.NoSuchColumnFamilyExceptionXXX": KindBackoff,
	} {
		if got := classify(class, "", false); got != want {
			t.Errorf("classify(%s) = %v, want %v", class, got, want)
		}
	}
	if classify("java.io.IOException", "x: Cannot append; log is closed", false) != KindRelocate {
		t.Error("closed WAL is not classified as relocate")
	}
	if classify("org.apache.hadoop.hbase.SomethingNewException", "", true) != KindPermanent {
		t.Error("do_not_retry is not permanent")
	}
}

// TestMultiRequestEncoding checks what the server relies on: the MutationProto carries row, type,
// durability only when asked for, and associated_cell_count; cells go to the cell block in order.
func TestMultiRequestEncoding(t *testing.T) {
	ms := []*Mutation{
		NewPut("t", []byte("r1")).Add("f", []byte("a"), 5, []byte("v")),
		NewPut("t", []byte("r2")).Add("f", []byte("a"), 6, nil).Add("f", []byte("b"), 7, []byte("w")),
	}
	ms[1].Durability = SkipWAL
	req := &multiRequest{regions: []regionActions{{r: &region{name: []byte("t,,1.x.")}, idx: []int{0, 1}}}}
	b, cells := appendMultiRequest(nil, nil, ms, req)
	var durabilities, counts []uint64
	err := eachField(b, func(num protowire.Number, _ protowire.Type, _ uint64, ra []byte) error {
		return eachField(ra, func(num protowire.Number, _ protowire.Type, _ uint64, action []byte) error {
			if num != 3 {
				return nil
			}
			return eachField(action, func(num protowire.Number, _ protowire.Type, _ uint64, mp []byte) error {
				if num != 2 {
					return nil
				}
				d := uint64(0)
				err := eachField(mp, func(num protowire.Number, _ protowire.Type, v uint64, _ []byte) error {
					switch num {
					case 6:
						d = v
					case 8:
						counts = append(counts, v)
					}
					return nil
				})
				durabilities = append(durabilities, d)
				return err
			})
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(counts) != 2 || counts[0] != 1 || counts[1] != 2 || durabilities[0] != 0 || durabilities[1] != uint64(SkipWAL) {
		t.Fatalf("cell counts %v durabilities %v", counts, durabilities)
	}
	cr := cellReader{b: cells}
	var ts []int64
	for len(cr.b) > 0 {
		c, err := cr.next()
		if err != nil {
			t.Fatal(err)
		}
		ts = append(ts, c.Timestamp)
		if c.Value == nil || c.Type != CellPut {
			t.Fatalf("cell %+v", c)
		}
	}
	if len(ts) != 3 || ts[0] != 5 || ts[1] != 6 || ts[2] != 7 {
		t.Fatalf("cell block timestamps %v, want 5 6 7", ts)
	}
}

// TestResetPut: Puts made in a slab encode exactly as NewPut's, each with its own cells, and a
// reset forgets what the mutation was before (a delete, an invalid cell, its durability).
func TestResetPut(t *testing.T) {
	slab := make([]Mutation, 3)
	slab[1] = *NewDelete("old", []byte("x")).DeleteFamily("f", 1)
	slab[2].ResetPut("t", []byte("r")).Add("f", []byte("q"), -1, nil) // invalid: negative timestamp
	slab[2].Durability = SkipWAL
	var ms, want []*Mutation
	for i := range slab {
		row := []byte{'r', byte('0' + i)}
		ms = append(ms, slab[i].ResetPut("t", row).Add("f", []byte("a"), int64(i), []byte{byte(i)}).Add("f", []byte("b"), 9, nil))
		want = append(want, NewPut("t", row).Add("f", []byte("a"), int64(i), []byte{byte(i)}).Add("f", []byte("b"), 9, nil))
	}
	req := &multiRequest{regions: []regionActions{{r: &region{name: []byte("t,,1.x.")}, idx: []int{0, 1, 2}}}}
	gotB, gotCells := appendMultiRequest(nil, nil, ms, req)
	wantB, wantCells := appendMultiRequest(nil, nil, want, req)
	if !bytes.Equal(gotB, wantB) || !bytes.Equal(gotCells, wantCells) {
		t.Fatalf("slab Puts encode as\n%x %x\nNewPut's as\n%x %x", gotB, gotCells, wantB, wantCells)
	}
	for i, m := range ms {
		if err := m.validate(); err != nil {
			t.Fatalf("Put %d: %v", i, err)
		}
	}
}

// TestRefusedDialForgetsServer: a region server that refuses connections (SIGKILLed, its regions
// reassigned) must not stay in the region cache, or every retry dials the dead address again
// until the client is recreated; the next lookup has to go to hbase:meta.
func TestRefusedDialForgetsServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close() // nothing listens there now: dials are refused
	var cfg Config
	cfg.ZooKeeper = "127.0.0.1:1"
	cfg.EnsureDefaults()
	c := &Client{cfg: cfg, conns: map[string]*conn{}, dials: map[string]*dialWait{}, sems: map[string]chan struct{}{}}
	c.regions.add(&region{table: "t", name: []byte("t,,1.a."), addr: dead})
	c.regions.add(&region{table: "t", name: []byte("t,m,1.b."), start: []byte("m"), addr: "127.0.0.1:2"})
	c.metaAddr = dead
	p := getBuf()
	_, _, err = c.rpc(context.Background(), serviceClient, dead, "Get", p, nil)
	var e *Error
	if !errors.As(err, &e) || e.Kind != KindReconnect {
		t.Fatalf("dial of a closed port: %v, want a reconnect-class error", err)
	}
	if r := c.regions.lookup("t", []byte("a")); r != nil {
		t.Fatalf("region on the dead server still cached at %s", r.addr)
	}
	if r := c.regions.lookup("t", []byte("z")); r == nil {
		t.Fatal("a region on another server was forgotten too")
	}
	if c.metaAddr != "" {
		t.Fatalf("hbase:meta still located on the dead server %s", c.metaAddr)
	}
}

// TestInvalidateOnEmptyCache: an admin call that moves a region through a client that never
// looked a region up (so has no cache at all) must not panic.
func TestInvalidateOnEmptyCache(t *testing.T) {
	var c Client
	c.sems = map[string]chan struct{}{}
	c.invalidate(&region{table: "t", name: []byte("t,,1.a.")})
	c.regions.dropAll()
	c.invalidate(&region{table: "t", name: []byte("t,,1.a.")})
	if r := c.regions.lookup("t", []byte("a")); r != nil {
		t.Fatalf("found %v in an empty cache", r)
	}
}

// TestPauseAfterRelocations: a round retried only because regions moved or their server is gone
// waits at most RelocateBackoffMax, however many rounds came before; a busy-server cause (or an
// authentication failure) doubles from BackoffMin with each such round up to BackoffMax, not
// counting the relocation rounds before it, so a region that reopened elsewhere and answers
// "opening" once is asked again soon.
func TestPauseAfterRelocations(t *testing.T) {
	c := bareClient(Config{})
	moved := &Error{Op: "multi", Kind: KindRelocate, Message: "RegionMovedException"}
	gone := &Error{Op: "dial", Kind: KindReconnect, Err: errors.New("connection refused")}
	busy := &Error{Op: "multi", Kind: KindBackoff, Message: "RegionOpeningException"}
	auth := &Error{Op: "authenticate", Kind: KindReconnect, Err: &authError{errors.New("no ticket")}}
	for _, tc := range []struct {
		name   string
		rounds [][]error // the causes of each round in turn
		want   []time.Duration
	}{
		{"no causes double", [][]error{nil, nil, nil, nil, nil, nil, nil, nil, nil},
			[]time.Duration{50, 100, 200, 400, 800, 1600, 3200, 5000, 5000}},
		{"busy doubles", [][]error{{busy}, {busy}, {busy}, {busy}, {busy}, {busy}, {busy}, {busy}},
			[]time.Duration{50, 100, 200, 400, 800, 1600, 3200, 5000}},
		{"server gone: capped at 1 s", [][]error{{gone}, {gone}, {gone}, {gone}, {gone}, {gone}, {gone}, {gone}, {gone}},
			[]time.Duration{50, 100, 200, 400, 800, 1000, 1000, 1000, 1000}},
		{"moved, then opening: the first busy wait is short", [][]error{{moved, nil, moved}, {gone}, {gone}, {gone}, {gone}, {gone}, {gone}, {busy}, {busy}, {gone}},
			[]time.Duration{50, 100, 200, 400, 800, 1000, 1000, 50, 100, 1000}},
		{"mixed causes count as busy", [][]error{{moved, busy}, {moved, busy}, {gone}},
			[]time.Duration{50, 100, 200}},
		{"authentication is not a relocation", [][]error{{auth}, {auth}, {auth}, {auth}, {auth}, {auth}, {auth}},
			[]time.Duration{50, 100, 200, 400, 800, 1600, 3200}},
		{"joined relocations", [][]error{{errors.Join(moved, context.Canceled)}}, []time.Duration{50}},
	} {
		rt := retries{c: c}
		for i, causes := range tc.rounds {
			if got, want := rt.next(causes), tc.want[i]*time.Millisecond; got != want {
				t.Errorf("%s: round %d waits %v, want %v", tc.name, i+1, got, want)
			}
		}
	}
	c = bareClient(Config{BackoffMax: 300 * time.Millisecond})
	if got := c.pause(8, 0, true); got != 300*time.Millisecond {
		t.Errorf("RelocateBackoffMax above BackoffMax: pause %v, want BackoffMax 300ms", got)
	}
}
