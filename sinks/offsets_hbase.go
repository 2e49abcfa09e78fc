package sinks

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/abacus-stream/abacus/hbase"
	"github.com/abacus-stream/abacus/schema"
	"github.com/twmb/franz-go/pkg/kgo"
)

// HBaseOffsets keeps sink offsets in an HBase table, beside the cells they cover, so that a table
// restored from a snapshot can be resumed from the offsets that match it.
//
// Row: group | topic (escaped, terminated components) | partition (4 bytes, big-endian).
// Family "o", qualifiers: offset (int64 BE: the next record to write), committed_at (int64 BE, ms),
// processed (int64 BE: records this commit covered, as far as the committer knew). The table keeps
// OffsetHistoryVersions versions as history. A version's timestamp is its commit time, but never
// lower than the newest version seen plus one, so a committer whose clock lags another's can never
// write a version that hides behind an older one.
type HBaseOffsets struct {
	c     *hbase.Client
	table string
	now   func() time.Time

	mu   sync.Mutex
	last map[string]offsetVersion // row -> newest version seen or written
}

type offsetVersion struct {
	ts     int64
	offset int64
}

// Offsets table layout.
const (
	OffsetsFamily         = "o"
	OffsetHistoryVersions = 10
)

var (
	qualOffset      = []byte("offset")
	qualCommittedAt = []byte("committed_at")
	qualProcessed   = []byte("processed")
)

// NewHBaseOffsets returns a store on table, which EnsureOffsetsTable creates.
func NewHBaseOffsets(c *hbase.Client, table string) *HBaseOffsets {
	return &HBaseOffsets{c: c, table: table, now: time.Now, last: map[string]offsetVersion{}}
}

// EnsureOffsetsTable creates the offsets table if it is missing.
func EnsureOffsetsTable(ctx context.Context, admin *hbase.Admin, table string) error {
	_, err := admin.DescribeTable(ctx, table)
	if err == nil {
		return nil
	}
	if !hbase.IsTableNotFound(err) {
		return fmt.Errorf("sinks: describe offsets table %s: %w", table, err)
	}
	err = admin.CreateTable(ctx, hbase.TableSpec{Name: table, Families: []hbase.FamilySpec{{
		Name: OffsetsFamily, Attributes: map[string]string{"VERSIONS": fmt.Sprint(OffsetHistoryVersions)},
	}}})
	if err != nil {
		return fmt.Errorf("sinks: create offsets table %s: %w", table, err)
	}
	return nil
}

func offsetRow(group, topic string, partition int32) []byte {
	b := schema.AppendComponent(schema.AppendComponent(nil, group), topic)
	return binary.BigEndian.AppendUint32(b, uint32(partition))
}

func be64(v int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(v)) }

// Commit writes each partition's offset as a new version of its row.
func (h *HBaseOffsets) Commit(ctx context.Context, group string, offsets map[string]map[int32]kgo.EpochOffset) error {
	now := h.now().UnixMilli()
	h.mu.Lock()
	var muts []*hbase.Mutation
	written := map[string]offsetVersion{}
	for t, ps := range offsets {
		for p, eo := range ps {
			row := offsetRow(group, t, p)
			prev, seen := h.last[string(row)]
			ts := max(now, prev.ts+1)
			processed := int64(0)
			if seen && eo.Offset > prev.offset {
				processed = eo.Offset - prev.offset
			}
			muts = append(muts, hbase.NewPut(h.table, row).
				Add(OffsetsFamily, qualOffset, ts, be64(eo.Offset)).
				Add(OffsetsFamily, qualCommittedAt, ts, be64(now)).
				Add(OffsetsFamily, qualProcessed, ts, be64(processed)))
			written[string(row)] = offsetVersion{ts, eo.Offset}
		}
	}
	h.mu.Unlock()
	if err := h.c.Apply(ctx, muts); err != nil {
		return fmt.Errorf("sinks: commit offsets of group %s to %s: %w", group, h.table, err)
	}
	h.mu.Lock()
	for r, v := range written {
		if v.ts > h.last[r].ts {
			h.last[r] = v
		}
	}
	h.mu.Unlock()
	return nil
}

// Load reads the newest stored offset of each partition.
func (h *HBaseOffsets) Load(ctx context.Context, group string, parts map[string][]int32) (map[string]map[int32]int64, error) {
	out := map[string]map[int32]int64{}
	for t, ps := range parts {
		for _, p := range ps {
			st, ok, err := h.get(ctx, group, t, p)
			if err != nil {
				return nil, err
			}
			if !ok {
				continue
			}
			if out[t] == nil {
				out[t] = map[int32]int64{}
			}
			out[t][p] = st.Offset
		}
	}
	return out, nil
}

// StoredOffset is one partition's newest committed offset in the offsets table.
type StoredOffset struct {
	Topic       string
	Partition   int32
	Offset      int64
	CommittedAt time.Time
	Processed   int64
}

func (h *HBaseOffsets) get(ctx context.Context, group, topic string, p int32) (StoredOffset, bool, error) {
	row := offsetRow(group, topic, p)
	res, err := h.c.Get(ctx, hbase.Get{Table: h.table, Row: row, Columns: []hbase.Column{{Family: OffsetsFamily}}})
	if err != nil {
		return StoredOffset{}, false, fmt.Errorf("sinks: read offset of %s %s/%d from %s: %w", group, topic, p, h.table, err)
	}
	st, ts, ok := parseStoredOffset(res.Cells)
	if !ok {
		return StoredOffset{}, false, nil
	}
	st.Topic, st.Partition = topic, p
	h.mu.Lock()
	if ts > h.last[string(row)].ts {
		h.last[string(row)] = offsetVersion{ts, st.Offset}
	}
	h.mu.Unlock()
	return st, true, nil
}

func parseStoredOffset(cells []hbase.Cell) (StoredOffset, int64, bool) {
	var (
		st    StoredOffset
		ts    int64
		found bool
	)
	for _, c := range cells {
		if len(c.Value) != 8 {
			continue
		}
		v := int64(binary.BigEndian.Uint64(c.Value))
		switch string(c.Qualifier) {
		case string(qualOffset):
			st.Offset, ts, found = v, c.Timestamp, true
		case string(qualCommittedAt):
			st.CommittedAt = time.UnixMilli(v)
		case string(qualProcessed):
			st.Processed = v
		}
	}
	return st, ts, found
}

// Stored lists every partition offset the table holds for group.
func (h *HBaseOffsets) Stored(ctx context.Context, group string) ([]StoredOffset, error) {
	sc := h.c.Scan(hbase.Scan{Table: h.table, Prefix: schema.AppendComponent(nil, group)})
	defer sc.Close()
	var out []StoredOffset
	for {
		r, err := sc.Next(ctx)
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("sinks: list offsets of group %s in %s: %w", group, h.table, err)
		}
		row := r.Row()
		_, rest, err := schema.ReadComponent(row)
		if err != nil {
			return nil, err
		}
		topic, rest, err := schema.ReadComponent(rest)
		if err != nil || len(rest) != 4 {
			return nil, fmt.Errorf("sinks: malformed offsets row %x", row)
		}
		st, _, ok := parseStoredOffset(r.Cells)
		if !ok {
			continue
		}
		st.Topic, st.Partition = topic, int32(binary.BigEndian.Uint32(rest))
		out = append(out, st)
	}
}
