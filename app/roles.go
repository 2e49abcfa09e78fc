package app

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/abacus-stream/abacus/internal/membership"
	"github.com/abacus-stream/abacus/processors"
	"golang.org/x/sync/errgroup"
)

// Roles a process can run.
const (
	RoleProcessor  = "processor"
	RoleAggregates = "aggregates-sink"
	RoleFacts      = "facts-sink"
	RoleQuery      = "query"
)

// AllRoles is every role, for a single-process deployment.
var AllRoles = []string{RoleProcessor, RoleAggregates, RoleFacts, RoleQuery}

// run runs the given roles until ctx ends or one fails. Each role reports to the process's ops
// endpoints (d.ops; made here when the caller made none); a static member first takes this host's
// lock on its instance id (membership.Lock), so that a second process of the host under the same
// id fails at once instead of fencing the first.
func (d *deployment) run(ctx context.Context, roles []string, procOpts func(*processors.Config), ready func(url string)) error {
	if d.ops == nil {
		d.ops = newOps(d.reg)
	}
	for _, role := range roles {
		if !contains(AllRoles, role) {
			return fmt.Errorf("unknown role %q: want %s", role, strings.Join(AllRoles, ", "))
		}
	}
	// A role that fails to start stops the ones started before it, and run returns only once they
	// have: they would otherwise run on without their host locks (released on return) and with
	// the deployment's clients closed under them by the caller.
	stop, cancel := context.WithCancel(ctx)
	defer cancel()
	g, gctx := errgroup.WithContext(stop)
	rg := &roleGroup{d: d, g: g, ctx: gctx}
	defer rg.release()
	for _, role := range roles {
		var err error
		switch role {
		case RoleProcessor:
			err = rg.startProcessor(procOpts)
		case RoleAggregates, RoleFacts:
			err = rg.startSink(role)
		case RoleQuery:
			rg.startQuery(ready)
		}
		if err != nil {
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
// member (and for the query server, which joins no group).
func (c *Config) memberID(role string) string {
	m := c.Membership
	if !m.Static() || m.InstanceID == "" || role == RoleQuery {
		return ""
	}
	return membership.MemberID(m.InstanceID, role)
}

// groupOf is the consumer group of a role ("" for the query server).
func (c *Config) groupOf(role string) string {
	switch role {
	case RoleProcessor:
		return c.Processor.Group
	case RoleAggregates:
		return c.Sinks.Aggregates.Group
	case RoleFacts:
		return c.Sinks.Facts.Group
	}
	return ""
}
