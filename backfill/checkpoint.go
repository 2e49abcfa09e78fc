package backfill

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/gob"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/abacus-stream/abacus/schema"
	"github.com/abacus-stream/abacus/store"
)

// Checkpoints keep a run's progress in a table, so that a run stopped anywhere (killed, its pod
// evicted, a write that failed for good) resumes from its last checkpoint rather than from the
// start. A checkpoint is the engine's state after a prefix of every partition's facts, with where
// each partition's prefix ends; everything the engine wrote before it is durable in the
// aggregates table when it is saved. Its row is named by what the run computes (topology, the
// sets' layout, range, share, tables), so another backfill never takes it for its own; a run
// that ends marks it done, and the next run with the same options starts from the beginning.
type Checkpoints struct {
	// Store reads and writes Table (family CheckpointFamily; CheckpointLayout makes it).
	Store interface {
		store.Reader
		store.Writer
	}
	Table string
	// Every is how often a checkpoint is saved while facts run (default 1 minute). Saving waits
	// for the cells written so far, and writes the engine's state (the open windows).
	Every time.Duration
	// Restart ignores a checkpoint left by an earlier run, and starts over.
	Restart bool
}

// CheckpointFamily is the column family of the checkpoints table.
const CheckpointFamily = "c"

// CheckpointLayout is the layout of a checkpoints table. Its cells are stamped with the wall
// clock (they are progress, not data): a checkpoint left for 30 days expires.
func CheckpointLayout(table string) schema.TableLayout {
	return schema.TableLayout{Name: table, Family: CheckpointFamily, SaltBuckets: 1, Versions: 1, TTL: 30 * 24 * time.Hour}
}

// checkpointChunk bounds one cell of a checkpoint's state, well under HBase's 10 MiB default
// cell limit (hbase.client.keyvalue.maxsize).
const checkpointChunk = 1 << 20

// checkpointVersion is the version of the saved form; a checkpoint of another version is not
// resumed from.
const checkpointVersion = 1

var qualMeta = []byte("meta")

// checkpointMeta says which of the row's two slots holds the checkpoint, written after the slot
// itself: a save killed halfway leaves the previous checkpoint whole.
type checkpointMeta struct {
	Version int
	Slot    int
	Chunks  int
	Sum     [sha256.Size]byte
	Done    bool
	Saved   int64 // ms, the cells' timestamp
}

// checkpointState is what a run resumes from.
type checkpointState struct {
	Next    []int64 // per partition, the offset of its first fact not run yet (minInt64: none run)
	LoopOff []int64
	Applied int64
	Windows int64
	Cells   int64
	Dead    int64
	Tables  [][]kv // per partition (empty for another share's)
}

type kv struct{ K, V []byte }

// checkpointID names a run by everything that decides what its engine state means.
func (b *backfill) checkpointID() string {
	h := sha256.New()
	sets := make([]string, 0, len(b.want))
	for s := range b.want {
		sets = append(sets, s)
	}
	slices.Sort(sets)
	fmt.Fprintf(h, "%s\x00%d\x00%s\x00%d\x00%d\x00%d\x00%d/%d\x00%d\x00%s\x00%s\x00%s",
		b.plan.Name, b.plan.Layout().Hash, strings.Join(sets, ","), b.from, b.until, b.readFrom,
		b.opts.Share.Index, b.opts.Share.Of, b.nParts, b.opts.FactsTable, b.opts.Encoder.Table, b.opts.Encoder.Family)
	return hex.EncodeToString(h.Sum(nil)[:16])
}

func (b *backfill) checkpointRow() []byte {
	return schema.AppendComponent(schema.AppendComponent(nil, "backfill"), b.checkpointID())
}

// loadCheckpoint reads the run's checkpoint: nil when there is none, it is done, or Restart.
func (b *backfill) loadCheckpoint(ctx context.Context) (*checkpointState, error) {
	cp := b.opts.Checkpoints
	if cp == nil {
		return nil, nil
	}
	row := b.checkpointRow()
	cells := map[string][]byte{}
	var saved int64
	err := cp.Store.Scan(ctx, store.ScanSpec{Table: cp.Table, Family: CheckpointFamily, Start: row, Stop: append(slices.Clone(row), 0)},
		func(_ []byte, cs []store.Cell) bool {
			for _, c := range cs {
				cells[string(c.Qualifier)] = c.Value
				saved = max(saved, c.Timestamp)
			}
			return true
		})
	if err != nil {
		return nil, fmt.Errorf("backfill: read checkpoint from %s: %w", cp.Table, err)
	}
	b.cpStamp = saved
	id := "backfill/" + b.checkpointID()
	raw, ok := cells[string(qualMeta)]
	if !ok || cp.Restart {
		return nil, nil
	}
	var m checkpointMeta
	if err := gob.NewDecoder(bytes.NewReader(raw)).Decode(&m); err != nil || m.Version != checkpointVersion {
		return nil, nil // another version's: start over
	}
	if m.Done {
		return nil, nil
	}
	var all []byte
	for i := range m.Chunks {
		c, ok := cells[chunkQualifier(m.Slot, i)]
		if !ok {
			return nil, fmt.Errorf("backfill: checkpoint %s in %s lacks part %d of %d: start over with Restart (-restart)", id, cp.Table, i, m.Chunks)
		}
		all = append(all, c...)
	}
	if sha256.Sum256(all) != m.Sum {
		return nil, fmt.Errorf("backfill: checkpoint %s in %s does not match its checksum: start over with Restart (-restart)", id, cp.Table)
	}
	var st checkpointState
	if err := gob.NewDecoder(bytes.NewReader(all)).Decode(&st); err != nil {
		return nil, fmt.Errorf("backfill: checkpoint %s in %s: %w", id, cp.Table, err)
	}
	if len(st.Next) != b.nParts || len(st.Tables) != b.nParts || len(st.LoopOff) != b.nParts {
		return nil, fmt.Errorf("backfill: checkpoint %s in %s is of %d partitions, the source has %d: start over with Restart (-restart)", id, cp.Table, len(st.Next), b.nParts)
	}
	b.cpSlot = m.Slot
	return &st, nil
}

func chunkQualifier(slot, i int) string {
	return string(binary.BigEndian.AppendUint32([]byte{'s', byte('0' + slot)}, uint32(i)))
}

// saveCheckpoint waits for every cell handed to the writer, then saves st in the other slot
// and points the row's meta at it.
func (b *backfill) saveCheckpoint(ctx context.Context, st *checkpointState) error {
	cp := b.opts.Checkpoints
	if err := b.sync(ctx); err != nil {
		return err
	}
	st.Cells = b.cellsBefore
	var buf bytes.Buffer
	if err := gob.NewEncoder(&buf).Encode(st); err != nil {
		return fmt.Errorf("backfill: encode checkpoint: %w", err)
	}
	all := buf.Bytes()
	slot := 1 - b.cpSlot
	stamp := b.stamp()
	row := b.checkpointRow()
	var cells []store.Cell
	n := 0
	for off := 0; off < len(all) || n == 0; off += checkpointChunk {
		part := all[off:min(off+checkpointChunk, len(all))]
		cells = append(cells, store.Cell{Table: cp.Table, Row: row, Family: []byte(CheckpointFamily),
			Qualifier: []byte(chunkQualifier(slot, n)), Timestamp: stamp, Value: part})
		n++
	}
	if err := b.writeNow(ctx, cells); err != nil {
		return fmt.Errorf("backfill: save checkpoint to %s: %w", cp.Table, err)
	}
	if err := b.saveMeta(ctx, checkpointMeta{Version: checkpointVersion, Slot: slot, Chunks: n, Sum: sha256.Sum256(all)}); err != nil {
		return err
	}
	b.cpSlot = slot
	b.sum.Checkpoints++
	return nil
}

// doneCheckpoint marks the run's checkpoint done: the next run starts over.
func (b *backfill) doneCheckpoint(ctx context.Context) error {
	if b.opts.Checkpoints == nil {
		return nil
	}
	return b.saveMeta(ctx, checkpointMeta{Version: checkpointVersion, Done: true})
}

func (b *backfill) saveMeta(ctx context.Context, m checkpointMeta) error {
	cp := b.opts.Checkpoints
	m.Saved = b.stamp()
	var buf bytes.Buffer
	if err := gob.NewEncoder(&buf).Encode(m); err != nil {
		return fmt.Errorf("backfill: encode checkpoint: %w", err)
	}
	err := b.writeNow(ctx, []store.Cell{{Table: cp.Table, Row: b.checkpointRow(), Family: []byte(CheckpointFamily),
		Qualifier: qualMeta, Timestamp: m.Saved, Value: buf.Bytes()}})
	if err != nil {
		return fmt.Errorf("backfill: save checkpoint to %s: %w", cp.Table, err)
	}
	return nil
}

// stamp is the next checkpoint cells' timestamp: the wall clock, but always past the last one
// (one version is kept, and a clock set back must not hide a newer checkpoint).
func (b *backfill) stamp() int64 {
	b.cpStamp = max(time.Now().UnixMilli(), b.cpStamp+1)
	return b.cpStamp
}

// writeNow writes cells to the checkpoint store with the writer's retries, and returns once
// they are durable.
func (b *backfill) writeNow(ctx context.Context, cells []store.Cell) error {
	w := &writer{out: b.opts.Checkpoints.Store}
	return w.write(ctx, cells, false)
}

// snapshot is the run's state now, between two facts: no loop message is pending.
func (r *run) snapshot() *checkpointState {
	st := &checkpointState{Next: slices.Clone(r.next), LoopOff: slices.Clone(r.loopOff), Applied: r.b.sum.Applied,
		Windows: r.b.sum.Windows, Dead: r.b.sum.DeadLetters, Tables: make([][]kv, len(r.tables))}
	for p, t := range r.tables {
		if t == nil {
			continue
		}
		for k := range t.Keys() {
			v, _ := t.Get(k)
			st.Tables[p] = append(st.Tables[p], kv{[]byte(k), v})
		}
	}
	return st
}

// restore puts a checkpoint's state back: the tables, the loop's offsets and the counts.
func (r *run) restore(st *checkpointState) error {
	for p, t := range r.tables {
		if t == nil {
			if len(st.Tables[p]) > 0 {
				return errors.New("backfill: the checkpoint holds state of a partition this run does not run")
			}
			continue
		}
		for _, e := range st.Tables[p] {
			if err := t.Set(string(e.K), e.V); err != nil {
				return err
			}
		}
	}
	copy(r.next, st.Next)
	copy(r.loopOff, st.LoopOff)
	b := r.b
	b.sum.Applied, b.sum.Windows, b.sum.DeadLetters, b.cellsBefore = st.Applied, st.Windows, st.Dead, st.Cells
	return nil
}
