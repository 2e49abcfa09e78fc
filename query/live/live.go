// Package live reads the windows a processor group still holds open, through a goka view of the
// group table, so that dashboards see the running totals of windows whose final total has not been
// emitted yet (query.LiveSource).
//
// It only reads the group table's changelog; it must never write to a topic of the group.
package live

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/IBM/sarama"
	"github.com/abacus-stream/abacus/internal/plan"
	"github.com/abacus-stream/abacus/query"
	"github.com/abacus-stream/abacus/state"
	"github.com/abacus-stream/abacus/topology"
	"github.com/abacus-stream/abacus/totals"
	"github.com/lovoo/goka"
	"github.com/lovoo/goka/storage"
)

// Config says where the group table is and where the view keeps its copy.
type Config struct {
	Brokers []string
	// Group is the processor group whose table is read (default: the topology name).
	Group string
	// StoragePath keeps the view's local copy on disk; empty keeps it in memory.
	StoragePath string
	// KafkaVersion is the protocol version sarama speaks (default V2_8_0_0, as the processor).
	KafkaVersion sarama.KafkaVersion
	// Sarama, if set, adjusts the sarama config (TLS, SASL, timeouts).
	Sarama func(*sarama.Config)
}

// View serves the open windows of one topology's processor group.
type View struct {
	plan   *plan.Plan
	layout uint32
	view   *goka.View
}

// New prepares a view; Run must run for it to fill and follow the table.
func New(topo *topology.Topology, cfg Config) (*View, error) {
	if plan.Of(topo) == nil {
		return nil, errors.New("live.New: topology is nil or zero (make it with topology.Builder.Build)")
	}
	if len(cfg.Brokers) == 0 {
		return nil, errors.New("live: Brokers is empty")
	}
	if cfg.Group == "" {
		cfg.Group = topo.Name()
	}
	if cfg.KafkaVersion == (sarama.KafkaVersion{}) {
		cfg.KafkaVersion = sarama.V2_8_0_0
	}
	sc := func() *sarama.Config {
		c := goka.DefaultConfig()
		c.Version = cfg.KafkaVersion
		c.Consumer.Offsets.Initial = sarama.OffsetOldest
		if cfg.Sarama != nil {
			cfg.Sarama(c)
		}
		return c
	}
	sb := storage.MemoryBuilder()
	if cfg.StoragePath != "" {
		sb = storage.DefaultBuilder(cfg.StoragePath)
	}
	gv, err := goka.NewView(cfg.Brokers, goka.GroupTable(goka.Group(cfg.Group)), state.Codec{},
		goka.WithViewStorageBuilder(sb),
		goka.WithViewConsumerSaramaBuilder(func(brokers []string, clientID string) (sarama.Consumer, error) {
			c := sc()
			c.ClientID = clientID
			return sarama.NewConsumer(brokers, c)
		}),
		goka.WithViewTopicManagerBuilder(func(brokers []string) (goka.TopicManager, error) {
			return goka.NewTopicManager(brokers, sc(), goka.NewTopicManagerConfig())
		}),
		goka.WithViewAutoReconnect(),
	)
	if err != nil {
		return nil, fmt.Errorf("live: view of group %s: %w", cfg.Group, err)
	}
	p := plan.Of(topo)
	return &View{plan: p, layout: p.Layout().Hash, view: gv}, nil
}

// Run follows the group table until ctx ends.
func (v *View) Run(ctx context.Context) error {
	if err := v.view.Run(ctx); err != nil && ctx.Err() == nil {
		return fmt.Errorf("live: %w", err)
	}
	return nil
}

// Recovered reports whether the view has caught up with the table once.
func (v *View) Recovered() bool { return v.view.Recovered() }

// OpenWindows implements query.LiveSource: the windows of an entity in a set that the processor
// holds and has not yet closed, with their running totals.
func (v *View) OpenWindows(_ context.Context, set, entity string) ([]query.Window, error) {
	def := v.plan.SetByName(set)
	if def == nil {
		return nil, fmt.Errorf("%w: no aggregate set %q", query.ErrInvalid, set)
	}
	if !v.view.Recovered() {
		return nil, nil // still loading: the table's stored totals are all there is to show yet
	}
	key := entity
	if def.Rollup != nil {
		if def.Emit != plan.EmitEarly {
			// The owner holds only the partials that are final, not a running total: shown live,
			// a window would look like the whole while it misses the partitions still open.
			return nil, nil
		}
		key = plan.RollupStateKey(set, entity)
	}
	val, err := v.view.Get(key)
	if err != nil {
		return nil, fmt.Errorf("live: get %s: %w", key, err)
	}
	e, _ := val.(*state.Entity)
	if e == nil || (e.Layout != 0 && e.Layout != v.layout) {
		// Nothing, or state an earlier topology wrote: the processor converts it at the entity's
		// next write; until then its windows are shown as they land in the table.
		return nil, nil
	}
	return openWindows(def, entity, e)
}

// openWindows are the windows of e, an entity's state or a rollup owner's, that set def holds
// open, with their running totals, as the entity (or rollup key) entity's.
func openWindows(def *plan.Set, entity string, e *state.Entity) ([]query.Window, error) {
	set := def.Name
	var out []query.Window
	for i, w := range e.Windows {
		// Keyed windows are an entity's contributions to a rollup, or an owner's slots; a final
		// merged window is the marker of one whose total could not be kept.
		if w.Set != def.Index || w.Key != "" || w.Final || e.Closed(w, def.Grace) {
			continue
		}
		accs, err := def.WindowAccs(&w)
		rev, absent := w.Revision, w.Absent
		if err == nil && def.Rollup != nil {
			// The owner's running total: the final partials merged, and the early partials of the
			// partitions not final yet.
			accs, rev, absent, err = def.OwnerTotal(e, i)
		}
		if err != nil {
			return nil, fmt.Errorf("live: %s window %d of %s: %w", set, w.Start, entity, err)
		}
		qw := query.Window{Entity: entity, Set: set, Start: time.UnixMilli(w.Start), End: time.UnixMilli(w.End),
			Revision: rev, Live: true, Values: map[string]totals.Value{}}
		for _, val := range def.Values(accs, absent) {
			qw.Values[val.Name] = val
		}
		out = append(out, qw)
	}
	return out, nil
}
