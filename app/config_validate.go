package app

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/abacus-stream/abacus/membership"
	"github.com/abacus-stream/abacus/query/httpsec"
	"github.com/abacus-stream/abacus/schema"
)

// Validate checks the configuration; each error names the field at fault, as the YAML spells it.
func (c *Config) Validate(known []string) error {
	errs := fieldErrors(append([]error(nil), c.envErrs...))
	c.validateTopology(&errs, known)
	c.validateKafka(&errs)
	c.validateHBase(&errs)
	c.validateProcessor(&errs)
	c.validateSinks(&errs)
	if _, _, err := splitHostPort(c.Query.Listen); err != nil {
		errs.bad("query.listen", "%v", err)
	}
	c.validateMembership(&errs)
	c.validateOps(&errs)
	if _, err := c.Log.handler(io.Discard); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, c.Query.validate()...)
	return errors.Join(errs...)
}

// fieldErrors collects what Validate finds, every error naming its field.
type fieldErrors []error

// bad adds an error about field.
func (e *fieldErrors) bad(field, format string, args ...any) {
	*e = append(*e, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
}

// validateTopology checks that the config names a topology of the binary.
func (c *Config) validateTopology(errs *fieldErrors, known []string) {
	switch {
	case c.Topology == "":
		errs.bad("topology", "required: one of %s", strings.Join(known, ", "))
	case !contains(known, c.Topology):
		errs.bad("topology", "%q is not compiled into this binary; it has %s", c.Topology, strings.Join(known, ", "))
	}
}

// validateKafka checks the brokers and the security settings.
func (c *Config) validateKafka(errs *fieldErrors) {
	if len(c.Kafka.Brokers) == 0 {
		errs.bad("kafka.brokers", "required (or set ABACUS_KAFKA_BROKERS)")
	}
	for i, b := range c.Kafka.Brokers {
		if !strings.Contains(b, ":") {
			errs.bad(fmt.Sprintf("kafka.brokers[%d]", i), "%q is not host:port", b)
		}
	}
	// Reads the CA, certificate, key and password files: a missing or wrong one is named here,
	// before anything starts.
	if err := c.Kafka.Security().Validate(); err != nil {
		*errs = append(*errs, err)
	}
}

// validateHBase checks that exactly one store is named, and HBase's authentication.
func (c *Config) validateHBase(errs *fieldErrors) {
	switch {
	case c.HBase.ZooKeeper == "" && c.HBase.Embedded == "":
		errs.bad("hbase", "set hbase.zookeeper (a ZooKeeper quorum) or hbase.embedded (a folder for the embedded store)")
	case c.HBase.ZooKeeper != "" && c.HBase.Embedded != "":
		errs.bad("hbase", "hbase.zookeeper and hbase.embedded are both set: choose one")
	}
	if c.Query.CacheBytes < 0 {
		errs.bad("query.cache_bytes", "must not be negative, got %d (query.no_cache turns the cache off)", c.Query.CacheBytes)
	}
	if c.Query.MaxScans < 0 {
		errs.bad("query.max_scans", "must not be negative, got %d", c.Query.MaxScans)
	}
	if c.Kafka.ConnectTimeout < 0 {
		errs.bad("kafka.connect_timeout", "must not be negative, got %v", time.Duration(c.Kafka.ConnectTimeout))
	}
	if c.HBase.ConnectTimeout < 0 {
		errs.bad("hbase.connect_timeout", "must not be negative, got %v", time.Duration(c.HBase.ConnectTimeout))
	}
	cl := c.HBase.Client
	for name, d := range map[string]Duration{"rpc_timeout": cl.RPCTimeout, "dial_timeout": cl.DialTimeout,
		"zookeeper_timeout": cl.ZooKeeperTimeout, "backoff_min": cl.BackoffMin, "backoff_max": cl.BackoffMax,
		"relocate_backoff_max": cl.RelocateBackoffMax} {
		if d < 0 {
			errs.bad("hbase.client."+name, "must not be negative, got %v", time.Duration(d))
		}
	}
	for name, n := range map[string]int{"max_in_flight_per_server": cl.MaxInFlightPerServer,
		"max_in_flight_per_region": cl.MaxInFlightPerRegion, "max_rounds": cl.MaxRounds} {
		if n < 0 {
			errs.bad("hbase.client."+name, "must not be negative, got %d", n)
		}
	}
	if cl.BackoffMin > 0 && cl.BackoffMax > 0 && cl.BackoffMin > cl.BackoffMax {
		errs.bad("hbase.client.backoff_min", "%v is longer than hbase.client.backoff_max %v", time.Duration(cl.BackoffMin), time.Duration(cl.BackoffMax))
	}
	if c.HBase.ZNodeParent != "" && !strings.HasPrefix(c.HBase.ZNodeParent, "/") {
		errs.bad("hbase.znode_parent", "%q is not a ZooKeeper path (it starts with /)", c.HBase.ZNodeParent)
	}
	if hc := c.HBase.ClientConfig(); c.HBase.Embedded == "" && hc.ZooKeeper != "" {
		// The hbase package names its fields (Config.Kerberos.Keytab is hbase.kerberos.keytab here).
		if err := hc.Validate(); err != nil {
			errs.bad("hbase.auth", "%v", err)
		}
	}
}

// validateProcessor checks the processor block.
func (c *Config) validateProcessor(errs *fieldErrors) {
	if c.Processor.IdleTimeout < 0 {
		errs.bad("processor.idle_timeout", "must not be negative")
	}
	if c.Processor.Replication < 1 {
		errs.bad("processor.replication", "must be at least 1, got %d", c.Processor.Replication)
	}
}

// validateSinks checks both sink tables, where offsets are kept, and how cells are written.
func (c *Config) validateSinks(errs *fieldErrors) {
	sr := sinkRoles()
	for i, r := range sr {
		t := *r.table(c)
		t.validate(errs, "sinks."+r.sink+".")
		for _, o := range sr[:i] {
			if ot := *o.table(c); ot.Table == t.Table && !ot.Disabled && !t.Disabled {
				errs.bad("sinks."+r.sink+".table", "is the same table as sinks.%s.table (%s)", o.sink, t.Table)
			}
		}
	}
	switch c.Sinks.Offsets {
	case "kafka", "hbase":
	default:
		errs.bad("sinks.offsets", "%q is not kafka or hbase", c.Sinks.Offsets)
	}
	if c.Sinks.Offsets == "hbase" && c.HBase.ZooKeeper == "" {
		errs.bad("sinks.offsets", "hbase needs hbase.zookeeper")
	}
	if _, err := parseDurability(c.Sinks.Durability); err != nil {
		errs.bad("sinks.durability", "%v", err)
	} else if c.Sinks.Durability == "skip_wal" && !c.Sinks.ForceSkipWAL {
		errs.bad("sinks.durability", "skip_wal loses acknowledged cells when a region server dies; set sinks.force_skip_wal to insist")
	}
	if c.Sinks.BatchRecords < 0 || c.Sinks.BatchBytes < 0 || c.Sinks.FlushInterval < 0 {
		errs.bad("sinks", "batch_records, batch_bytes and flush_interval must not be negative")
	}
}

// validate checks one sink table's layout; prefix is its block's path (sinks.aggregates.).
func (t SinkTable) validate(errs *fieldErrors, prefix string) {
	if t.SaltBuckets < 1 || t.SaltBuckets > schema.MaxSaltBuckets {
		errs.bad(prefix+"salt_buckets", "%d is outside 1..%d", t.SaltBuckets, schema.MaxSaltBuckets)
	}
	if t.Versions < 1 {
		errs.bad(prefix+"versions", "must be at least 1, got %d", t.Versions)
	}
	if t.TTL < 0 {
		errs.bad(prefix+"ttl", "must not be negative")
	}
	switch t.BloomFilter {
	case "", "NONE", "ROW", "ROWCOL":
	default:
		errs.bad(prefix+"bloom_filter", "%q is not NONE, ROW or ROWCOL", t.BloomFilter)
	}
	if t.Compression != "" && !slices.Contains(schema.Compressions, t.Compression) {
		msg := fmt.Sprintf("%q is not one of %s", t.Compression, strings.Join(schema.Compressions, ", "))
		if near := nearest(strings.ToUpper(t.Compression), schema.Compressions); near != "" {
			msg += " (did you mean " + near + "?)"
		}
		errs.bad(prefix+"compression", "%s", msg)
	}
}

// validateMembership checks the membership mode, that a static member's instance id makes ids
// Kafka takes, and the session timeout against the heartbeat.
func (c *Config) validateMembership(errs *fieldErrors) {
	m := c.Membership
	switch m.Mode {
	case "static", "dynamic":
	default:
		errs.bad("membership.mode", "%q is not static or dynamic", m.Mode)
	}
	if m.Static() {
		switch {
		case c.hostErr != nil:
			errs.bad("membership.instance_id", "required (or set ABACUS_INSTANCE_ID): the host name cannot be the default: %v", c.hostErr)
		case m.InstanceID == "":
			errs.bad("membership.instance_id", "required (or set ABACUS_INSTANCE_ID)")
		default:
			// The member id of every role that joins a group must be an id Kafka takes.
			for _, r := range roles {
				if r.group == nil {
					continue
				}
				if err := membership.ValidID(membership.MemberID(m.InstanceID, r.name)); err != nil {
					errs.bad("membership.instance_id", "%q does not make a valid group.instance.id: %v", m.InstanceID, err)
					break
				}
			}
		}
	}
	if st := time.Duration(m.SessionTimeout); st < 3*heartbeatInterval || st > 30*time.Minute {
		errs.bad("membership.session_timeout", "%v is outside %v..30m", st, 3*heartbeatInterval)
	}
}

// validateOps checks the ops endpoints' address.
func (c *Config) validateOps(errs *fieldErrors) {
	if l := c.Ops.Listen; l != "" && l != "off" {
		if _, _, err := splitHostPort(l); err != nil {
			errs.bad("ops.listen", "%v (or off)", err)
		}
	}
}

// validate checks the query server's TLS, auth and limits; it reads the TLS and auth files, so
// that a missing or broken one is named before anything starts.
func (q *QueryConfig) validate() []error {
	var errs []error
	if q.TLS.CertFile != "" || q.TLS.KeyFile != "" {
		if _, err := httpsec.NewCertReloader(q.TLS.CertFile, q.TLS.KeyFile, "query.tls"); err != nil {
			errs = append(errs, err)
		}
	}
	if ac := q.Auth.AuthConfig(); ac.Enabled() {
		if _, err := httpsec.NewAuthenticator(ac); err != nil {
			errs = append(errs, err)
		}
	}
	if q.ReloadInterval < 0 {
		errs = append(errs, errors.New("query.reload_interval: must not be negative"))
	}
	l := q.Limits
	for name, v := range map[string]int64{
		"read_header_timeout": int64(l.ReadHeaderTimeout), "read_timeout": int64(l.ReadTimeout), "write_timeout": int64(l.WriteTimeout),
		"idle_timeout": int64(l.IdleTimeout), "request_timeout": int64(l.RequestTimeout), "max_header_bytes": int64(l.MaxHeaderBytes),
		"max_body_bytes": l.MaxBodyBytes, "max_entities": int64(l.MaxEntities), "max_range": int64(l.MaxRange),
		"max_windows": int64(l.MaxWindows), "max_entity_list": int64(l.MaxEntityList),
	} {
		if v < 0 {
			errs = append(errs, fmt.Errorf("query.limits.%s: must not be negative (0 means the default)", name))
		}
	}
	if lim := l.Limits(); lim.WriteTimeout <= lim.RequestTimeout {
		errs = append(errs, fmt.Errorf("query.limits.write_timeout: %s is not longer than query.limits.request_timeout %s: answers would be cut off",
			lim.WriteTimeout, lim.RequestTimeout))
	}
	sort.Slice(errs, func(i, j int) bool { return errs[i].Error() < errs[j].Error() })
	return errs
}

// splitHostPort splits a listen address at its last colon and checks the port; the host may be
// empty (every interface) and keeps its brackets.
func splitHostPort(s string) (string, int, error) {
	i := strings.LastIndexByte(s, ':')
	if i < 0 {
		return "", 0, fmt.Errorf("%q is not host:port", s)
	}
	p, err := strconv.Atoi(s[i+1:])
	if err != nil || p < 0 || p > 65535 {
		return "", 0, fmt.Errorf("%q has no valid port", s)
	}
	return s[:i], p, nil
}

// contains reports whether s is in list.
func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
