package query

import (
	"slices"
	"time"

	"github.com/abacus-stream/abacus/internal/plan"
)

// Served is what the HTTP APIs (query/httpapi, query/opentsdb) serve of one topology: the
// aggregate sets it exposes and the reader of their table. (It is not a topology.Topology: the
// query server needs no topology code, and app builds one from a Topology.)
type Served struct {
	// Name is what requests pick the topology by, and the first part of its OpenTSDB metrics.
	Name string
	// Sets are the aggregate sets clients may ask for: a set not listed is refused, whatever the
	// table holds.
	Sets []ServedSet
	// Reader reads the topology's aggregate table (and its open windows, when it has them).
	Reader *Reader
}

// ServedSet describes an aggregate set for clients choosing what to chart (a topology.SetInfo
// reduced to what clients see).
type ServedSet struct {
	// Name is what requests name the set by.
	Name   string `json:"name"`
	Window string `json:"window"` // e.g. "tumbling 1m0s"
	// Aggregates are the set's aggregation names, each a series of the charts (and an OpenTSDB
	// metric <topology>.<set>.<aggregate>).
	Aggregates []string `json:"aggregates"`
	// Rollup is set for a set keyed by something other than the source's entity (topology
	// AggregateSet.By or Global). Its rows are stored and read as an entity set's, with the
	// rollup key's value in the entity's place.
	Rollup bool `json:"rollup"`
	// Dimension names what the set's keys are, as topology.SetInfo does: EntityDimension for an
	// entity set, the By name for a rollup (e.g. "region"), "" for a global rollup, whose one key
	// is GlobalKey. It is the OpenTSDB tag key of the set's series (none for a global rollup). A
	// set that is not a rollup and leaves it empty is an entity set.
	Dimension string `json:"dimension"`
	// Coarsens names the set this one is a coarser form of (topology AggregateSet.Coarser): the
	// OpenTSDB API answers that set's downsampled panels from this one where they are the same.
	Coarsens string `json:"coarsens,omitempty"`
	// Size is the length of the set's tumbling windows; 0 for other kinds.
	Size time.Duration `json:"-"`
	// Kinds are the aggregations' kinds (topology.SetInfo.Kinds), in Aggregates' order.
	Kinds []string `json:"-"`
}

// Kind is the kind of the set's aggregation named agg, "" when it has none of that name.
func (s ServedSet) Kind(agg string) string {
	if i := slices.Index(s.Aggregates, agg); i >= 0 && i < len(s.Kinds) {
		return s.Kinds[i]
	}
	return ""
}

// EntityDimension is the Dimension of an entity set (topology.EntityDimension). The query
// package keeps its own copy, as it needs no topology code; a test holds the two equal.
const EntityDimension = "entity"

// GlobalKey is the one key of a global rollup (topology.GlobalKey): the entity its rows are
// stored under.
const GlobalKey = plan.GlobalKey

// Global reports whether the set is a global rollup: one key, GlobalKey, and no dimension.
func (s ServedSet) Global() bool { return s.Rollup && s.Dimension == "" }

// KeyName is what the set's keys are called: the dimension, EntityDimension for an entity set
// that left it empty, "" for a global rollup.
func (s ServedSet) KeyName() string {
	if !s.Rollup && s.Dimension == "" {
		return EntityDimension
	}
	return s.Dimension
}
