package processors

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/IBM/sarama"
	"github.com/lovoo/goka"

	"github.com/abacus-stream/abacus/internal/plan"
	"github.com/abacus-stream/abacus/topology"
)

// TopicRole says what a topic of a deployment is for.
type TopicRole string

// The roles of a deployment's topics.
const (
	RoleSource     TopicRole = "source"      // events the processor and the facts sink read
	RoleTotals     TopicRole = "totals"      // window totals the aggregates sink reads
	RoleDeadLetter TopicRole = "dead-letter" // records that cannot be processed, with their reasons
	RoleLate       TopicRole = "late"        // events that came after their window closed
	RoleLoop       TopicRole = "loop"        // re-keyed events and close messages (goka's loop)
	RoleTable      TopicRole = "table"       // the group table's changelog (compacted)
	RoleLookup     TopicRole = "lookup"      // a table's topic, read whole by every instance (topology.NewTable)
	RoleVersions   TopicRole = "versions"    // the versions the group read of a table (compacted)
)

// TopicSpec is one topic a deployment of a topology needs.
type TopicSpec struct {
	Name        string
	Role        TopicRole
	Partitions  int32
	Replication int16
	// Config are the topic settings abacus needs (cleanup policy, retention); others are the
	// broker's defaults.
	Config map[string]string
}

// TopicSpecs lists every topic that running topo with cfg needs, as it must be created: the
// sources, then the totals, dead-letter and late topics, the group's loop topic and its table's
// changelog, then each table's topic and the group's versions topic of it, all with the given partition count (goka copartitions a group's inputs, loop and
// table) and cfg's replication. The processor creates the ones missing when it starts, `abacus
// admin create` creates them all, `abacus admin verify` checks them. (topology.Topology.Topics
// names only the topics the topology itself declares.)
func TopicSpecs(topo *topology.Topology, cfg Config, partitions int32) []TopicSpec {
	cfg.EnsureDefaults(topo)
	p := plan.Of(topo)
	rf := int16(cfg.Replication)
	spec := func(name string, role TopicRole, conf map[string]string) TopicSpec {
		return TopicSpec{Name: name, Role: role, Partitions: partitions, Replication: rf, Config: conf}
	}
	deleteOld := map[string]string{"cleanup.policy": "delete"}
	var out []TopicSpec
	for _, s := range p.Sources {
		out = append(out, spec(s.Topic, RoleSource, nil))
	}
	out = append(out, spec(p.TotalsTopic, RoleTotals, deleteOld), spec(p.DeadLetter, RoleDeadLetter, deleteOld))
	if p.LateTopic != "" {
		out = append(out, spec(p.LateTopic, RoleLate, deleteOld))
	}
	group := goka.Group(cfg.Group)
	out = append(out,
		// goka names the loop topic <group>-loop and exports no function for it.
		spec(plan.LoopTopic(cfg.Group), RoleLoop, map[string]string{
			"cleanup.policy": "delete", "retention.ms": strconv.FormatInt(cfg.LoopRetention.Milliseconds(), 10)}),
		spec(string(goka.GroupTable(group)), RoleTable, map[string]string{"cleanup.policy": "compact"}))
	for _, t := range p.Tables {
		out = append(out, spec(t.Topic, RoleLookup, map[string]string{"cleanup.policy": "compact"}),
			spec(plan.VersionsTopic(cfg.Group, t.Name), RoleVersions, map[string]string{"cleanup.policy": "compact"}))
	}
	return out
}

// missingSourceError says that a source topic is not in the cluster's metadata.
type missingSourceError struct{ group, topic string }

func (e *missingSourceError) Error() string {
	return fmt.Sprintf("processor %s: source topic %s does not exist: create it (abacus admin create) before starting the processor",
		e.group, e.topic)
}

// sourceGrace is how long a processor waits for a missing source topic to appear: a topic just
// created reaches every broker's metadata a moment later, so a processor started right after
// `abacus admin create` (or a test's CreateTopic) may ask a broker that does not know it yet.
const sourceGrace = 15 * time.Second

// ensureTopicsRetrying is ensureTopics, tried again while it fails for a broker outage, for as
// long as the outage lasts: a processor (re)started while a broker of the cluster is down must
// wait for the leader elections rather than fail (TestClusterScenarioBrokerKills restarts one
// then), and one started before its brokers (an orchestrator starts everything at once) must wait
// for them, as the sinks do; and for sourceGrace while a source topic is missing. A stop asked for
// meanwhile returns 0 and no error.
func (p *Processor) ensureTopicsRetrying(ctx context.Context) (int, error) {
	start := time.Now()
	backoff := 250 * time.Millisecond
	for {
		n, err := p.ensureTopics()
		var missing *missingSourceError
		switch {
		case err == nil:
			return n, nil
		case errors.As(err, &missing):
			if time.Since(start) > sourceGrace {
				return n, err
			}
		case !transientText(err):
			return n, err
		}
		p.log.Warn("checking the group's topics failed; trying again", "err", err, "retry_in", backoff)
		select {
		case <-ctx.Done():
			return 0, nil
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// ensureTopics checks that the sources exist with one partition count, creates the group's other
// topics that are missing (Topics), and returns the partition count.
func (p *Processor) ensureTopics() (int, error) {
	tm, err := p.topicManagerBuilder()(p.cfg.Brokers)
	if err != nil {
		return 0, fmt.Errorf("processor %s: topic manager: %w", p.group, err)
	}
	defer tm.Close()
	npar := 0
	for _, s := range p.plan.Sources {
		parts, err := tm.Partitions(s.Topic)
		if err != nil {
			// goka's error for a topic missing from the metadata keeps only its message.
			if strings.Contains(err.Error(), "requested topic was not found") {
				return 0, &missingSourceError{group: string(p.group), topic: s.Topic}
			}
			return 0, fmt.Errorf("processor %s: partitions of source %s: %w", p.group, s.Topic, err)
		}
		if npar != 0 && len(parts) != npar {
			return 0, fmt.Errorf("processor %s: source %s has %d partitions, %s has %d: a group's sources must have the same partition count",
				p.group, s.Topic, len(parts), p.plan.Sources[0].Topic, npar)
		}
		npar = len(parts)
	}
	for _, t := range TopicSpecs(p.topo, p.cfg, int32(npar)) {
		if t.Role == RoleSource || t.Role == RoleLookup {
			continue // the user's topics: the tables' readers say so if one is missing
		}
		err := tm.EnsureTopicExists(t.Name, int(t.Partitions), int(t.Replication), t.Config)
		// Instances of a group that start together race to create its topics; the losers are
		// told the topic exists, and check it again (goka's error keeps only the message).
		// TestInstancesJoinAndDieMidStream starts three at once.
		for try := 0; err != nil && strings.Contains(err.Error(), sarama.ErrTopicAlreadyExists.Error()) && try < 10; try++ {
			time.Sleep(100 * time.Millisecond << min(try, 4))
			err = tm.EnsureTopicExists(t.Name, int(t.Partitions), int(t.Replication), t.Config)
		}
		if err != nil {
			return 0, fmt.Errorf("processor %s: create %s topic %s: %w", p.group, t.Role, t.Name, err)
		}
	}
	p.eng.SetPartitions(npar)
	return npar, nil
}
