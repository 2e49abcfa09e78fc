package testenv

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/abacus-stream/abacus/internal/testenv/gate"
)

// Environment of the three-broker cluster that `KAFKA_BROKERS=3 testenv/services.sh start` runs;
// its `env` prints the first two, and testenv/run-tests.sh sets the third in its cluster stage.
const (
	EnvKafkaCluster    = "ABACUS_KAFKA_CLUSTER_BROKERS" // node i (node.id i) at position i
	EnvKafkaClusterDir = "ABACUS_KAFKA_CLUSTER_DIR"     // the services.sh data folder that holds it
	// EnvRequireCluster makes a missing cluster fail TestCluster* tests instead of skipping them.
	EnvRequireCluster = "ABACUS_REQUIRE_CLUSTER"
)

const clusterHint = "start one with `KAFKA_BROKERS=3 SERVICES=kafka testenv/services.sh start` and " +
	"eval \"$(KAFKA_BROKERS=3 SERVICES=kafka testenv/services.sh env)\" (testenv/run-tests.sh does this in its cluster stage)"

// Cluster is the real multi-broker KRaft cluster of testenv/services.sh: tests find a partition's
// leader, SIGKILL a broker and start it again through it. Broker ids are node ids, 1-based, and
// broker i listens at Brokers[i-1].
type Cluster struct {
	Brokers []string
	dir     string
	cl      *kgo.Client
	adm     *kadm.Client
}

// KafkaCluster returns the running cluster, or skips the test when none is configured (fails it
// when ABACUS_REQUIRE_CLUSTER=1). The ordinary single broker never counts as a cluster: tests that
// need several brokers ask for this one by its own variable.
//
// The test holds the cluster alone until it ends: `go test ./...` runs packages in parallel, and
// two tests killing brokers at once would take two of three down, below min.insync.replicas, and
// each would see the other's outage as its own.
func KafkaCluster(t testing.TB) *Cluster {
	t.Helper()
	fail := t.Skip
	if os.Getenv(EnvRequireCluster) == "1" {
		fail = t.Fatal
	}
	list := os.Getenv(EnvKafkaCluster)
	if list == "" {
		fail(EnvKafkaCluster + " is unset: no multi-broker Kafka cluster; " + clusterHint)
		return nil
	}
	c := &Cluster{Brokers: strings.Split(list, ","), dir: os.Getenv(EnvKafkaClusterDir)}
	if len(c.Brokers) < 3 {
		fail(fmt.Sprintf("%s=%s lists %d brokers; cluster tests need 3", EnvKafkaCluster, list, len(c.Brokers)))
		return nil
	}
	if c.dir == "" {
		fail(EnvKafkaClusterDir + " is unset: tests could not kill and restart brokers; " + clusterHint)
		return nil
	}
	// The lock first: a test of another package holding it may have a broker down right now,
	// and starts it again before it lets go.
	c.lock(t)
	for _, b := range c.Brokers {
		conn, err := net.DialTimeout("tcp", b, 2*time.Second)
		if err != nil {
			fail(fmt.Sprintf("cluster broker %s (%s) not reachable: %v; %s", b, EnvKafkaCluster, err, clusterHint))
			return nil
		}
		conn.Close()
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Brokers...), kgo.MetadataMinAge(100*time.Millisecond),
		kgo.RetryTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	c.cl, c.adm = cl, kadm.NewClient(cl)
	return c
}

// lock takes the cluster's test lock until the test ends.
func (c *Cluster) lock(t testing.TB) {
	t.Helper()
	holdTestLock(t, filepath.Join(c.dir, "kafka-cluster"), "the Kafka cluster", nil)
}

// holdTestLock takes the file lock tests.lock in dir (so it holds across the test processes of
// several packages) until the test ends; before letting go it runs release, if any.
func holdTestLock(t testing.TB, dir, what string, release func()) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(dir, "tests.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatalf("%s: test lock: %v", what, err)
	}
	start := time.Now()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		t.Fatalf("%s: test lock %s: %v", what, f.Name(), err)
	}
	if waited := time.Since(start); waited > time.Second {
		t.Logf("waited %v for %s (another test had it)", waited.Round(time.Millisecond), what)
	}
	t.Cleanup(func() {
		if release != nil {
			release()
		}
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	})
}

// Admin returns an admin client on the cluster (closed when the test ends).
func (c *Cluster) Admin() *kadm.Client { return c.adm }

// Partition returns the leader and the in-sync replicas of a partition, as the cluster's
// metadata says now.
func (c *Cluster) Partition(t testing.TB, topic string, partition int32) (leader int32, isr []int32) {
	t.Helper()
	leader, isr, err := c.partition(topic, partition)
	if err != nil {
		t.Fatal(err)
	}
	return leader, isr
}

// partition is Partition, with an error for a partition the metadata does not list (yet: a topic
// just created reaches each broker's metadata a moment later).
func (c *Cluster) partition(topic string, partition int32) (leader int32, isr []int32, err error) {
	leader, isr, _, err = c.replicas(topic, partition)
	return leader, isr, err
}

// replicas is partition with the replica list, in preference order.
func (c *Cluster) replicas(topic string, partition int32) (leader int32, isr, replicas []int32, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	md, err := c.adm.Metadata(ctx, topic)
	if err != nil {
		return -1, nil, nil, fmt.Errorf("metadata of %s: %w", topic, err)
	}
	p, ok := md.Topics[topic].Partitions[partition]
	if !ok || md.Topics[topic].Err != nil {
		return -1, nil, nil, fmt.Errorf("metadata of %s: no partition %d (%v)", topic, partition, md.Topics[topic].Err)
	}
	if p.Err != nil {
		// LEADER_NOT_AVAILABLE while an election runs: report no leader rather than fail.
		return -1, p.ISR, p.Replicas, nil
	}
	return p.Leader, slices.Sorted(slices.Values(p.ISR)), p.Replicas, nil
}

// MakeLeader makes broker id the leader of a partition, so that a test can kill the leader of
// exactly the partitions it means to: id becomes the first (preferred) replica, with the same
// replica set (no data moves), and a preferred-leader election follows. id must be in the
// partition's ISR. It returns once the metadata shows id leading.
func (c *Cluster) MakeLeader(t testing.TB, topic string, partition, id int32) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for attempt := 0; ; attempt++ {
		leader, isr, replicas, err := c.replicas(topic, partition)
		if err == nil && leader == id {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s/%d: broker %d not leader after a minute (leader %d, ISR %v, replicas %v, %v)", topic, partition, id, leader, isr, replicas, err)
		}
		if attempt > 0 {
			time.Sleep(250 * time.Millisecond)
		}
		if err != nil || !slices.Contains(isr, id) {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		if replicas[0] != id {
			order := append([]int32{id}, slices.DeleteFunc(slices.Clone(replicas), func(r int32) bool { return r == id })...)
			var req kadm.AlterPartitionAssignmentsReq
			req.Assign(topic, partition, order)
			if rs, err := c.adm.AlterPartitionAssignments(ctx, req); err != nil {
				t.Logf("%s/%d: reorder replicas to %v: %v", topic, partition, order, err)
			} else {
				for _, r := range rs.Sorted() {
					if r.Err != nil {
						t.Logf("%s/%d: reorder replicas to %v: %v %s", topic, partition, order, r.Err, r.ErrMessage)
					}
				}
			}
		} else {
			// ELECTION_NOT_NEEDED and "preferred leader not available" while the metadata
			// catches up are answered by trying again.
			_, _ = c.adm.ElectLeaders(ctx, kadm.ElectPreferredReplica, kadm.TopicsSet{topic: {partition: {}}})
		}
		cancel()
	}
}

// Leader returns the broker that leads a partition (-1 while none does).
func (c *Cluster) Leader(t testing.TB, topic string, partition int32) int32 {
	t.Helper()
	l, _ := c.Partition(t, topic, partition)
	return l
}

// MakeCoordinator makes broker id the group coordinator of group: it leads the partition of
// __consumer_offsets the group's commits go to (Kafka picks it by the Java hash code of the group
// id). It returns once the cluster names id as the coordinator.
func (c *Cluster) MakeCoordinator(t testing.TB, group string, id int32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	md, err := c.adm.Metadata(ctx, "__consumer_offsets")
	if err != nil || len(md.Topics["__consumer_offsets"].Partitions) == 0 {
		t.Fatalf("metadata of __consumer_offsets: %v", err)
	}
	// String.hashCode: s[0]*31^(n-1) + ... + s[n-1] in int32 arithmetic, over UTF-16 units (one
	// per rune for the ASCII group ids of tests).
	var h int32
	for _, r := range group {
		h = 31*h + r
	}
	if h == math.MinInt32 {
		h = 0 // Kafka's Utils.abs
	} else if h < 0 {
		h = -h
	}
	part := h % int32(len(md.Topics["__consumer_offsets"].Partitions))
	c.MakeLeader(t, "__consumer_offsets", part, id)
	deadline := time.Now().Add(30 * time.Second)
	for {
		fctx, fcancel := context.WithTimeout(context.Background(), 10*time.Second)
		fc := c.adm.FindGroupCoordinators(fctx, group)[group]
		fcancel()
		if fc.Err == nil && fc.NodeID == id {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("group %s: coordinator %d (%v) after broker %d took __consumer_offsets/%d, want %d", group, fc.NodeID, fc.Err, id, part, id)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// KillBroker SIGKILLs broker id, as a crash would, through `testenv/services.sh kill-broker`; it
// returns once the process is gone. If the test ends with the broker still down (it failed
// before starting it again), the broker is started then, so that the next test finds three.
func (c *Cluster) KillBroker(t testing.TB, id int32) {
	t.Helper()
	c.script(t, "kill-broker", id)
	t.Cleanup(func() {
		if conn, err := net.DialTimeout("tcp", c.Brokers[id-1], 2*time.Second); err == nil {
			conn.Close()
			return
		}
		c.script(t, "start-broker", id)
	})
}

// StartBroker starts broker id again through `testenv/services.sh start-broker` and returns once
// it answers with every broker of the cluster in its metadata. It may still be catching up: see
// WaitInSync.
func (c *Cluster) StartBroker(t testing.TB, id int32) { t.Helper(); c.script(t, "start-broker", id) }

// WaitPartition waits until ok holds for a partition's leader and in-sync replicas, failing the
// test with what after timeout. It returns how long that took.
func (c *Cluster) WaitPartition(t testing.TB, topic string, partition int32, what string, timeout time.Duration,
	ok func(leader int32, isr []int32) bool) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		leader, isr, err := c.partition(topic, partition)
		if err == nil && ok(leader, isr) {
			return time.Since(start)
		}
		if time.Since(start) > timeout {
			t.Fatalf("%s/%d: no %s after %v (leader %d, ISR %v, %v)", topic, partition, what, timeout, leader, isr, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// WaitInSync waits until broker id is in the ISR of every listed partition of topic, failing the
// test after timeout. It returns how long that took.
func (c *Cluster) WaitInSync(t testing.TB, topic string, partitions []int32, id int32, timeout time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for _, p := range partitions {
		c.WaitPartition(t, topic, p, fmt.Sprintf("broker %d in the ISR", id), timeout-time.Since(start),
			func(_ int32, isr []int32) bool { return slices.Contains(isr, id) })
	}
	return time.Since(start)
}

// StartBrokers starts several brokers again at once, as StartBroker does one. Brokers that are
// also the cluster's KRaft controllers must start together when a majority of them is down: each
// answers only once a quorum of controllers runs.
func (c *Cluster) StartBrokers(t testing.TB, ids ...int32) {
	t.Helper()
	errs := make([]error, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		cmd := c.scriptCmd(t, "start-broker", id)
		wg.Go(func() { errs[i] = runLogged(t, cmd) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

// script runs testenv/services.sh VERB ID on this cluster's data folder and ports.
func (c *Cluster) script(t testing.TB, verb string, id int32) {
	t.Helper()
	if err := runLogged(t, c.scriptCmd(t, verb, id)); err != nil {
		t.Fatal(err)
	}
}

// scriptCmd is the command of script.
func (c *Cluster) scriptCmd(t testing.TB, verb string, id int32) *exec.Cmd {
	t.Helper()
	if id < 1 || int(id) > len(c.Brokers) {
		t.Fatalf("%s %d: the cluster has brokers 1..%d", verb, id, len(c.Brokers))
	}
	_, port, err := net.SplitHostPort(c.Brokers[0])
	if err != nil {
		t.Fatalf("%s: %v", EnvKafkaCluster, err)
	}
	cmd := exec.Command(gate.ServicesScript(t), verb, strconv.Itoa(int(id)))
	cmd.Env = append(os.Environ(), "SERVICES=kafka", "ABACUS_TESTENV_DIR="+c.dir,
		"KAFKA_BROKERS="+strconv.Itoa(len(c.Brokers)), "KAFKA_CLUSTER_PORT="+port)
	return cmd
}

// runLogged runs a services.sh command, logs its output and returns an error naming it if it
// fails. It may run outside the test's goroutine.
func runLogged(t testing.TB, cmd *exec.Cmd) error {
	start := time.Now()
	out, err := cmd.CombinedOutput()
	what := strings.Join(cmd.Args[1:], " ")
	if err != nil {
		return fmt.Errorf("testenv/services.sh %s: %w\n%s", what, err, out)
	}
	t.Logf("testenv/services.sh %s (%v): %s", what, time.Since(start).Round(time.Millisecond), strings.TrimSpace(string(out)))
	return nil
}

// TopicConfig returns a topic's setting as the brokers report it, waiting up to 30 s for it to be
// reported: under KRaft, CreateTopics returns once the controller has the topic, and the broker
// that answers DescribeConfigs may not have the topic's settings in its metadata yet (it then
// answers with none, and no error). A busy machine makes that window long enough to see.
func TopicConfig(ctx context.Context, t testing.TB, adm *kadm.Client, topic, key string) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var last error
	for {
		rcs, err := adm.DescribeTopicConfigs(ctx, topic)
		if err == nil {
			var rc kadm.ResourceConfig
			if rc, err = rcs.On(topic, nil); err == nil {
				for _, c := range rc.Configs {
					if c.Key == key && c.Value != nil {
						return *c.Value
					}
				}
				err = fmt.Errorf("no %s reported", key)
			}
		}
		last = err
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("topic %s: setting %s not reported within 30 s: %v", topic, key, last)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
