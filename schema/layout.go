package schema

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// AttrSaltBuckets is the table attribute that records a table's salt bucket count: row keys built
// with another count would land in the wrong buckets and be invisible to prefix scans, so readers
// and writers take the count from the table, and a writer configured otherwise refuses to run.
const AttrSaltBuckets = "abacus.salt.buckets"

// AttrFormat is the table attribute that records the version of the layout of its rows, qualifiers
// and cell values (Format), so that a reader meets a table written otherwise with an error, not
// with values it misreads. A table created before it was recorded has none: version 1.
const AttrFormat = "abacus.format"

// Format is the version of the row, qualifier and cell layout this package writes.
const Format = "1"

// TableLayout describes an abacus table: one family, pre-split on the salt bucket boundaries.
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

// EnsureDefaults fills the zero fields that have defaults.
func (l *TableLayout) EnsureDefaults() {
	if l.Versions <= 0 {
		l.Versions = 1
	}
	if l.BloomFilter == "" {
		l.BloomFilter = "ROW"
	}
	if l.Compression == "" {
		l.Compression = "NONE"
	}
}

// Validate reports what makes the layout unusable.
func (l *TableLayout) Validate() error {
	var errs []error
	if l.Name == "" {
		errs = append(errs, errors.New("table name is empty"))
	}
	if l.Family == "" {
		errs = append(errs, fmt.Errorf("table %s: family is empty", l.Name))
	}
	if l.SaltBuckets < 1 || l.SaltBuckets > MaxSaltBuckets {
		errs = append(errs, fmt.Errorf("table %s: salt buckets %d outside 1..%d", l.Name, l.SaltBuckets, MaxSaltBuckets))
	}
	switch l.BloomFilter {
	case "", "NONE", "ROW", "ROWCOL":
	default:
		errs = append(errs, fmt.Errorf("table %s: bloom filter %q is not NONE, ROW or ROWCOL", l.Name, l.BloomFilter))
	}
	if l.TTL < 0 {
		errs = append(errs, fmt.Errorf("table %s: negative TTL", l.Name))
	}
	if l.Compression != "" && !slices.Contains(Compressions, l.Compression) {
		errs = append(errs, fmt.Errorf("table %s: compression %q is not one of %s", l.Name, l.Compression, strings.Join(Compressions, ", ")))
	}
	return errors.Join(errs...)
}

// Attributes are the table attributes that record the layout (AttrSaltBuckets, AttrFormat).
func (l *TableLayout) Attributes() map[string]string {
	return map[string]string{AttrSaltBuckets: strconv.Itoa(l.SaltBuckets), AttrFormat: Format}
}

// SaltBucketsOf reads the salt bucket count from a table's attributes.
func SaltBucketsOf(table string, attrs map[string]string) (int, error) {
	got, ok := attrs[AttrSaltBuckets]
	if !ok {
		return 0, fmt.Errorf("table %s has no %s attribute: it was not created by abacus", table, AttrSaltBuckets)
	}
	n, err := strconv.Atoi(got)
	if err != nil || n < 1 || n > MaxSaltBuckets {
		return 0, fmt.Errorf("table %s: %s=%q is not a bucket count in 1..%d", table, AttrSaltBuckets, got, MaxSaltBuckets)
	}
	return n, nil
}

// CheckExisting checks that a table found with these attributes and families was made for this
// layout: the same salt bucket count and the family present. Running against another table would
// write rows no query finds, so a mismatch is an error naming both values.
func (l *TableLayout) CheckExisting(attrs map[string]string, families []string) error {
	n, err := SaltBucketsOf(l.Name, attrs)
	if err != nil {
		return fmt.Errorf("%w; refusing to use it with %d salt buckets", err, l.SaltBuckets)
	}
	if f, ok := attrs[AttrFormat]; ok && f != Format {
		return fmt.Errorf("table %s holds cells of format %s=%s, this version of abacus reads %s: refusing to run",
			l.Name, AttrFormat, f, Format)
	}
	if n != l.SaltBuckets {
		return fmt.Errorf("table %s was created with %s=%d, the configuration says %d: refusing to run",
			l.Name, AttrSaltBuckets, n, l.SaltBuckets)
	}
	if !slices.Contains(families, l.Family) {
		return fmt.Errorf("table %s has families %v, not %q: refusing to run", l.Name, families, l.Family)
	}
	return nil
}

// Compressions are the codecs HBase names (Compression.Algorithm); a region server may still lack
// the native library of one, which creating the table reports.
var Compressions = []string{"NONE", "GZ", "SNAPPY", "LZ4", "LZO", "ZSTD", "BZIP2", "LZMA"}

// The family settings abacus sets, as HBase names them.
const (
	SettingVersions    = "VERSIONS"
	SettingTTL         = "TTL"
	SettingBloomFilter = "BLOOMFILTER"
	SettingCompression = "COMPRESSION"
)

// foreverTTL is HBase's TTL of a family that keeps cells for ever (HConstants.FOREVER).
const foreverTTL = "2147483647"

// FamilySettings are the column family settings the layout asks for, as HBase names them: what a
// table is created with, and what Drift compares.
func (l *TableLayout) FamilySettings() map[string]string {
	l.EnsureDefaults()
	s := map[string]string{
		SettingVersions:    strconv.Itoa(l.Versions),
		SettingBloomFilter: l.BloomFilter,
		SettingCompression: l.Compression,
	}
	if l.TTL > 0 {
		s[SettingTTL] = strconv.FormatInt(int64(l.TTL/time.Second), 10)
	}
	return s
}

// Drift lists, one sentence each, the family settings of an existing table (as HBase describes
// them; a setting it leaves out has HBase's default) that differ from the layout's. A drifted
// table still works, so this is for admin verify to report, not a reason to refuse to run: an
// operator may have changed a TTL on purpose, and should know the config says otherwise.
func (l *TableLayout) Drift(family map[string]string) []string {
	want := l.FamilySettings()
	defaults := map[string]string{SettingVersions: "1", SettingBloomFilter: "ROW", SettingCompression: "NONE", SettingTTL: foreverTTL}
	norm := func(k, v string) string {
		if v == "" {
			v = defaults[k]
		}
		if k == SettingTTL && (v == "FOREVER" || v == "") {
			v = foreverTTL
		}
		return strings.ToUpper(v)
	}
	show := func(k, v string) string {
		if k == SettingTTL {
			if v == foreverTTL {
				return "forever"
			}
			if n, err := strconv.ParseInt(v, 10, 64); err == nil {
				return (time.Duration(n) * time.Second).String()
			}
		}
		return v
	}
	var out []string
	for _, k := range []string{SettingVersions, SettingTTL, SettingBloomFilter, SettingCompression} {
		have, cfg := norm(k, family[k]), norm(k, want[k])
		if have != cfg {
			out = append(out, fmt.Sprintf("table %s family %s: %s is %s, the configuration says %s", l.Name, l.Family, k, show(k, have), show(k, cfg)))
		}
	}
	return out
}
