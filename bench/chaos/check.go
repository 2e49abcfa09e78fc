package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/abacus-stream/abacus/deadletter"
	"github.com/abacus-stream/abacus/hbase"
	"github.com/abacus-stream/abacus/internal/chaos/stream"
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

// describeAggregateOf names an aggregate cell with, for a rollup window's, the oracle's total:
// the cells hold hashes only, and a differing rollup cell is reported with what it should hold.
func describeAggregateOf(o *stream.Oracle) func(row, family, qualifier []byte) string {
	return func(row, family, qualifier []byte) string {
		d := describeAggregate(row, family, qualifier)
		if e, set, start, err := schema.ParseAggregateRow(row); err == nil {
			if total, ok := o.RollupTotal(set, e, start); ok {
				d += " (the oracle's total: " + total + ")"
			}
		}
		return d
	}
}

// setTally counts an aggregates table's cells by set as a comparison reads them: the cells
// read (newest versions) and those the oracle expects, with its value.
type setTally struct {
	read, right map[string]int64
	lastRow     []byte
	lastSet     string
}

func newSetTally() *setTally {
	return &setTally{read: map[string]int64{}, right: map[string]int64{}}
}

// cell counts the newest version of a cell; right says the oracle's comparison found it right.
func (t *setTally) cell(row []byte, right bool) {
	if !bytes.Equal(row, t.lastRow) {
		// A row's cells come together: parse its key once.
		t.lastRow = append(t.lastRow[:0], row...)
		t.lastSet = "(unreadable row)"
		if _, set, _, err := schema.ParseAggregateRow(row); err == nil {
			t.lastSet = set
		}
	}
	t.read[t.lastSet]++
	if right {
		t.right[t.lastSet]++
	}
}

// keyTally derives, from an aggregates table as a comparison reads it, the key index the sink
// must have written beside it: one row per set and key and one per key among every set's, stamped
// from the key's newest window.
type keyTally struct {
	newest map[string]int64 // index row -> newest window end
	family string
}

func newKeyTally() *keyTally { return &keyTally{newest: map[string]int64{}, family: "d"} }

func (k *keyTally) cell(c *hbase.Cell) {
	e, set, _, err := schema.ParseAggregateRow(c.Row)
	if err != nil {
		return
	}
	for _, s := range []string{set, schema.KeyIndexEverySet} { // its set's row, and its row among every set's keys
		row := string(schema.KeyIndexRow(s, e))
		k.newest[row] = max(k.newest[row], c.Timestamp)
	}
	k.family = string(c.Family)
}

// expected is the key index as cells (the tables have no TTL: schema.KeyIndexTimestamp of 0),
// with the marker that `abacus admin create` wrote beside the empty aggregates table.
func (k *keyTally) expected() *stream.Cells {
	out := stream.NewCells()
	out.Add(schema.KeyIndexMarkerRow, k.family, []byte(schema.KeyIndexMarkerQualifier), schema.KeyIndexMarkerTimestamp,
		[]byte{schema.KeyIndexVersion}, func() string { return "key index marker" })
	for row, end := range k.newest {
		out.Add([]byte(row), k.family, []byte(schema.KeyIndexQualifier), schema.KeyIndexTimestamp(end, 0), []byte{}, nil)
	}
	return out
}

func describeKey(row, _, qualifier []byte) string {
	set, key, err := schema.ParseKeyIndexRow(row)
	if bytes.Equal(row, schema.KeyIndexMarkerRow) {
		return fmt.Sprintf("key index marker %s", qualifier)
	}
	if err != nil {
		return fmt.Sprintf("index row %x %s", row, qualifier)
	}
	return fmt.Sprintf("key index %s %s %s", set, key, qualifier)
}

func describeFact(row, _, qualifier []byte) string {
	e, ts, err := schema.ParseFactRow(row)
	if err != nil {
		return fmt.Sprintf("row %x %s", row, qualifier)
	}
	return fmt.Sprintf("fact %s at %d %s", e, ts, qualifier)
}

// tableCheck compares one table with the oracle's cells and, when ref is set, with a reference
// table's cells; it returns the cells it read, for use as a reference in turn. With tally set,
// it counts the cells by set.
func tableCheck(ctx context.Context, hb *hbase.Client, table string, want, ref *stream.Cells, describe func(row, family, qualifier []byte) string, tally *setTally, keys *keyTally) (vsOracle, vsRef stream.Diff, read *stream.Cells, err error) {
	return tableCheckSkipping(ctx, hb, table, want, ref, describe, tally, keys, nil)
}

// keyIndexCheck is tableCheck of a key index table, leaving out its epoch row (schema.EpochRow):
// which sets' epochs a run moves depends on when its sinks wrote windows of the past (after a
// kill, a replay), and each move writes a value never written before, so no oracle predicts it.
func keyIndexCheck(ctx context.Context, hb *hbase.Client, table string, want *stream.Cells) (stream.Diff, error) {
	diff, _, _, err := tableCheckSkipping(ctx, hb, table, want, nil, describeKey, nil, nil,
		func(row []byte) bool { return bytes.Equal(row, schema.EpochRow) })
	return diff, err
}

// tableCheckSkipping is tableCheck leaving out the rows skip accepts (nil: none).
func tableCheckSkipping(ctx context.Context, hb *hbase.Client, table string, want, ref *stream.Cells, describe func(row, family, qualifier []byte) string, tally *setTally, keys *keyTally, skip func(row []byte) bool) (vsOracle, vsRef stream.Diff, read *stream.Cells, err error) {
	read = stream.NewCells()
	cmpOracle := want.Compare(describe)
	var cmpRef *stream.Comparer
	if ref != nil {
		cmpRef = ref.Compare(describe)
	}
	var last uint64
	first := true
	err = scanTable(ctx, hb, table, func(c *hbase.Cell) {
		if skip != nil && skip(c.Row) {
			return
		}
		right := cmpOracle.Cell(c.Row, c.Family, c.Qualifier, c.Timestamp, c.Value)
		if keys != nil {
			keys.cell(c)
		}
		if cmpRef != nil {
			cmpRef.Cell(c.Row, c.Family, c.Qualifier, c.Timestamp, c.Value)
		}
		// Keep the newest version of each cell: versions come together, newest first.
		if k := stream.CellKey(c.Row, string(c.Family), c.Qualifier); first || k != last {
			first, last = false, k
			read.Add(c.Row, string(c.Family), c.Qualifier, c.Timestamp, c.Value, nil)
			if tally != nil {
				tally.cell(c.Row, right)
			}
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

// lateKey names the late records of one event for one set: the record key (the event's source
// coordinates) and the abacus.set header.
type lateKey struct{ source, set string }

// lateRecords is what a late topic holds, by source coordinates and set.
type lateRecords struct {
	byKey   map[lateKey][]*kgo.Record
	records int
}

func newLateRecords() *lateRecords { return &lateRecords{byKey: map[lateKey][]*kgo.Record{}} }

func (l *lateRecords) add(r *kgo.Record) {
	l.records++
	k := lateKey{string(r.Key), string(header(r, deadletter.HeaderSet))}
	l.byKey[k] = append(l.byKey[k], r)
}

func readLateRecords(ctx context.Context, brokers []string, topic string) (*lateRecords, error) {
	l := newLateRecords()
	err := kafkaread.All(ctx, brokers, topic, l.add, kgo.FetchMaxBytes(32<<20))
	return l, err
}

// lateCheck is the outcome of checking a late topic against the events the oracle judges late.
type lateCheck struct {
	Records      int // late records read
	Expected     int // (event, set) pairs the oracle judges late: each must have a late record
	Once         int // pairs with exactly one late record
	Identical    int // pairs with several late records, all identical in key, value and headers
	Different    int // pairs with several late records that differ
	Missing      int // pairs with no late record
	Unexpected   int // late records for an event and set the oracle does not judge late
	WrongContent int // late records of expected pairs that do not carry their source record
	// TimestampDiffers counts the repeated pairs whose records name different timestamps;
	// SourceTimestamp counts the late records that name their source record's (header
	// abacus.timestamp). The run fails unless every record names its source record's (the
	// summary's check). Their Kafka timestamp is the time of the write, by which a restarted
	// processor finds what it wrote.
	TimestampDiffers int
	SourceTimestamp  int
	Examples         []string
}

func (c *lateCheck) example(format string, args ...any) {
	if len(c.Examples) < 10 {
		c.Examples = append(c.Examples, fmt.Sprintf(format, args...))
	}
}

// Found is the number of expected pairs that have a late record.
func (c *lateCheck) Found() int { return c.Once + c.Identical + c.Different }

// checkLateRecords compares a late topic with the events the oracle judges late: every event late
// for a set must have a late record for that set, keyed by its coordinates, carrying its source
// record (key, value, timestamp) with reason late; several must be identical records (a repeat
// after a crash); nothing else may be there.
func checkLateRecords(l *lateRecords, late map[deadletter.Source]stream.LateSource) lateCheck {
	c := lateCheck{Records: l.records}
	want := map[lateKey]stream.LateSource{}
	for src, ls := range late {
		for _, set := range ls.Sets {
			want[lateKey{src.String(), set}] = ls
		}
	}
	c.Expected = len(want)
	keys := make([]lateKey, 0, len(l.byKey))
	for k := range l.byKey {
		keys = append(keys, k)
	}
	sortLateKeys(keys)
	for _, k := range keys {
		recs := l.byKey[k]
		ls, ok := want[k]
		if !ok {
			c.Unexpected += len(recs)
			c.example("late record for %s set %q, which the oracle does not judge late for it: %s", k.source, k.set, describeRecords(recs[:1]))
			continue
		}
		for _, r := range recs {
			if string(header(r, deadletter.HeaderTimestamp)) == strconv.FormatInt(ls.Timestamp, 10) {
				c.SourceTimestamp++
			}
			if why := lateContent(r, k, ls); why != "" {
				c.WrongContent++
				c.example("late record for %s set %s: %s", k.source, k.set, why)
			}
		}
	}
	wanted := make([]lateKey, 0, len(want))
	for k := range want {
		wanted = append(wanted, k)
	}
	sortLateKeys(wanted)
	for _, k := range wanted {
		recs := l.byKey[k]
		switch {
		case len(recs) == 0:
			c.Missing++
			c.example("no late record for %s set %s", k.source, k.set)
		case len(recs) == 1:
			c.Once++
		default:
			same, sameTime := true, true
			for _, r := range recs[1:] {
				same = same && sameRecord(recs[0], r)
				sameTime = sameTime && bytes.Equal(header(r, deadletter.HeaderTimestamp), header(recs[0], deadletter.HeaderTimestamp))
			}
			if same {
				c.Identical++
			} else {
				c.Different++
				c.example("different late records for %s set %s: %s", k.source, k.set, describeRecords(recs))
			}
			if !sameTime {
				c.TimestampDiffers++
			}
		}
	}
	return c
}

func sortLateKeys(keys []lateKey) {
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].source != keys[j].source {
			return keys[i].source < keys[j].source
		}
		return keys[i].set < keys[j].set
	})
}

// lateContent says what is wrong with a late record of pair k, or "": its value must be the
// source record's, and its headers exactly deadletter's, each once (the source records carry no
// headers of their own): the format, reason late, the source, the source record's key and
// timestamp, the set and a detail (for people; its wording is not checked).
func lateContent(r *kgo.Record, k lateKey, ls stream.LateSource) string {
	var wrong []string
	if stream.ValueHash(r.Value) != ls.Value {
		wrong = append(wrong, fmt.Sprintf("value %q is not the source record's", r.Value))
	}
	want := map[string]string{
		deadletter.HeaderFormat:    deadletter.Format,
		deadletter.HeaderReason:    string(deadletter.Late),
		deadletter.HeaderSource:    k.source,
		deadletter.HeaderKey:       ls.Key,
		deadletter.HeaderTimestamp: strconv.FormatInt(ls.Timestamp, 10),
		deadletter.HeaderSet:       k.set,
		deadletter.HeaderDetail:    "",
		deadletter.HeaderGroup:     "", // who wrote it, processing which record: checked below
		deadletter.HeaderBy:        "",
	}
	seen := map[string]bool{}
	for _, h := range r.Headers {
		w, ok := want[h.Key]
		switch {
		case !ok:
			wrong = append(wrong, fmt.Sprintf("header %s=%q the source record does not have", h.Key, h.Value))
		case seen[h.Key]:
			wrong = append(wrong, fmt.Sprintf("header %s twice", h.Key))
		case h.Key == deadletter.HeaderDetail:
			if len(h.Value) == 0 {
				wrong = append(wrong, "empty "+h.Key)
			}
		case h.Key == deadletter.HeaderGroup:
			if len(h.Value) == 0 {
				wrong = append(wrong, "empty "+h.Key)
			}
		case h.Key == deadletter.HeaderBy:
			if _, err := deadletter.ParseSource(string(h.Value)); err != nil {
				wrong = append(wrong, err.Error())
			}
		case string(h.Value) != w:
			wrong = append(wrong, fmt.Sprintf("%s=%q, want %q", h.Key, h.Value, w))
		}
		seen[h.Key] = true
	}
	for name := range want {
		if !seen[name] {
			wrong = append(wrong, "no header "+name)
		}
	}
	sort.Strings(wrong)
	return strings.Join(wrong, "; ")
}
