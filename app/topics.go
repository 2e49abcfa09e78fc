package app

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/abacus-stream/abacus/processors"
)

// topicSpecs lists the deployment's topics (processors.TopicSpecs), with the partition count of the
// existing sources, or newPartitions when none exists yet.
func (d *deployment) topicSpecs(ctx context.Context, newPartitions int32) ([]processors.TopicSpec, error) {
	adm := kadm.NewClient(d.kafka)
	srcs := d.topo.SourceTopics()
	details, err := adm.ListTopics(ctx, srcs...)
	if err != nil {
		return nil, fmt.Errorf("list source topics %v: %w", srcs, err)
	}
	var parts int32
	var from string
	for _, s := range srcs {
		td, ok := details[s]
		if !ok || td.Err != nil {
			continue
		}
		n := int32(len(td.Partitions))
		if parts != 0 && n != parts {
			return nil, fmt.Errorf("source topics %s (%d partitions) and %s (%d) differ: a processor group's sources must have one partition count", from, parts, s, n)
		}
		parts, from = n, s
	}
	if parts == 0 {
		parts = newPartitions
	}
	return processors.TopicSpecs(d.topo, d.processorConfig(nil), parts), nil
}

// ensureTopics creates the topics among specs that do not exist, with their partitions,
// replication and settings. Topics of the roles in mustExist are not created: a missing one is an
// error that says how to create it.
func (d *deployment) ensureTopics(ctx context.Context, specs []processors.TopicSpec, mustExist ...processors.TopicRole) error {
	adm := kadm.NewClient(d.kafka)
	for _, t := range specs {
		exists, err := topicExists(ctx, adm, t.Name)
		if err != nil {
			return err
		}
		if exists {
			continue
		}
		for _, r := range mustExist {
			if t.Role == r {
				return fmt.Errorf("%s topic %s does not exist: create the deployment's topics with `abacus admin create -config FILE -partitions N`", t.Role, t.Name)
			}
		}
		conf := map[string]*string{}
		for k, v := range t.Config {
			conf[k] = &v
		}
		if _, err := adm.CreateTopic(ctx, t.Partitions, t.Replication, conf, t.Name); err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			return fmt.Errorf("create %s topic %s: %w", t.Role, t.Name, err)
		}
		if err := waitForTopic(ctx, adm, t.Name); err != nil {
			return err
		}
	}
	return nil
}

// waitForTopic waits until a created topic appears in the brokers' metadata: creation is
// acknowledged by the controller before every broker knows the topic.
func waitForTopic(ctx context.Context, adm *kadm.Client, topic string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		ok, err := topicExists(ctx, adm, topic)
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("topic %s was created but does not appear in the metadata (%v): %w", topic, err, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func topicExists(ctx context.Context, adm *kadm.Client, topic string) (bool, error) {
	td, err := adm.ListTopics(ctx, topic)
	if err != nil {
		return false, fmt.Errorf("list topic %s: %w", topic, err)
	}
	t, ok := td[topic]
	return ok && t.Err == nil, nil
}

// verifyTopic checks that a topic exists as the spec says: its partition count, replication and
// the settings abacus needs.
func verifyTopic(ctx context.Context, adm *kadm.Client, t processors.TopicSpec) error {
	td, err := adm.ListTopics(ctx, t.Name)
	if err != nil {
		return fmt.Errorf("list topic %s: %w", t.Name, err)
	}
	got, ok := td[t.Name]
	if !ok || got.Err != nil {
		return fmt.Errorf("%s topic %s does not exist (abacus admin create makes it)", t.Role, t.Name)
	}
	var errs []error
	if n := int32(len(got.Partitions)); n != t.Partitions {
		errs = append(errs, fmt.Errorf("%s topic %s has %d partitions, the sources have %d", t.Role, t.Name, n, t.Partitions))
	}
	for _, p := range got.Partitions {
		if len(p.Replicas) < int(t.Replication) {
			errs = append(errs, fmt.Errorf("%s topic %s has %d replicas, processor.replication is %d", t.Role, t.Name, len(p.Replicas), t.Replication))
			break
		}
	}
	if len(t.Config) > 0 {
		rcs, err := adm.DescribeTopicConfigs(ctx, t.Name)
		if err != nil {
			return fmt.Errorf("describe topic %s: %w", t.Name, err)
		}
		rc, err := rcs.On(t.Name, nil)
		if err != nil {
			return fmt.Errorf("describe topic %s: %w", t.Name, err)
		}
		if want := t.Config["cleanup.policy"]; want != "" {
			for _, c := range rc.Configs {
				if c.Key == "cleanup.policy" && c.Value != nil && !strings.Contains(*c.Value, want) {
					errs = append(errs, fmt.Errorf("%s topic %s has cleanup.policy=%s, want %s", t.Role, t.Name, *c.Value, want))
				}
			}
		}
	}
	return errors.Join(errs...)
}
