package hbase

import (
	"io"
	"testing"
	"time"
)

// TestScannerSurvivesLeaseExpiry holds a scanner idle past the server's scanner lease (60 s by
// default), then keeps reading: the scan resumes after the last row returned, without skipping or
// repeating rows. It records what the server answers for the expired scanner. testenv's HBase
// runs with a 20 s lease (hbase.client.scanner.timeout.period) so that this takes 25 s, not 65.
func TestScannerSurvivesLeaseExpiry(t *testing.T) {
	c := testClient(t)
	table := testTable(t, c, "lease", fam("f"), nil)
	ctx := testContext(t)
	var ms []*Mutation
	for i := range 6 {
		ms = append(ms, put1(table, rowName(i), "q", 1, "v"))
	}
	if err := c.Apply(ctx, ms); err != nil {
		t.Fatal(err)
	}
	sc := c.Scan(Scan{Table: table, Caching: 2})
	defer sc.Close()
	var rows []string
	r, err := sc.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rows = append(rows, string(r.Row()))
	lease := sc.ttl
	if lease <= 0 {
		lease = 60 * time.Second
	}
	t.Logf("server lease %v; idling past it", lease)
	time.Sleep(lease + 5*time.Second)

	// What does the server say about the expired scanner? (Recorded for the protocol notes.)
	p := getBuf()
	*p = appendScanRequest(*p, nil, &sc.s, scanParams{scannerID: sc.scannerID, rows: 1})
	resp, _, rerr := c.rpc(ctx, serviceClient, sc.region.addr, "Scan", p, nil)
	t.Logf("next on the expired scanner: err=%v, response %d bytes", rerr, len(resp))

	for {
		r, err := sc.Next(ctx)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("after lease expiry: %v", err)
		}
		rows = append(rows, string(r.Row()))
	}
	if len(rows) != 6 {
		t.Fatalf("rows %q, want 6", rows)
	}
	for i := 1; i < len(rows); i++ {
		if rows[i] <= rows[i-1] {
			t.Fatalf("rows repeated or out of order: %q", rows)
		}
	}
}
