package sinks

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/abacus-stream/abacus/hbase"
)

// HBaseStore writes and reads cells through the native HBase client.
type HBaseStore struct {
	c          *hbase.Client
	durability hbase.Durability
}

// HBaseStoreConfig configures an HBaseStore.
type HBaseStoreConfig struct {
	// Durability of every Put; the table's (SYNC_WAL unless the table says otherwise) when zero.
	Durability hbase.Durability
	// ForceSkipWAL must be set to accept hbase.SkipWAL: skipping the WAL loses acknowledged cells
	// when a region server dies, which breaks flush-then-commit.
	ForceSkipWAL bool
}

// NewHBaseStore wraps a client.
func NewHBaseStore(c *hbase.Client, cfg HBaseStoreConfig) (*HBaseStore, error) {
	if cfg.Durability == hbase.SkipWAL && !cfg.ForceSkipWAL {
		return nil, errors.New("sinks: durability SKIP_WAL refused: acknowledged cells could be lost; set ForceSkipWAL to insist")
	}
	return &HBaseStore{c: c, durability: cfg.Durability}, nil
}

// Write puts cells, one Put per run of consecutive cells of one (table, row): encoders emit a
// record's cells together, and two Puts of one row in a Multi are fine once the batch is coalesced.
// Each failed Put is mapped back to its cells.
func (s *HBaseStore) Write(ctx context.Context, cells []Cell) ([]CellError, error) {
	var (
		muts   []*hbase.Mutation
		first  []int // index of the first cell of each mutation; its cells run to the next one's
		family string
	)
	for i := range cells {
		c := &cells[i]
		if n := len(muts); n == 0 || c.Table != cells[i-1].Table || !bytes.Equal(c.Row, cells[i-1].Row) {
			m := hbase.NewPut(c.Table, c.Row)
			m.Durability = s.durability
			muts = append(muts, m)
			first = append(first, i)
		}
		if string(c.Family) != family { // converted once per run of one family, not per cell
			family = string(c.Family)
		}
		muts[len(muts)-1].Add(family, c.Qualifier, c.Timestamp, c.Value)
	}
	first = append(first, len(cells))
	err := s.c.Apply(ctx, muts)
	if err == nil {
		return nil, nil
	}
	var be *hbase.BatchError
	if !errors.As(err, &be) || len(be.Errs) != len(muts) {
		return nil, fmt.Errorf("sinks: hbase write of %d cells: %w", len(cells), err)
	}
	var failed []CellError
	for j, e := range be.Errs {
		if e == nil {
			continue
		}
		permanent := isPermanent(e)
		for i := first[j]; i < first[j+1]; i++ {
			failed = append(failed, CellError{Index: i, Err: e, Permanent: permanent})
		}
	}
	return failed, nil
}

// Scan implements Reader over an HBase table.
func (s *HBaseStore) Scan(ctx context.Context, spec ScanSpec, fn func(row []byte, cells []Cell) bool) error {
	sc := hbase.Scan{Table: spec.Table, Prefix: spec.Prefix, Reversed: spec.Reversed, MaxVersions: spec.MaxVersions}
	if spec.Family != "" {
		sc.Columns = []hbase.Column{{Family: spec.Family}}
	}
	if spec.Limit > 0 && spec.Limit < 1000 {
		sc.Caching = spec.Limit
	}
	lower, upper := spec.Start, spec.Stop
	if spec.Prefix == nil {
		if spec.Reversed {
			// HBase's reversed scan starts at an inclusive upper row; [Start, Stop) is kept by
			// skipping Stop itself and ending below Start here.
			sc.StartRow = upper
		} else {
			sc.StartRow, sc.StopRow = lower, upper
		}
	}
	scanner := s.c.Scan(sc)
	defer scanner.Close()
	rows := 0
	for {
		r, err := scanner.Next(ctx)
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("sinks: scan %s: %w", spec.Table, err)
		}
		row := r.Row()
		if spec.Prefix == nil && spec.Reversed {
			if upper != nil && bytes.Compare(row, upper) >= 0 {
				continue
			}
			if lower != nil && bytes.Compare(row, lower) < 0 {
				return nil
			}
		}
		cells := make([]Cell, len(r.Cells))
		for i, c := range r.Cells {
			cells[i] = Cell{Table: spec.Table, Row: c.Row, Family: c.Family, Qualifier: c.Qualifier, Timestamp: c.Timestamp, Value: c.Value}
		}
		rows++
		if !fn(row, cells) || (spec.Limit > 0 && rows >= spec.Limit) {
			return nil
		}
	}
}

// isPermanent reports whether the client said, by an error of kind permanent, that resending can
// never succeed. Any other error is retried: a record is dead-lettered only on HBase's word.
func isPermanent(err error) bool {
	var he *hbase.Error
	return errors.As(err, &he) && he.Kind == hbase.KindPermanent && !errors.Is(err, hbase.ErrClosed)
}
