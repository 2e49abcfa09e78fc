package main

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
)

// system is one contender: how to start it on an input, and how to read its finals.
type system struct {
	name string
	// guarantee is Kafka Streams' processing.guarantee; empty for the Go systems, which run
	// as this program's child subcommand.
	guarantee string
	finals    bool // writes final window totals, which the step reads back and checks
	decode    func(*kgo.Record) (final, bool, error)
}

// systems, in the order they run.
var systems = []system{
	{name: "franz-consume"},
	{name: "goka-naive"},
	{name: "kstreams-alos", guarantee: "at_least_once", finals: true, decode: decodeStreams},
	{name: "kstreams-eos", guarantee: "exactly_once_v2", finals: true, decode: decodeStreams},
	{name: "abacus", finals: true, decode: decodeAbacus},
}

func systemByName(name string) (system, bool) {
	for _, s := range systems {
		if s.name == name {
			return s, true
		}
	}
	return system{}, false
}

func (s system) java() bool { return s.guarantee != "" }

// launch says where one run of a system reads, writes and keeps its state.
type launch struct {
	group      string // consumer group, Kafka Streams application.id, abacus topology name
	input      string
	output     string
	late       string // abacus's late topic, which the step reads back and checks; "" for none
	rollup     bool   // a rollup workload: per-region and global sets beside the per-entity one
	registry   string // a join workload: the region is looked up in this table topic
	storage    string
	cpuprofile string
}

// command builds the system's process for one run.
func (s system) command(cfg *config, l launch) (*exec.Cmd, error) {
	if s.java() {
		cp, err := os.ReadFile(filepath.Join(cfg.javaDir, "target", "classpath.txt"))
		if err != nil {
			return nil, fmt.Errorf("%s: the Java application is not built (bench/processor/run.sh builds it): %w", s.name, err)
		}
		jar := filepath.Join(cfg.javaDir, "target", "processor-kstreams-bench-1.jar")
		args := append(strings.Fields(cfg.javaOpts), "-cp", jar+":"+strings.TrimSpace(string(cp)),
			"abacus.bench.StreamsAggregate",
			"brokers="+strings.Join(cfg.brokers, ","), "input="+l.input, "output="+l.output,
			"app="+l.group, "state="+l.storage, "guarantee="+s.guarantee, "emit="+cfg.emit)
		if l.rollup {
			args = append(args, "rollup=true", fmt.Sprintf("rollup-grace-ms=%d", cfg.streamsRollupGrace.Milliseconds()), fmt.Sprintf("partitions=%d", partitions))
		}
		if l.registry != "" {
			args = append(args, "registry="+l.registry)
		}
		return exec.Command("java", args...), nil
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	args := []string{"child", "-system", s.name, "-brokers", strings.Join(cfg.brokers, ","),
		"-input", l.input, "-group", l.group, "-output", l.output, "-storage", l.storage}
	if l.late != "" {
		args = append(args, "-late", l.late)
	}
	if l.cpuprofile != "" {
		args = append(args, "-cpuprofile", l.cpuprofile)
	}
	if l.rollup && s.name == "abacus" {
		args = append(args, "-rollup")
	}
	if l.registry != "" && s.name == "abacus" {
		args = append(args, "-registry", l.registry)
	}
	if cfg.finalRetention > 0 {
		args = append(args, "-final-retention", cfg.finalRetention.String())
	}
	return exec.Command(self, args...), nil
}

// decodeStreams reads one final of the Kafka Streams application: key = entity, region or
// globalKey (which says the set: the three never collide), value = window start, count, sum, max
// (32 bytes, big endian). It writes finals only.
func decodeStreams(rec *kgo.Record) (final, bool, error) {
	if len(rec.Value) != 32 {
		return final{}, false, fmt.Errorf("value of %d bytes, want 32", len(rec.Value))
	}
	v := rec.Value
	key := string(rec.Key)
	set := setName
	if key == globalKey {
		set = globalSet
	} else if strings.HasPrefix(key, regionPrefix) {
		set = regionSet
	}
	return final{
		set:    set,
		entity: key,
		start:  int64(binary.BigEndian.Uint64(v[0:])),
		agg: winAgg{
			count: int64(binary.BigEndian.Uint64(v[8:])),
			sum:   math.Float64frombits(binary.BigEndian.Uint64(v[16:])),
			max:   math.Float64frombits(binary.BigEndian.Uint64(v[24:])),
		},
	}, true, nil
}
