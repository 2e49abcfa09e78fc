package processors

import (
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/lovoo/goka"
)

// offsetRetryFor is how long a topic manager's offset or partition lookup is retried while a
// broker outage makes it fail: longer than a leader election takes on a cluster, like the
// producers' retries.
const offsetRetryFor = time.Minute

// retryingTopicManager is goka's topic manager with its lookups retried through a broker outage.
// goka sets up a partition it was assigned by asking for the oldest and newest offsets of the
// partition's changelog, and stops the whole processor when that fails; after a broker is killed,
// the rebalance that follows asked the dead leader and got EOF
// (TestClusterScenarioBrokerKills). sarama's own GetOffset refreshes the metadata once; the
// leader election takes seconds longer.
type retryingTopicManager struct {
	goka.TopicManager
	log    *slog.Logger
	closed atomic.Bool
}

// GetOffset implements goka.TopicManager.
func (m *retryingTopicManager) GetOffset(topic string, partition int32, at int64) (int64, error) {
	var off int64
	err := m.retry("offset of "+topic, func() error {
		var err error
		off, err = m.TopicManager.GetOffset(topic, partition, at)
		return err
	})
	return off, err
}

// Partitions implements goka.TopicManager.
func (m *retryingTopicManager) Partitions(topic string) ([]int32, error) {
	var parts []int32
	err := m.retry("partitions of "+topic, func() error {
		var err error
		parts, err = m.TopicManager.Partitions(topic)
		return err
	})
	return parts, err
}

// Close implements goka.TopicManager; a lookup being retried gives up.
func (m *retryingTopicManager) Close() error {
	m.closed.Store(true)
	return m.TopicManager.Close()
}

// retry calls f until it succeeds, fails for good, offsetRetryFor passes or the manager closes.
func (m *retryingTopicManager) retry(what string, f func() error) error {
	deadline := time.Now().Add(offsetRetryFor)
	backoff := 100 * time.Millisecond
	for {
		err := f()
		if err == nil || !transientText(err) || time.Now().After(deadline) || m.closed.Load() {
			return err
		}
		m.log.Warn("topic lookup failed; trying again", "lookup", what, "err", err, "retry_in", backoff)
		time.Sleep(backoff)
		backoff = min(2*backoff, 2*time.Second)
	}
}
