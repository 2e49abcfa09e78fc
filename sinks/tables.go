package sinks

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/abacus-stream/abacus/hbase"
)

// AttrSaltBuckets is the table attribute that records a table's salt bucket count: row keys built
// with another count would land in the wrong buckets and be invisible to prefix scans.
const AttrSaltBuckets = "abacus.salt.buckets"

// TableLayout describes a sink table: one family, pre-split on the salt bucket boundaries.
type TableLayout struct {
	Name        string
	Family      string
	SaltBuckets int
	// Versions kept per cell (default 1: sinks rewrite identical cells, history is not wanted).
	Versions int
	// TTL expires cells older than this, judged by their timestamps (event time or window end).
	// Zero keeps cells forever.
	TTL time.Duration
	// BloomFilter is NONE, ROW or ROWCOL (default ROW: reads are by row prefix and row).
	BloomFilter string
	// Compression is a codec the region servers have (e.g. SNAPPY, GZ); default NONE.
	Compression string
}

func (l *TableLayout) ensureDefaults() error {
	if l.Name == "" || l.Family == "" {
		return errors.New("sinks: table layout needs Name and Family")
	}
	if l.SaltBuckets < 1 || l.SaltBuckets > MaxSaltBuckets {
		return fmt.Errorf("sinks: table %s: SaltBuckets %d outside 1..%d", l.Name, l.SaltBuckets, MaxSaltBuckets)
	}
	if l.Versions <= 0 {
		l.Versions = 1
	}
	if l.BloomFilter == "" {
		l.BloomFilter = "ROW"
	}
	if l.Compression == "" {
		l.Compression = "NONE"
	}
	return nil
}

// EnsureTable creates the table if it is missing, and otherwise checks that it was made for this
// layout: the same salt bucket count and the family present. A mismatch is an error naming both
// values; running against such a table would write rows no query finds.
func EnsureTable(ctx context.Context, admin *hbase.Admin, l TableLayout) error {
	if err := l.ensureDefaults(); err != nil {
		return err
	}
	spec, err := admin.DescribeTable(ctx, l.Name)
	var he *hbase.Error
	if errors.As(err, &he) && (he.Class == "org.apache.hadoop.hbase.TableNotFoundException" ||
		he.Class == "TableNotFoundException") {
		return createTable(ctx, admin, l)
	}
	if err != nil {
		return fmt.Errorf("sinks: describe table %s: %w", l.Name, err)
	}
	return checkTable(spec, l)
}

// VerifyTable checks that the table exists and was made for this layout, creating nothing.
func VerifyTable(ctx context.Context, admin *hbase.Admin, l TableLayout) error {
	if err := l.ensureDefaults(); err != nil {
		return err
	}
	spec, err := admin.DescribeTable(ctx, l.Name)
	if err != nil {
		return fmt.Errorf("sinks: describe table %s: %w", l.Name, err)
	}
	return checkTable(spec, l)
}

func createTable(ctx context.Context, admin *hbase.Admin, l TableLayout) error {
	attrs := map[string]string{
		"VERSIONS":    strconv.Itoa(l.Versions),
		"BLOOMFILTER": l.BloomFilter,
		"COMPRESSION": l.Compression,
	}
	if l.TTL > 0 {
		attrs["TTL"] = strconv.FormatInt(int64(l.TTL/time.Second), 10)
	}
	spec := hbase.TableSpec{
		Name:       l.Name,
		Families:   []hbase.FamilySpec{{Name: l.Family, Attributes: attrs}},
		Attributes: map[string]string{AttrSaltBuckets: strconv.Itoa(l.SaltBuckets)},
		SplitKeys:  SaltSplitKeys(l.SaltBuckets),
	}
	if err := admin.CreateTable(ctx, spec); err != nil {
		return fmt.Errorf("sinks: create table %s: %w", l.Name, err)
	}
	return nil
}

func checkTable(spec *hbase.TableSpec, l TableLayout) error {
	got, ok := spec.Attributes[AttrSaltBuckets]
	if !ok {
		return fmt.Errorf("sinks: table %s has no %s attribute: it was not created by abacus; refusing to write rows salted with %d buckets",
			l.Name, AttrSaltBuckets, l.SaltBuckets)
	}
	if got != strconv.Itoa(l.SaltBuckets) {
		return fmt.Errorf("sinks: table %s was created with %s=%s, the sink is configured with %d: refusing to run",
			l.Name, AttrSaltBuckets, got, l.SaltBuckets)
	}
	for _, f := range spec.Families {
		if f.Name == l.Family {
			return nil
		}
	}
	names := make([]string, len(spec.Families))
	for i, f := range spec.Families {
		names[i] = f.Name
	}
	return fmt.Errorf("sinks: table %s has families %v, not %q: refusing to run", l.Name, names, l.Family)
}
