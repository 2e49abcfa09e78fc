// Package hbasestore implements store.Store on HBase through the native client (package hbase):
// writes as Multi Puts with the configured durability, reads as scans, tables created pre-split on
// the salt buckets with the layout recorded in table attributes.
//
// It must never accept SKIP_WAL silently (acknowledged cells would be lost when a region server
// dies) and never report a cell as written that HBase has not acknowledged.
package hbasestore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/abacus-stream/abacus/hbase"
	"github.com/abacus-stream/abacus/schema"
	"github.com/abacus-stream/abacus/store"
)

// Store writes and reads cells through the native HBase client.
type Store struct {
	c          *hbase.Client
	durability hbase.Durability
}

var _ store.Store = (*Store)(nil)

// Config configures a Store.
type Config struct {
	// Durability of every Put; the table's (SYNC_WAL unless the table says otherwise) when zero.
	Durability hbase.Durability
	// ForceSkipWAL must be set to accept hbase.SkipWAL: skipping the WAL loses acknowledged cells
	// when a region server dies, which breaks flush-then-commit.
	ForceSkipWAL bool
}

// New wraps a client.
func New(c *hbase.Client, cfg Config) (*Store, error) {
	if cfg.Durability == hbase.SkipWAL && !cfg.ForceSkipWAL {
		return nil, errors.New("hbasestore: durability SKIP_WAL refused: acknowledged cells could be lost; set ForceSkipWAL to insist")
	}
	return &Store{c: c, durability: cfg.Durability}, nil
}

// Write puts cells, one Put per run of consecutive cells of one (table, row): encoders emit a
// record's cells together, and two Puts of one row in a Multi are fine once the batch is coalesced.
// Each failed Put is mapped back to its cells.
func (s *Store) Write(ctx context.Context, cells []store.Cell) ([]store.CellError, error) {
	newRow := func(i int) bool {
		return i == 0 || cells[i].Table != cells[i-1].Table || !bytes.Equal(cells[i].Row, cells[i-1].Row)
	}
	puts := 0
	for i := range cells {
		if newRow(i) {
			puts++
		}
	}
	var (
		// The Puts are allocated together: a sink writes tens of thousands at once.
		slab   = make([]hbase.Mutation, puts)
		muts   = make([]*hbase.Mutation, 0, puts)
		first  = make([]int, 0, puts+1) // index of the first cell of each mutation; its cells run to the next one's
		family string
	)
	for i := range cells {
		c := &cells[i]
		if n := len(muts); newRow(i) {
			m := slab[n].ResetPut(c.Table, c.Row)
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
		return nil, fmt.Errorf("hbasestore: write of %d cells: %w", len(cells), err)
	}
	var failed []store.CellError
	for j, e := range be.Errs {
		if e == nil {
			continue
		}
		permanent := isPermanent(e)
		for i := first[j]; i < first[j+1]; i++ {
			failed = append(failed, store.CellError{Index: i, Err: e, Permanent: permanent})
		}
	}
	return failed, nil
}

// Scan implements store.Reader over an HBase table.
func (s *Store) Scan(ctx context.Context, spec store.ScanSpec, fn func(row []byte, cells []store.Cell) bool) error {
	sc := hbase.Scan{Table: spec.Table, Prefix: spec.Prefix, Reversed: spec.Reversed, MaxVersions: spec.MaxVersions}
	if len(spec.Ranges) > 0 {
		if spec.Reversed {
			return fmt.Errorf("hbasestore: scan %s: row ranges in a reversed scan", spec.Table)
		}
		for _, r := range spec.Ranges {
			sc.Ranges = append(sc.Ranges, hbase.RowRange{Start: r.Start, Stop: r.Stop})
		}
	}
	switch {
	case spec.Family != "" && len(spec.Qualifiers) > 0:
		for _, q := range spec.Qualifiers {
			sc.Columns = append(sc.Columns, hbase.Column{Family: spec.Family, Qualifier: q})
		}
	case spec.Family != "":
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
			if hbase.IsTableNotFound(err) {
				return fmt.Errorf("hbasestore: scan %s: %w: %w", spec.Table, store.ErrNoSuchTable, err)
			}
			return fmt.Errorf("hbasestore: scan %s: %w", spec.Table, err)
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
		cells := make([]store.Cell, len(r.Cells))
		for i, c := range r.Cells {
			cells[i] = store.Cell{Table: spec.Table, Row: c.Row, Family: c.Family, Qualifier: c.Qualifier, Timestamp: c.Timestamp, Value: c.Value}
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

// EnsureTable implements store.Tables: a missing table is created pre-split on the salt bucket
// boundaries, an existing one must match the layout.
func (s *Store) EnsureTable(ctx context.Context, l schema.TableLayout) error {
	l.EnsureDefaults()
	if err := l.Validate(); err != nil {
		return fmt.Errorf("hbasestore: %w", err)
	}
	spec, err := s.c.Admin().DescribeTable(ctx, l.Name)
	if hbase.IsTableNotFound(err) {
		return s.createTable(ctx, l)
	}
	if err != nil {
		return fmt.Errorf("hbasestore: describe table %s: %w", l.Name, err)
	}
	return checkTable(spec, l)
}

// VerifyTable implements store.Tables.
func (s *Store) VerifyTable(ctx context.Context, l schema.TableLayout) error {
	l.EnsureDefaults()
	if err := l.Validate(); err != nil {
		return fmt.Errorf("hbasestore: %w", err)
	}
	spec, err := s.describe(ctx, l.Name)
	if err != nil {
		return err
	}
	return checkTable(spec, l)
}

// SaltBuckets implements store.Tables.
func (s *Store) SaltBuckets(ctx context.Context, table string) (int, error) {
	spec, err := s.describe(ctx, table)
	if err != nil {
		return 0, err
	}
	n, err := schema.SaltBucketsOf(table, spec.Attributes)
	if err != nil {
		return 0, fmt.Errorf("hbasestore: %w", err)
	}
	return n, nil
}

// FamilySettings implements store.Tables.
func (s *Store) FamilySettings(ctx context.Context, table, family string) (map[string]string, error) {
	spec, err := s.describe(ctx, table)
	if err != nil {
		return nil, err
	}
	for _, f := range spec.Families {
		if f.Name == family {
			return f.Attributes, nil
		}
	}
	return nil, fmt.Errorf("hbasestore: table %s has no family %s", table, family)
}

func (s *Store) describe(ctx context.Context, table string) (*hbase.TableSpec, error) {
	spec, err := s.c.Admin().DescribeTable(ctx, table)
	if hbase.IsTableNotFound(err) {
		return nil, fmt.Errorf("hbasestore: table %s: %w", table, store.ErrNoSuchTable)
	}
	if err != nil {
		return nil, fmt.Errorf("hbasestore: describe table %s: %w", table, err)
	}
	return spec, nil
}

func (s *Store) createTable(ctx context.Context, l schema.TableLayout) error {
	attrs := l.FamilySettings()
	spec := hbase.TableSpec{
		Name:       l.Name,
		Families:   []hbase.FamilySpec{{Name: l.Family, Attributes: attrs}},
		Attributes: l.Attributes(),
		SplitKeys:  schema.SaltSplitKeys(l.SaltBuckets),
	}
	if err := s.c.Admin().CreateTable(ctx, spec); err != nil {
		return fmt.Errorf("hbasestore: create table %s: %w", l.Name, err)
	}
	return nil
}

func checkTable(spec *hbase.TableSpec, l schema.TableLayout) error {
	names := make([]string, len(spec.Families))
	for i, f := range spec.Families {
		names[i] = f.Name
	}
	if err := l.CheckExisting(spec.Attributes, names); err != nil {
		return fmt.Errorf("hbasestore: %w", err)
	}
	return nil
}
