package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/abacus-stream/abacus/partitioner/franz"
)

// generate produces the program's sample events (Program.DemoGenerator) into the configured
// brokers until it is stopped or -for ends, so that a deployment of the example (docker compose)
// has data on its dashboard without a producer of its own.
func (p Program) generate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("generate", flag.ContinueOnError)
	var c common
	c.register(fs, "listen", "hbase")
	runFor := fs.Duration("for", 0, "stop after this long (default: until SIGINT or SIGTERM)")
	if err := parse(fs, args, stderr); err != nil {
		return err
	}
	if *runFor < 0 {
		return usagef("-for must not be negative")
	}
	if p.DemoGenerator == nil {
		return usagef("this binary has no generator of sample events (Program.DemoGenerator)")
	}
	if parsedOnly(ctx, fs, &c, nil) {
		return nil
	}
	if *runFor > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *runFor)
		defer cancel()
	}
	d, err := p.connect(ctx, &c, stderr, func(*Config) needs { return needs{brokers: true} })
	if err != nil {
		return err
	}
	defer d.shutdown()
	// The generator writes the topics the topology declares (its sources and its tables'):
	// renamed ones would get nothing, and a topic of that name, another environment's, the events.
	if declared, renamed := p.declaredInputs(d.cfg.Topology), append(d.topo.SourceTopics(), d.topo.TableTopics()...); !slices.Equal(declared, renamed) {
		return fmt.Errorf("abacus generate writes the topology's declared source and table topics %v, which this config renames to %v (topics.prefix, topics.names): run it without them", declared, renamed)
	}
	// Keys go to partitions as goka places them, or the processor would see entities split.
	cl, err := kgo.NewClient(d.kgoOpts(kgo.RecordPartitioner(franz.Partitioner()))...)
	if err != nil {
		return err
	}
	defer cl.Close()
	fmt.Fprintf(stdout, "generating sample events into %v until stopped\n", d.cfg.Kafka.Brokers)
	err = p.DemoGenerator(ctx, cl)
	if ctx.Err() != nil && (err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		return nil // stopped, as asked
	}
	return err
}

// declaredInputs are the source and table topics of topology name as the program declares
// them, before any renaming.
func (p Program) declaredInputs(name string) []string {
	topos, _, err := p.topologies()
	if t, ok := topos[name]; err == nil && ok {
		return append(t.SourceTopics(), t.TableTopics()...)
	}
	return nil
}
