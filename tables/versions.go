// Package tables keeps the tables a topology joins its events with (topology.Join): every
// version of every key, each valid from its own time until the key's next one, so that an event
// looks up the value its key had at the event's time, live and in any replay alike.
//
// Versions is the store itself; Reader fills one from Kafka (the table's topic, and the versions
// topic where a processor group keeps what it read, since compaction of the table's topic keeps
// only each key's newest value); Memory is a store for drivers that feed tables by hand
// (abacustest). Set puts a topology's readers behind the interface the engine looks tables up
// through.
//
// It must never answer an event from a version that was not valid at the event's time, and never
// forget a version an event within the table's History could still need.
package tables

import (
	"slices"
	"sync"
)

// version is one value of a key, valid from its time (ms) until the key's next version.
type version struct {
	from    int64
	value   any
	deleted bool  // a tombstone: the key has no value from this version on
	origin  int32 // the partition of the table's topic it was read from
}

// Versions holds every version of every key of one table. It is safe for concurrent use.
type Versions struct {
	mu     sync.RWMutex
	byKey  map[string][]version // each sorted by from, no two with one from
	count  int
	newest int64 // the largest from of any version: the table's time
}

// NewVersions returns an empty store.
func NewVersions() *Versions { return &Versions{byKey: map[string][]version{}, newest: minTime} }

// minTime is before any version.
const minTime = -1 << 63

// Put records that key has value (or, if deleted, none) from time from on, read from partition
// origin of the table's topic. A second version of one key with the same time replaces the
// first: the later record of a key wins.
func (v *Versions) Put(key string, from int64, value any, deleted bool, origin int32) {
	v.mu.Lock()
	defer v.mu.Unlock()
	vs := v.byKey[key]
	i, found := slices.BinarySearchFunc(vs, from, func(x version, t int64) int {
		switch {
		case x.from < t:
			return -1
		case x.from > t:
			return 1
		}
		return 0
	})
	nv := version{from: from, value: value, deleted: deleted, origin: origin}
	if found {
		vs[i] = nv
	} else {
		vs = slices.Insert(vs, i, nv)
		v.count++
	}
	v.byKey[key] = vs
	v.newest = max(v.newest, from)
}

// At returns the value key had at time t: its latest version from at or before t. found is false
// when the key had no version by then, or its version then was a deletion.
func (v *Versions) At(key string, t int64) (value any, found bool) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	vs := v.byKey[key]
	// The first version after t; the one before it is in force at t.
	i, _ := slices.BinarySearchFunc(vs, t+1, func(x version, t int64) int {
		if x.from < t {
			return -1
		}
		return 1
	})
	if i == 0 || vs[i-1].deleted {
		return nil, false
	}
	return vs[i-1].value, true
}

// Len is how many versions the store holds.
func (v *Versions) Len() int {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.count
}

// Newest is the largest time of any version (the table's time), or minTime when empty.
func (v *Versions) Newest() int64 {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.newest
}

// Pruned is a version Prune dropped: its key, time, and the partition it was read from.
type Pruned struct {
	Key    string
	From   int64
	Origin int32
}

// Prune drops the versions no lookup at or after horizon can reach: every version superseded by
// a later one from at or before horizon, and a key whose version in force at horizon is a
// deletion. It returns what it dropped.
func (v *Versions) Prune(horizon int64) []Pruned {
	v.mu.Lock()
	defer v.mu.Unlock()
	var out []Pruned
	for key, vs := range v.byKey {
		// The version in force at horizon: the last one from at or before it.
		n := 0
		for n < len(vs) && vs[n].from <= horizon {
			n++
		}
		keep := n - 1 // versions before the one in force at horizon are unreachable
		if keep >= 0 && vs[keep].deleted {
			keep++ // and so is a deletion in force at horizon: At gives not found either way
		}
		if keep <= 0 {
			continue
		}
		for _, x := range vs[:keep] {
			out = append(out, Pruned{Key: key, From: x.from, Origin: x.origin})
		}
		v.count -= keep
		if keep == len(vs) {
			delete(v.byKey, key)
			continue
		}
		v.byKey[key] = slices.Clone(vs[keep:])
	}
	return out
}
