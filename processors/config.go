package processors

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/IBM/sarama"
	"github.com/lovoo/goka"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/abacus-stream/abacus/internal/engine"
	"github.com/abacus-stream/abacus/membership"
	"github.com/abacus-stream/abacus/topology"
)

// Config says where and how to run a topology. The zero value plus Brokers is usable; see
// EnsureDefaults and Validate.
type Config struct {
	// Brokers are the Kafka seed brokers.
	Brokers []string
	// Group is the goka group (default: the topology name). Its table is <group>-table, its loop
	// topic <group>-loop.
	Group string
	// StoragePath is the folder of the local LevelDB tables (default $TMPDIR/abacus/<group>).
	StoragePath string
	// Replication is the replication factor of the topics the processor creates (default 1: set
	// it to 3 on a production cluster).
	Replication int
	// IdleTimeout is how long a partition may receive no events before its stream time advances
	// with the wall clock to close its windows (default 1 minute).
	IdleTimeout time.Duration
	// TickInterval is how often every partition is sent a tick (default IdleTimeout/4). It must
	// be shorter than IdleTimeout, or idle partitions would wait for a tick past their timeout.
	TickInterval time.Duration
	// FinalRetention is how long (wall clock) a closed window whose final total Kafka
	// acknowledged waits for its entity's next write to drop it, before a close message is sent
	// to drop it (default 1 minute). A window is never dropped before its final is acknowledged,
	// so this only trades loop messages (one per quiet entity) against state held.
	FinalRetention time.Duration
	// LoopRetention is the retention of the loop topic, which carries re-keyed events and close
	// messages: it must exceed any outage (default 7 days).
	LoopRetention time.Duration
	// InstanceID, when set, makes this instance a static member of the group (Kafka's
	// group.instance.id, KIP-345): restarted with the same id, it takes its partitions back at once,
	// without a rebalance of the other instances and without waiting for its old session to time
	// out. A clean stop leaves the group explicitly, so its partitions move to the others at once.
	// Two live instances must never share an id: the broker fences the older one, whose Run then
	// fails with an error for which IsFenced is true. Empty (the default): a dynamic member.
	InstanceID string
	// SessionTimeout is how long the group waits for a member that stopped heartbeating before it
	// gives its partitions to the others (default sarama's 10 s). With InstanceID it is also how
	// long a crashed instance may take to come back and find its partitions waiting for it.
	SessionTimeout time.Duration
	// HeartbeatInterval is how often the member heartbeats; a rebalance reaches it with the next
	// heartbeat (default sarama's 3 s; below SessionTimeout).
	HeartbeatInterval time.Duration
	// KafkaVersion is the protocol version sarama speaks (default V2_8_0_0).
	KafkaVersion sarama.KafkaVersion
	// Registerer receives the processor's metrics (default: a private registry, so nothing is
	// exported; pass the registry you serve).
	Registerer prometheus.Registerer
	// Logger receives the processor's and goka's logs (default slog.Default()).
	Logger *slog.Logger
	// Now is the wall clock, used only for the future-skew check, idle timeout and early firings
	// (default time.Now). Event time never comes from it.
	Now func() time.Time
	// Sarama, if set, adjusts every sarama config the processor builds (timeouts, TLS, SASL). It
	// runs after abacus's settings, so it can override them; keep Offsets.Initial at OffsetOldest.
	Sarama func(*sarama.Config)
	// GokaOptions are appended to the processor options (e.g. a storage builder).
	GokaOptions []goka.ProcessorOption
	// KafkaClient are franz-go options for the clients the processor runs beside goka's: the
	// readers of the topology's tables (topology.NewTable). The seed brokers are Brokers; add
	// TLS or SASL here as Sarama adds them to goka's clients.
	KafkaClient []kgo.Opt
}

// The defaults of Config that others share (app's config file fills its own from them).
const (
	DefaultIdleTimeout = engine.DefaultIdleTimeout
	// DefaultReplication is 1, for a single broker: a cluster wants 3 (README, scaling out).
	DefaultReplication = 1
)

// EnsureDefaults fills in the zero fields.
func (c *Config) EnsureDefaults(topo *topology.Topology) {
	if c.Group == "" {
		c.Group = topo.Name()
	}
	if c.StoragePath == "" {
		c.StoragePath = filepath.Join(os.TempDir(), "abacus", c.Group)
	}
	if c.Replication == 0 {
		c.Replication = DefaultReplication
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = engine.DefaultIdleTimeout
	}
	if c.TickInterval == 0 {
		c.TickInterval = engine.DefaultTickInterval(c.IdleTimeout)
	}
	if c.FinalRetention == 0 {
		c.FinalRetention = engine.DefaultFinalRetention
	}
	if c.LoopRetention == 0 {
		c.LoopRetention = 7 * 24 * time.Hour
	}
	if c.KafkaVersion == (sarama.KafkaVersion{}) {
		c.KafkaVersion = sarama.V2_8_0_0
	}
	if c.Registerer == nil {
		c.Registerer = prometheus.NewRegistry()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// Validate rejects settings that cannot work together, each error naming its field. Call it after
// EnsureDefaults (New does both).
func (c *Config) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("processors: Config.%s: %s", field, fmt.Sprintf(format, args...)))
	}
	if len(c.Brokers) == 0 {
		bad("Brokers", "empty")
	}
	if c.Replication < 1 || c.Replication > 32767 {
		bad("Replication", "%d is outside 1..32767", c.Replication)
	}
	if c.IdleTimeout <= 0 {
		bad("IdleTimeout", "must be positive, got %v", c.IdleTimeout)
	}
	if c.TickInterval <= 0 {
		bad("TickInterval", "must be positive, got %v", c.TickInterval)
	} else if c.TickInterval >= c.IdleTimeout {
		bad("TickInterval", "%v is not shorter than IdleTimeout %v: idle partitions would wait past their timeout", c.TickInterval, c.IdleTimeout)
	}
	if c.FinalRetention < 0 {
		bad("FinalRetention", "must not be negative, got %v", c.FinalRetention)
	}
	membership.CheckSettings(c.InstanceID, c.SessionTimeout, c.HeartbeatInterval, bad)
	if c.LoopRetention < time.Hour {
		bad("LoopRetention", "%v is under an hour: re-keyed events and close messages would expire during an outage", c.LoopRetention)
	}
	return errors.Join(errs...)
}

// producerRetries and producerBackoff let a producer's retries outlast a leader election: 100,
// 200, 400, 800 ms, then a second each, about a minute in all.
const producerRetries = 60

func producerBackoff(retries, _ int) time.Duration {
	if retries >= 4 {
		return time.Second
	}
	return 100 * time.Millisecond << retries
}

// saramaConfig returns a fresh sarama config for one client: goka's defaults, our protocol
// version, the oldest offset for new groups (nothing produced before the group first joined is
// skipped: DESIGN invariant 9) and acknowledgement by every in-sync replica, then the user's hook.
func (c *Config) saramaConfig(clientID string) *sarama.Config {
	sc := goka.DefaultConfig()
	sc.Version = c.KafkaVersion
	sc.Consumer.Offsets.Initial = sarama.OffsetOldest
	sc.Producer.RequiredAcks = sarama.WaitForAll
	// A killed broker's partitions have no leader until the controller fences it
	// (broker.session.timeout.ms, 9 s by default). goka's 10 retries 100 ms apart are spent in
	// about a second; then the producer fails the messages and goka stops the processor
	// (TestClusterScenarioBrokerKills found it). These last about a minute.
	sc.Producer.Retry.Max = producerRetries
	sc.Producer.Retry.BackoffFunc = producerBackoff
	if clientID != "" {
		sc.ClientID = clientID
	}
	if c.Sarama != nil {
		c.Sarama(sc)
	}
	return sc
}
