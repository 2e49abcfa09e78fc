package app

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/IBM/sarama"
	"github.com/abacus-stream/abacus/internal/plan"
	"github.com/abacus-stream/abacus/membership"
	"github.com/abacus-stream/abacus/processors"
	"github.com/abacus-stream/abacus/query/httpapi"
	"github.com/abacus-stream/abacus/sinks"
	"github.com/abacus-stream/abacus/topology"
	"github.com/twmb/franz-go/pkg/kadm"
	"golang.org/x/sync/errgroup"
)

// Names of the roles a process can run.
const (
	RoleProcessor  = "processor"
	RoleAggregates = "aggregates-sink"
	RoleFacts      = "facts-sink"
	RoleQuery      = "query"
)

// role is one job a process can run. The roles table declares each role once, and everything
// that deals with roles reads it: run and serve, admin create and verify, offsets, status, the
// ops endpoints, the demo, the config's defaults and validation, and (through RoleNames and
// StopBound) the deploy checks. A new sink is its own package, its block of the config and one
// entry made by sinkRole.
type role struct {
	name  string // in -roles, the ops endpoints, metrics and status
	title string // what status calls it
	// opsListen is the default ops listener of a process this role leads (see opsListen); "" for
	// the query server, whose own listener serves them.
	opsListen string
	// group is the config field of the consumer group it joins, nil when it joins none. Its
	// default is the topology's group, followed by "-" and the role's name for all but the
	// processor.
	group func(*Config) *string
	// inputs are the topics its group commits offsets on.
	inputs func(*Config, *topology.Topology) []string
	// offsets reads and moves its group's committed offsets.
	offsets func(d *deployment, adm *kadm.Client) sinks.OffsetsAdmin
	// sink is its name in `abacus offsets -sink`, in its metrics and in the config
	// (sinks.<sink>); "" for a role that is not a sink.
	sink string
	// table is its sink table's block of the config; nil for none.
	table func(*Config) *SinkTable
	// reads is the table it reads and creates nothing in (the query server's); nil for none.
	reads func(*Config) *SinkTable
	// holdsAggregates says that its table holds the aggregate sets' windows: the key index
	// (schema.KeyIndexLayout) goes beside it, and admin verify describes the sets it holds.
	holdsAggregates bool
	// needs is what a process running it connects to before it starts, beyond the clients it
	// opens itself.
	needs func(*Config) needs
	// start starts it in rg, with its readiness check.
	start func(rg *roleGroup, r *role, o startOptions) error
	// stopWithin bounds how long a clean stop of it may take.
	stopWithin func() time.Duration
	// servesOps says that its listener carries the process's ops endpoints when ops.listen is
	// unset.
	servesOps bool
	// openWindows says that its ops endpoints report the open windows per partition (status).
	openWindows bool
}

// startOptions are what the caller of run adds to the roles it starts.
type startOptions struct {
	processor func(*processors.Config) // adjusts the processor's configuration (tests)
	ready     func(url string)         // called once the query server listens
}

// roles is every role, in the order a process starts them. It is filled by init because the
// roles' start functions read it (a static member's id depends on its role).
var roles []*role

func init() { roles = builtinRoles() }

// builtinRoles is abacus's own roles.
func builtinRoles() []*role {
	return []*role{
		{
			name: RoleProcessor, title: "processor", opsListen: "127.0.0.1:9361",
			group: func(c *Config) *string { return &c.Processor.Group },
			inputs: func(c *Config, t *topology.Topology) []string {
				return append(t.SourceTopics(), plan.LoopTopic(c.Processor.Group))
			},
			offsets: func(_ *deployment, adm *kadm.Client) sinks.OffsetsAdmin {
				return sinks.OffsetsAdmin{Kafka: adm} // goka commits to Kafka
			},
			needs:      func(*Config) needs { return needs{brokers: true} },
			start:      (*roleGroup).startProcessor,
			stopWithin: processorStop,
			// Its open windows are on its ops endpoints: status reads them there.
			openWindows: true,
		},
		sinkRole(RoleAggregates, "aggregates sink", "127.0.0.1:9362", "aggregates",
			func(c *Config) *SinkTable { return &c.Sinks.Aggregates },
			func(_ *Config, t *topology.Topology) []string { return []string{t.TotalsTopic()} },
			(*deployment).aggregatesEncoder, true),
		sinkRole(RoleFacts, "facts sink", "127.0.0.1:9363", "facts",
			func(c *Config) *SinkTable { return &c.Sinks.Facts },
			func(_ *Config, t *topology.Topology) []string { return t.SourceTopics() },
			(*deployment).factsEncoder, false),
		{
			name: RoleQuery, title: "query server",
			reads: func(c *Config) *SinkTable { return &c.Sinks.Aggregates },
			needs: func(c *Config) needs { return needs{store: true, brokers: !c.Query.NoLive} },
			start: (*roleGroup).startQuery,
			// The HTTP shutdown waits for the requests in flight.
			stopWithin: func() time.Duration { return httpapi.ShutdownGrace },
			servesOps:  true,
		},
	}
}

// sinkRole is the role of a sink that writes the records of its inputs into its table, with the
// cells its encoder makes.
func sinkRole(name, title, opsListen, sink string, table func(*Config) *SinkTable,
	inputs func(*Config, *topology.Topology) []string,
	encoder func(*deployment, SinkTable) (sinks.Encoder, error), holdsAggregates bool) *role {
	return &role{
		name: name, title: title, opsListen: opsListen, sink: sink, table: table, inputs: inputs, holdsAggregates: holdsAggregates,
		group:   func(c *Config) *string { return &table(c).Group },
		offsets: (*deployment).sinkOffsetsAdmin,
		// A sink checks its topics and its table before it starts.
		needs: func(*Config) needs { return needs{kafka: true, store: true} },
		start: func(rg *roleGroup, r *role, _ startOptions) error {
			return rg.startSink(r, func(t SinkTable) (sinks.Encoder, error) { return encoder(rg.d, t) })
		},
		stopWithin: sinkStop,
	}
}

// processorStop bounds a clean stop of the processor: its last commit and its LeaveGroup are
// requests of its group client, whose read timeout is the rebalance timeout plus 5 s
// (processors/membership.go).
func processorStop() time.Duration {
	return sarama.NewConfig().Consumer.Group.Rebalance.Timeout + 5*time.Second
}

// sinkStop bounds a clean stop of a sink: it lands and commits what it holds, then leaves.
func sinkStop() time.Duration {
	var sc sinks.Config
	sc.EnsureDefaults()
	return sc.RevokeTimeout + sinks.LeaveTimeout
}

// RoleNames is every role, in the order a process starts them: what -roles all runs.
func RoleNames() []string {
	out := make([]string, len(roles))
	for i, r := range roles {
		out[i] = r.name
	}
	return out
}

// StopBound is how long a clean stop of the named role may take, from the timeouts in the code;
// an orchestrator's grace period must be longer, or it kills a stop that was going to finish.
func StopBound(name string) (time.Duration, bool) {
	r := roleNamed(name)
	if r == nil {
		return 0, false
	}
	return r.stopWithin(), true
}

// roleNamed is the role called name, or nil.
func roleNamed(name string) *role {
	for _, r := range roles {
		if r.name == name {
			return r
		}
	}
	return nil
}

// rolesOf is the roles named, in the table's order; an unknown name is an error naming the known.
func rolesOf(names []string) ([]*role, error) {
	for _, n := range names {
		if roleNamed(n) == nil {
			return nil, fmt.Errorf("unknown role %q: want %s", n, strings.Join(RoleNames(), ", "))
		}
	}
	var out []*role
	for _, r := range roles {
		if contains(names, r.name) {
			out = append(out, r)
		}
	}
	return out, nil
}

// enabled says whether the config runs the role at all: a sink whose table is disabled does not.
func (r *role) enabled(c *Config) bool { return r.table == nil || !r.table(c).Disabled }

// groupIn is the role's consumer group under the config, "" for none.
func (r *role) groupIn(c *Config) string {
	if r.group == nil {
		return ""
	}
	return *r.group(c)
}

// servesOpsIn says that one of the named roles serves the ops endpoints on its own listener.
func servesOpsIn(names []string) bool {
	for _, n := range names {
		if r := roleNamed(n); r != nil && r.servesOps {
			return true
		}
	}
	return false
}

// sinkRoles is the roles that are sinks, with a table, in the table's order.
func sinkRoles() []*role {
	var out []*role
	for _, r := range roles {
		if r.table != nil {
			out = append(out, r)
		}
	}
	return out
}

// prepare makes ready what the named roles need before they start, waiting (w) for servers not
// reached yet: a process running a sink creates its table (and checks its topics) if
// `abacus admin create` has not; a process that only reads a table (the query server) waits for
// it to exist and creates nothing, so it runs with a right to read alone.
func (d *deployment) prepare(ctx context.Context, names []string, w *waiter) error {
	rs, err := rolesOf(names)
	if err != nil {
		return err
	}
	writes := false
	for _, r := range rs {
		writes = writes || (r.table != nil && r.enabled(d.cfg))
	}
	if writes {
		if err := w.do(ctx, "HBase to check the tables", d.ensureTables); err != nil {
			return err
		}
		if err := w.do(ctx, "Kafka "+strings.Join(d.cfg.Kafka.Brokers, ",")+" to check the topics", d.sinkTopics); err != nil {
			return err
		}
	}
	for _, r := range rs {
		if r.reads == nil || !r.enabled(d.cfg) {
			continue
		}
		t := r.reads(d.cfg)
		err := w.do(ctx, "table "+t.Table+" (`abacus admin create` makes it)", func(ctx context.Context) error {
			_, err := d.st.SaltBuckets(ctx, t.Table)
			return err
		})
		if err != nil {
			return fmt.Errorf("%s: %w", r.name, err)
		}
	}
	return nil
}

// run runs the given roles until ctx ends or one fails. Each role reports to the process's ops
// endpoints (d.ops; made here when the caller made none); a static member first takes this host's
// lock on its instance id (membership.Lock), so that a second process of the host under the same
// id fails at once instead of fencing the first.
func (d *deployment) run(ctx context.Context, names []string, o startOptions) error {
	if d.ops == nil {
		d.ops = newOps(d.reg)
	}
	rs, err := rolesOf(names)
	if err != nil {
		return err
	}
	// A role that fails to start stops the ones started before it, and run returns only once they
	// have: they would otherwise run on without their host locks (released on return) and with
	// the deployment's clients closed under them by the caller.
	stop, cancel := context.WithCancel(ctx)
	defer cancel()
	g, gctx := errgroup.WithContext(stop)
	rg := &roleGroup{d: d, g: g, ctx: gctx}
	defer rg.release()
	for _, r := range rs {
		if !r.enabled(d.cfg) {
			continue
		}
		if err := r.start(rg, r, o); err != nil {
			cancel()
			if werr := g.Wait(); werr != nil {
				d.log.Warn("a role started before the failed one stopped with an error", "err", werr)
			}
			return err
		}
	}
	return g.Wait()
}

// roleGroup is the roles run started: their goroutines, under one context that ends when any of
// them fails, and the host locks of their member ids, held until run returns.
type roleGroup struct {
	d        *deployment
	g        *errgroup.Group
	ctx      context.Context
	releases []func()
}

// claim gives a role its ops state and takes this host's lock on its member id (none for a
// dynamic member); a lock held by another process ends the role's state with the error.
func (rg *roleGroup) claim(role, group string) (*roleState, error) {
	member := rg.d.memberID(role)
	rs := rg.d.roleState(role, group, member)
	if member == "" {
		return rs, nil
	}
	release, err := membership.Lock(group, member)
	if err != nil {
		rs.ended(err)
		return nil, fmt.Errorf("%s: %w", role, err)
	}
	rg.releases = append(rg.releases, release)
	return rs, nil
}

// goRole runs a role, and reports its end to the ops endpoints. A role that stops because another
// failed (or the process stops) has not failed itself.
func (rg *roleGroup) goRole(rs *roleState, run func(ctx context.Context) error) {
	rg.g.Go(func() error {
		err := run(rg.ctx)
		if rg.ctx.Err() != nil && err != nil && errors.Is(err, context.Canceled) {
			err = nil
		}
		rs.ended(err)
		return err
	})
}

// release gives back the host locks claim took.
func (rg *roleGroup) release() {
	for _, r := range rg.releases {
		r()
	}
}

// roleState is the ops endpoints' state of a role: the one the caller added while connecting, or
// a new one.
func (d *deployment) roleState(role, group, member string) *roleState {
	if rs := d.ops.lookup(role); rs != nil {
		return rs
	}
	return d.ops.role(role, group, member)
}

// memberID is the group.instance.id of a role of this process, or "" for a dynamic member.
func (d *deployment) memberID(role string) string { return d.cfg.memberID(role) }

// memberID is the group.instance.id of a role of a process with this config, or "" for a dynamic
// member (and for a role that joins no group).
func (c *Config) memberID(name string) string {
	m := c.Membership
	if r := roleNamed(name); !m.Static() || m.InstanceID == "" || r == nil || r.group == nil {
		return ""
	}
	return membership.MemberID(m.InstanceID, name)
}

// groupOf is the consumer group of a role ("" for one that joins none).
func (c *Config) groupOf(name string) string {
	if r := roleNamed(name); r != nil {
		return r.groupIn(c)
	}
	return ""
}
