package app

import (
	"strings"
	"time"

	"github.com/abacus-stream/abacus/kafkasec"
	"github.com/abacus-stream/abacus/membership"
	"github.com/abacus-stream/abacus/processors"
)

// EnsureDefaults fills unset fields from the topology's name.
func (c *Config) EnsureDefaults() {
	name := c.Topology
	group := c.Topics.Prefix + name // groups of one environment stay apart from another's
	if c.Processor.Group == "" {
		c.Processor.Group = group
	}
	if c.Processor.IdleTimeout == 0 {
		c.Processor.IdleTimeout = Duration(processors.DefaultIdleTimeout)
	}
	if c.Processor.Replication == 0 {
		c.Processor.Replication = processors.DefaultReplication
	}
	fill := func(t *SinkTable, kind, role string) {
		if t.Table == "" {
			t.Table = strings.ReplaceAll(name, "-", "_") + "_" + kind
		}
		if t.Family == "" {
			t.Family = "d"
		}
		if t.SaltBuckets == 0 {
			t.SaltBuckets = 16
		}
		if t.Versions == 0 {
			t.Versions = 1
		}
		if t.Group == "" {
			t.Group = group + "-" + role
		}
	}
	for _, r := range sinkRoles() {
		fill(r.table(c), r.sink, r.name)
	}
	if c.Sinks.Offsets == "" {
		c.Sinks.Offsets = "kafka"
	}
	if c.Sinks.BackfillTable == "" {
		c.Sinks.BackfillTable = "abacus_backfill"
	}
	if c.Sinks.OffsetsTable == "" {
		c.Sinks.OffsetsTable = "abacus_offsets"
	}
	c.applyPrefix()
	if c.Sinks.Durability == "" {
		c.Sinks.Durability = "table_default"
	}
	if c.Query.Listen == "" {
		c.Query.Listen = "127.0.0.1:8080"
	}
	if c.Query.ReloadInterval == 0 {
		c.Query.ReloadInterval = Duration(10 * time.Second)
	}
	if c.Kafka.ConnectTimeout == 0 {
		c.Kafka.ConnectTimeout = Duration(kafkasec.DefaultCheckTimeout)
	}
	if c.HBase.ConnectTimeout == 0 {
		c.HBase.ConnectTimeout = Duration(30 * time.Second)
	}
	if c.Log.Level == "" {
		c.Log.Level = "info"
	}
	if c.Log.Format == "" {
		c.Log.Format = "text"
	}
	if c.Membership.Mode == "" {
		c.Membership.Mode = "static"
	}
	if c.Membership.InstanceID == "" && c.Membership.Static() {
		c.Membership.InstanceID, c.hostErr = membership.HostID()
	}
	if c.Membership.SessionTimeout == 0 {
		c.Membership.SessionTimeout = Duration(DefaultSessionTimeout)
	}
}

// DefaultSessionTimeout is membership.session_timeout's default: franz-go's and the Java
// client's, long enough for a crashed process to be restarted and find its partitions waiting.
const DefaultSessionTimeout = 45 * time.Second

// heartbeatInterval is how often every member heartbeats its group. A rebalance (a member left or
// joined) reaches the others with their next heartbeat, so this bounds how long a clean stop's
// partitions wait for their new owner; the clients' default is 3 s.
const heartbeatInterval = time.Second

// applyPrefix puts topics.prefix before every consumer group and table the deployment owns,
// defaults and names written in the file alike, unless a name has it already: two environments
// on one Kafka and one HBase (dev- and prod-, from one file) then share no group, changelog,
// loop topic or table. Before, an explicit processor.group or table was taken as is, and the
// two environments silently consumed from one group and wrote one table.
func (c *Config) applyPrefix() {
	p := c.Topics.Prefix
	own := func(s *string) {
		if p != "" && *s != "" && !strings.HasPrefix(*s, p) {
			*s = p + *s
		}
	}
	for _, r := range roles {
		if r.group != nil {
			own(r.group(c))
		}
		if r.table != nil {
			own(&r.table(c).Table)
		}
	}
	own(&c.Sinks.OffsetsTable)
	own(&c.Sinks.BackfillTable)
}
