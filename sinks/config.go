package sinks

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/abacus-stream/abacus/membership"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Config configures a FlushThenCommit sink. Zero fields take the defaults of EnsureDefaults.
type Config struct {
	// Brokers are the Kafka seed brokers.
	Brokers []string
	// Group is the consumer group; offsets are committed under it.
	Group string
	// Topics are consumed in full by the group.
	Topics []string
	// DeadLetterTopic receives every record that cannot be written, with its reason in headers.
	// Required: a sink never drops a record silently.
	DeadLetterTopic string

	// MaxBatchRecords, MaxBatchBytes and FlushInterval bound a batch: it is written when it passes
	// any of them (defaults 10,000 records, 4 MiB of cells, 1 s).
	MaxBatchRecords int
	MaxBatchBytes   int
	FlushInterval   time.Duration

	// MaxWritesInFlight bounds the batches being written at once (default 2). Batches that share a
	// cell are never written at once, and offsets are committed in the order batches were taken,
	// so a later batch landing first commits nothing until the earlier ones have landed too.
	MaxWritesInFlight int

	// RetryBackoff is the first wait after a failed write; it doubles up to MaxRetryBackoff
	// (defaults 100 ms and 5 s) while the whole write keeps failing. Cells the store refused for a
	// retriable cause, after its own retries, are sent again after RetryBackoff each time. A batch
	// is retried until it lands; meanwhile the sink takes no more records once its next batch is
	// full.
	RetryBackoff    time.Duration
	MaxRetryBackoff time.Duration

	// RevokeTimeout bounds the final write and commit when partitions are taken away (default 20 s,
	// below the group's rebalance timeout). If it passes, nothing is committed and the next owner
	// replays, which rewrites identical cells.
	RevokeTimeout time.Duration

	// TTL is the table's time to live (0: none). HBase judges it by cell timestamp, which is the
	// event time or window end, so cells of a backfill older than TTL expire on arrival: the sink
	// counts them and warns, at most once a minute.
	TTL time.Duration

	// StartAtNewest starts a group that has no committed offsets at the end of its topics instead
	// of the beginning. Off by default: nothing produced before a group first joined is skipped.
	StartAtNewest bool

	// Offsets stores committed offsets; nil means Kafka group commits.
	Offsets OffsetStore

	// Logger receives the sink's logs; slog.Default() when nil.
	Logger *slog.Logger
	// Metrics, when set, records the sink's metrics (see NewMetrics).
	Metrics *Metrics

	// InstanceID, when set, makes the sink a static member of its group (Kafka's
	// group.instance.id, KIP-345): restarted with the same id, it takes its partitions back at once,
	// without a rebalance of the other members and without waiting for its old session to time out.
	// A clean stop leaves the group explicitly, so its partitions move to the others at once. Two
	// live members must never share an id: the broker fences the older one, whose Run then fails
	// with an error for which IsFenced is true. Empty (the default): a dynamic member.
	InstanceID string
	// SessionTimeout is how long the group waits for a member that stopped heartbeating before it
	// gives its partitions to the others (default franz-go's 45 s). With InstanceID it is also how
	// long a crashed member may take to come back and find its partitions waiting for it.
	SessionTimeout time.Duration
	// HeartbeatInterval is how often the member heartbeats; a rebalance reaches it with the next
	// heartbeat (default franz-go's 3 s; below SessionTimeout).
	HeartbeatInterval time.Duration

	// ClientOptions are appended to the Kafka client's options (TLS, SASL, tests' tuning).
	ClientOptions []kgo.Opt
}

// EnsureDefaults fills unset fields with their defaults.
func (c *Config) EnsureDefaults() {
	if c.MaxBatchRecords <= 0 {
		c.MaxBatchRecords = 10_000
	}
	if c.MaxBatchBytes <= 0 {
		c.MaxBatchBytes = 4 << 20
	}
	if c.FlushInterval <= 0 {
		c.FlushInterval = time.Second
	}
	if c.MaxWritesInFlight <= 0 {
		c.MaxWritesInFlight = 2
	}
	if c.RetryBackoff <= 0 {
		c.RetryBackoff = 100 * time.Millisecond
	}
	if c.MaxRetryBackoff <= 0 {
		c.MaxRetryBackoff = 5 * time.Second
	}
	if c.RevokeTimeout <= 0 {
		c.RevokeTimeout = 20 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate rejects a configuration that cannot work, each error naming its field. Call it after
// EnsureDefaults (NewFlushThenCommit does both).
func (c *Config) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("sinks: Config.%s: %s", field, fmt.Sprintf(format, args...)))
	}
	if len(c.Brokers) == 0 {
		bad("Brokers", "empty")
	}
	if c.Group == "" {
		bad("Group", "empty")
	}
	if len(c.Topics) == 0 {
		bad("Topics", "empty")
	}
	if c.DeadLetterTopic == "" {
		bad("DeadLetterTopic", "empty: records that cannot be written must go somewhere")
	}
	for _, t := range c.Topics {
		if t == c.DeadLetterTopic {
			bad("DeadLetterTopic", "%q is also a topic the sink consumes", t)
		}
	}
	if c.RetryBackoff > c.MaxRetryBackoff {
		bad("RetryBackoff", "%v is longer than MaxRetryBackoff %v", c.RetryBackoff, c.MaxRetryBackoff)
	}
	if c.TTL < 0 {
		bad("TTL", "must not be negative")
	}
	membership.CheckSettings(c.InstanceID, c.SessionTimeout, c.HeartbeatInterval, bad)
	return errors.Join(errs...)
}
