package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/abacus-stream/abacus/bench/chaos/stream"
	"github.com/abacus-stream/abacus/deadletter"
	"github.com/abacus-stream/abacus/hbase"
	"github.com/abacus-stream/abacus/internal/kafkaread"
	"github.com/abacus-stream/abacus/schema"
)

// scanTable feeds every version of every cell of table to the comparers, in the table's order.
func scanTable(ctx context.Context, hb *hbase.Client, table string, fn func(c *hbase.Cell)) error {
	sc := hb.Scan(hbase.Scan{Table: table, MaxVersions: hbase.AllVersions, Caching: 2000})
	defer sc.Close()
	for {
		r, err := sc.Next(ctx)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("scan %s: %w", table, err)
		}
		for i := range r.Cells {
			fn(&r.Cells[i])
		}
	}
}

func describeAggregate(row, _, qualifier []byte) string {
	e, set, start, err := schema.ParseAggregateRow(row)
	if err != nil {
		return fmt.Sprintf("row %x %s", row, qualifier)
	}
	return fmt.Sprintf("%s %s window %d %s", e, set, start, qualifier)
}

func describeFact(row, _, qualifier []byte) string {
	e, ts, err := schema.ParseFactRow(row)
	if err != nil {
		return fmt.Sprintf("row %x %s", row, qualifier)
	}
	return fmt.Sprintf("fact %s at %d %s", e, ts, qualifier)
}

// tableCheck compares one table with the oracle's cells and, when ref is set, with a reference
// table's cells; it returns the cells it read, for use as a reference in turn.
func tableCheck(ctx context.Context, hb *hbase.Client, table string, want, ref *stream.Cells, describe func(row, family, qualifier []byte) string) (vsOracle, vsRef stream.Diff, read *stream.Cells, err error) {
	read = stream.NewCells()
	cmpOracle := want.Compare(describe)
	var cmpRef *stream.Comparer
	if ref != nil {
		cmpRef = ref.Compare(describe)
	}
	var last uint64
	first := true
	err = scanTable(ctx, hb, table, func(c *hbase.Cell) {
		cmpOracle.Cell(c.Row, c.Family, c.Qualifier, c.Timestamp, c.Value)
		if cmpRef != nil {
			cmpRef.Cell(c.Row, c.Family, c.Qualifier, c.Timestamp, c.Value)
		}
		// Keep the newest version of each cell: versions come together, newest first.
		if k := stream.CellKey(c.Row, string(c.Family), c.Qualifier); first || k != last {
			first, last = false, k
			read.Add(c.Row, string(c.Family), c.Qualifier, c.Timestamp, c.Value, nil)
		}
	})
	if err != nil {
		return
	}
	vsOracle = cmpOracle.Finish()
	if cmpRef != nil {
		vsRef = cmpRef.Finish()
	}
	return
}

// deadLetters is what a dead-letter topic holds, by source coordinates.
type deadLetters struct {
	bySource map[string][]*kgo.Record
	records  int
}

func readDeadLetters(ctx context.Context, brokers []string, topic string) (*deadLetters, error) {
	d := &deadLetters{bySource: map[string][]*kgo.Record{}}
	err := kafkaread.All(ctx, brokers, topic, func(r *kgo.Record) {
		d.records++
		d.bySource[string(r.Key)] = append(d.bySource[string(r.Key)], r)
	}, kgo.FetchMaxBytes(32<<20))
	return d, err
}

// dlqCheck is the outcome of checking a dead-letter topic against the oracle's bad records.
type dlqCheck struct {
	Records     int // dead-letter records read
	Bad         int // source records that must be dead-lettered
	Once        int // bad records with exactly one dead letter
	Identical   int // bad records with several dead letters, all identical
	Different   int // bad records with several dead letters that differ
	Missing     int // bad records with no dead letter
	Unexpected  int // dead letters for records that are not bad
	WrongReason int // dead letters whose reason is not the oracle's
	// Distinct counts bad records by how many different dead letters they have (headers compared
	// as sets); OrderOnly counts those whose repeats differ only in the order of their headers.
	Distinct  map[int]int
	OrderOnly int
	Examples  []string
}

func (c *dlqCheck) example(format string, args ...any) {
	if len(c.Examples) < 10 {
		c.Examples = append(c.Examples, fmt.Sprintf(format, args...))
	}
}

// checkDeadLetters compares a dead-letter topic with the records the oracle found bad: every bad
// record must have a dead letter with the oracle's reason; several must be identical records
// (a repeat after a crash); nothing else may be dead-lettered.
func checkDeadLetters(d *deadLetters, bad map[deadletter.Source]deadletter.Reason) dlqCheck {
	c := dlqCheck{Records: d.records, Bad: len(bad), Distinct: map[int]int{}}
	want := map[string]deadletter.Reason{}
	for src, reason := range bad {
		want[src.String()] = reason
	}
	keys := make([]string, 0, len(d.bySource))
	for k := range d.bySource {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if _, ok := want[k]; !ok {
			c.Unexpected += len(d.bySource[k])
			r := d.bySource[k][0]
			c.example("dead letter for %s, which is not a bad record: %s", k, header(r, deadletter.HeaderDetail))
		}
	}
	srcs := make([]string, 0, len(want))
	for k := range want {
		srcs = append(srcs, k)
	}
	sort.Strings(srcs)
	for _, k := range srcs {
		recs := d.bySource[k]
		switch {
		case len(recs) == 0:
			c.Missing++
			c.example("no dead letter for %s (%s)", k, want[k])
			continue
		case len(recs) == 1:
			c.Once++
			c.Distinct[1]++
		default:
			same := true
			for _, r := range recs[1:] {
				if !sameRecord(recs[0], r) {
					same = false
				}
			}
			contents := map[string]bool{}
			exact := map[string]bool{}
			for _, r := range recs {
				contents[recordContent(r, true)] = true
				exact[recordContent(r, false)] = true
			}
			c.Distinct[len(contents)]++
			if len(exact) > len(contents) {
				c.OrderOnly++
			}
			if same {
				c.Identical++
			} else {
				c.Different++
				how := "different"
				if sameContent(recs) {
					how = "the same headers in different orders in"
				}
				c.example("%s dead letters for %s: %s", how, k, describeRecords(recs))
			}
		}
		for _, r := range recs {
			if got := deadletter.Reason(header(r, deadletter.HeaderReason)); got != want[k] {
				c.WrongReason++
				c.example("dead letter for %s says %q, want %q", k, got, want[k])
				break
			}
		}
	}
	return c
}

func header(r *kgo.Record, key string) []byte {
	for _, h := range r.Headers {
		if h.Key == key {
			return h.Value
		}
	}
	return nil
}

func sameRecord(a, b *kgo.Record) bool {
	if !bytes.Equal(a.Key, b.Key) || !bytes.Equal(a.Value, b.Value) || len(a.Headers) != len(b.Headers) {
		return false
	}
	for i := range a.Headers {
		if a.Headers[i].Key != b.Headers[i].Key || !bytes.Equal(a.Headers[i].Value, b.Headers[i].Value) {
			return false
		}
	}
	return true
}

// recordContent is a record's key, value and headers, the headers sorted when unordered is set.
func recordContent(r *kgo.Record, unordered bool) string {
	hs := make([]string, len(r.Headers))
	for i, h := range r.Headers {
		hs[i] = h.Key + "=" + string(h.Value)
	}
	if unordered {
		sort.Strings(hs)
	}
	return string(r.Key) + "\x00" + string(r.Value) + "\x00" + strings.Join(hs, "\x00")
}

// sameContent reports whether records differ only in the order of their headers.
func sameContent(recs []*kgo.Record) bool {
	first := recordContent(recs[0], true)
	for _, r := range recs[1:] {
		if recordContent(r, true) != first {
			return false
		}
	}
	return true
}

// describeRecords shows how dead letters of one source differ: their headers.
func describeRecords(recs []*kgo.Record) string {
	var b bytes.Buffer
	for i, r := range recs {
		if i > 0 {
			b.WriteString(" | ")
		}
		for j, h := range r.Headers {
			if j > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "%s=%q", h.Key, h.Value)
		}
	}
	return b.String()
}
