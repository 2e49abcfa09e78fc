package app

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/abacus-stream/abacus/sinks"
	"github.com/twmb/franz-go/pkg/kadm"
)

// offsets shows a sink group's offsets and lag, follows the lag of a replay, or rewinds the group.
func offsetsUsage() string {
	s := strings.Join(sinkNames(), "|")
	return `Usage:
  abacus offsets show   -config FILE -sink ` + s + `    committed offset and lag per partition
  abacus offsets lag    -config FILE -sink ` + s + ` [-follow]   total lag (of a replay)
  abacus offsets rewind -config FILE -sink ` + s + ` -to-offset N | -to-time T

Offsets are read from where the sinks keep them (sinks.offsets: kafka or hbase). Stop the sink's
members before a rewind; on their next start they rewrite from there (identical cells).
`
}

// sinkNames is the sinks' names (-sink), in the roles table's order.
func sinkNames() []string {
	var out []string
	for _, r := range sinkRoles() {
		out = append(out, r.sink)
	}
	return out
}

// sinkNamed is the role of the sink called name (-sink), or nil.
func sinkNamed(name string) *role {
	for _, r := range sinkRoles() {
		if r.sink == name {
			return r
		}
	}
	return nil
}

func (p Program) offsets(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || isHelp(args[0]) {
		return groupHelp(args, stdout, offsetsUsage())
	}
	if !contains([]string{"show", "lag", "rewind"}, args[0]) {
		return usagef("unknown subcommand %q\n%s", args[0], offsetsUsage())
	}
	verb := args[0]
	fs := flag.NewFlagSet("offsets "+verb, flag.ContinueOnError)
	var c common
	c.register(fs, "listen")
	sink := fs.String("sink", "", strings.Join(sinkNames(), " or ")+" (required)")
	follow := fs.Bool("follow", false, "lag: print the lag every second until it reaches zero (progress of a replay)")
	toOffset := fs.Int64("to-offset", -1, "rewind: offset to rewind every partition to")
	toTime := fs.String("to-time", "", "rewind: time to rewind to (RFC 3339, ms, or relative like -2h)")
	if err := parse(fs, args[1:], stderr); err != nil {
		return err
	}
	sr := sinkNamed(*sink)
	if sr == nil {
		return usagef("-sink must be %s, got %q", strings.Join(sinkNames(), " or "), *sink)
	}
	if verb == "rewind" && (*toOffset < 0) == (*toTime == "") {
		return usagef("rewind needs exactly one of -to-offset and -to-time")
	}
	var at time.Time
	if *toTime != "" {
		var err error
		if at, err = parseTime(*toTime); err != nil {
			return usagef("-to-time: %v", err)
		}
	}
	if parsedOnly(ctx, fs, &c, nil) {
		return nil
	}
	// Offsets kept in Kafka need no HBase connection.
	d, err := p.connect(ctx, &c, stderr, offsetsNeeds)
	if err != nil {
		return err
	}
	defer d.shutdown()
	cfg, topo := d.cfg, d.topo
	group, topics := sr.groupIn(cfg), sr.inputs(cfg, topo)
	adm := sr.offsets(d, kadm.NewClient(d.kafka))
	switch verb {
	case "rewind":
		if *toTime != "" {
			err = adm.RewindToTime(ctx, group, topics, at)
		} else {
			err = adm.RewindTo(ctx, group, topics, *toOffset)
		}
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "group %s rewound; its sink rewrites from there on its next start\n", group)
		fallthrough
	case "show":
		lags, err := adm.Show(ctx, group, topics...)
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "topic\tpartition\tcommitted\tend\tlag\t")
		for _, l := range lags {
			committed := "-"
			if l.Committed >= 0 {
				committed = fmt.Sprint(l.Committed)
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%d\t\n", l.Topic, l.Partition, committed, l.End, l.Lag)
		}
		return tw.Flush()
	default: // lag
		for {
			lags, err := adm.Show(ctx, group, topics...)
			if err != nil {
				return err
			}
			var total int64
			for _, l := range lags {
				total += l.Lag
			}
			fmt.Fprintf(stdout, "%s group %s lag %d\n", time.Now().Format(time.TimeOnly), group, total)
			if !*follow || total == 0 {
				return nil
			}
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(time.Second):
			}
		}
	}
}

// offsetsNeeds is what the commands that read or move the sinks' offsets connect to: Kafka, and
// HBase when the offsets are kept there.
func offsetsNeeds(cfg *Config) needs { return needs{kafka: true, store: cfg.Sinks.Offsets == "hbase"} }

// sinkOffsetsAdmin reads and moves the sinks' committed offsets wherever the config keeps them.
func (d *deployment) sinkOffsetsAdmin(adm *kadm.Client) sinks.OffsetsAdmin {
	a := sinks.OffsetsAdmin{Kafka: adm}
	if d.cfg.Sinks.Offsets == "hbase" {
		a.HBase = sinks.NewHBaseOffsets(d.hb, d.cfg.Sinks.OffsetsTable)
	}
	return a
}
