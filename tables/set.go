package tables

import (
	"context"
	"fmt"
	"time"

	"github.com/abacus-stream/abacus/internal/plan"
	"github.com/abacus-stream/abacus/topology"
)

// Set is a topology's tables read from Kafka, by their index in the plan: what the processor
// hands its engine to look tables up.
type Set struct {
	readers []*Reader
}

// OpenAll opens a Reader for each table of topo (Open), in parallel; it returns once all are
// read. With cfg.Group the processor group's, these are the versions its live run looked up.
func OpenAll(ctx context.Context, topo *topology.Topology, cfg Config) (*Set, error) {
	p := plan.Of(topo)
	if p == nil {
		return nil, fmt.Errorf("tables.OpenAll: topology is nil or zero (make it with topology.Builder.Build)")
	}
	s := &Set{readers: make([]*Reader, len(p.Tables))}
	errs := make(chan error, len(p.Tables))
	for i, def := range p.Tables {
		go func() {
			r, err := Open(ctx, def, cfg)
			s.readers[i] = r
			errs <- err
		}()
	}
	var first error
	for range p.Tables {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	if first != nil {
		s.Close()
		return nil, first
	}
	return s, nil
}

// Wait blocks until table can answer for event time t of a record stamped record (Reader.Wait).
func (s *Set) Wait(ctx context.Context, table int, t int64, record time.Time) bool {
	return s.readers[table].Wait(ctx, t, record)
}

// At is the value key had in table at time t.
func (s *Set) At(table int, key string, t int64) (any, bool) { return s.readers[table].At(key, t) }

// Close stops every reader.
func (s *Set) Close() {
	for _, r := range s.readers {
		if r != nil {
			r.Close()
		}
	}
}

// Memory is a topology's tables held in memory and fed by hand (Put), for drivers that run the
// engine without Kafka (abacustest): it always answers at once.
type Memory struct {
	p      *plan.Plan
	byName map[string]*Versions
}

// NewMemory returns empty tables for topo.
func NewMemory(topo *topology.Topology) *Memory {
	return (&Memory{byName: map[string]*Versions{}}).For(topo)
}

// For is the same tables seen by another version of the topology (a driver restarted with it):
// tables are found by name.
func (m *Memory) For(topo *topology.Topology) *Memory {
	p := plan.Of(topo)
	for _, t := range p.Tables {
		if m.byName[t.Name] == nil {
			m.byName[t.Name] = NewVersions()
		}
	}
	return &Memory{p: p, byName: m.byName}
}

// Put records a version of key in the table named name: value from time from on, or, with value
// nil, a deletion. The value must be of the table's type.
func (m *Memory) Put(name, key string, from time.Time, value any) error {
	v := m.byName[name]
	if v == nil {
		return fmt.Errorf("no table %q in topology %q", name, m.p.Name)
	}
	v.Put(key, from.UnixMilli(), value, value == nil, 0)
	return nil
}

// Wait always answers at once: a Memory table holds what it was given.
func (m *Memory) Wait(context.Context, int, int64, time.Time) bool { return true }

// At is the value key had in table at time t.
func (m *Memory) At(table int, key string, t int64) (any, bool) {
	return m.byName[m.p.Tables[table].Name].At(key, t)
}
