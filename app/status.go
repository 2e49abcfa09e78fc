package app

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/abacus-stream/abacus/sinks"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

const statusUsage = `Usage:
  abacus status -config FILE [-ops HOST:PORT,...] [-json]

For the processor group and both sink groups: the group's state and members (instance id, host,
partitions), and per partition the committed offset, the end of the topic, the lag and the owner.
The processor's lag is over its source topics and its loop topic. Open windows per partition come
from the processor instances' ops endpoints (-ops, each instance's ops.listen; default: the
config's ops.listen, else 127.0.0.1:9361); a partition none of them reports shows "-".
It warns of records the broker deleted after a group's commit before the group read them (lost to
it), and of unread records older than 80% of their topic's retention.ms (lost soon unless the
group catches up).
`

// groupStatus is one consumer group in the answer of `abacus status`.
type groupStatus struct {
	Role    string         `json:"role"`
	Group   string         `json:"group"`
	State   string         `json:"state"` // the coordinator's: Stable, PreparingRebalance, Empty, ...
	Members []memberStatus `json:"members"`
	// Partitions are the group's topic partitions: source and loop topics for the processor.
	Partitions []partitionStatus `json:"partitions"`
	Lag        int64             `json:"lag"`
	// Deleted sums the partitions' records deleted unread.
	Deleted int64 `json:"deleted_unread,omitempty"`
	// AtRisk sums the partitions' unread records that retention deletes soon.
	AtRisk int64 `json:"at_risk,omitempty"`
	// ByPartition sums the processor's partitions over its input topics, with the open windows of
	// each (processor only).
	ByPartition []processorPartition `json:"by_partition,omitempty"`
	// OpenWindows is the total of the partitions an ops endpoint reported (processor only).
	OpenWindows *int64 `json:"open_windows,omitempty"`

	title        string // the role's, for the tables
	perPartition bool   // print ByPartition (the processor's)
}

type memberStatus struct {
	InstanceID string             `json:"instance_id,omitempty"` // empty: a dynamic member
	MemberID   string             `json:"member_id"`
	Host       string             `json:"host"`
	Assigned   map[string][]int32 `json:"assigned"`
}

type partitionStatus struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Committed int64  `json:"committed"` // -1: nothing committed yet
	Start     int64  `json:"start"`     // the oldest offset the topic still holds
	End       int64  `json:"end"`
	Lag       int64  `json:"lag"`
	// Deleted: records after the commit that the broker deleted unread (lost when the group resumes).
	Deleted int64 `json:"deleted_unread,omitempty"`
	// AtRisk: unread records stamped further back than most of the topic's retention (markAtRisk).
	AtRisk    int64  `json:"at_risk,omitempty"`
	Retention string `json:"retention,omitempty"` // the topic's retention.ms, when AtRisk > 0
	Owner     string `json:"owner,omitempty"`     // instance id (or member id) of the member that owns it
}

type processorPartition struct {
	Partition   int32  `json:"partition"`
	Owner       string `json:"owner,omitempty"`
	Lag         int64  `json:"lag"`
	OpenWindows *int64 `json:"open_windows,omitempty"`
}

// status shows the lag, members and open windows of the deployment's groups.
func (p Program) status(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && isHelp(args[0]) {
		fmt.Fprint(stdout, statusUsage)
		return nil
	}
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	var c common
	c.register(fs, "listen")
	opsAddrs := fs.String("ops", "", "ops endpoints of the processor instances (host:port, comma separated), for open windows")
	asJSON := fs.Bool("json", false, "print JSON instead of tables")
	if err := parse(fs, args, stderr); err != nil {
		return err
	}
	if parsedOnly(ctx, fs, &c, nil) {
		return nil
	}
	d, err := p.connect(ctx, &c, stderr, offsetsNeeds)
	if err != nil {
		return err
	}
	defer d.shutdown()
	cfg, topo := d.cfg, d.topo
	adm := kadm.NewClient(d.kafka)
	var out []groupStatus
	var windowsOf *role // the role whose ops endpoints report open windows
	for _, r := range roles {
		if r.group == nil || !r.enabled(cfg) {
			continue
		}
		gs, err := groupStatusOf(ctx, adm, r.offsets(d, adm), r.name, r.groupIn(cfg), r.inputs(cfg, topo))
		if err != nil {
			return err
		}
		gs.title = r.title
		if err := markAtRisk(ctx, adm, &gs, time.Now()); err != nil {
			fmt.Fprintf(stderr, "abacus status: group %s: cannot tell whether retention threatens its unread records: %v\n", gs.Group, err)
		}
		out = append(out, gs)
		if r.openWindows && windowsOf == nil {
			windowsOf = r
		}
	}
	reached, endpoints := 0, splitList(*opsAddrs)
	if windowsOf != nil {
		explicit := len(endpoints) > 0
		if !explicit {
			addr, _ := opsListen(cfg, []string{windowsOf.name})
			if addr == "" {
				addr = windowsOf.opsListen
			}
			endpoints = []string{addr}
		}
		var windows map[int32]int64
		var errs []error
		windows, reached, errs = scrapeOpenWindows(ctx, endpoints, topo.Name())
		if explicit {
			for _, err := range errs {
				fmt.Fprintf(stderr, "abacus status: %v\n", err)
			}
		}
		for i := range out {
			if out[i].Role == windowsOf.name {
				addWindows(&out[i], windows)
			}
		}
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(map[string]any{"groups": out})
	}
	for i, gs := range out {
		if i > 0 {
			fmt.Fprintln(stdout)
		}
		if err := printGroupStatus(stdout, gs); err != nil {
			return err
		}
	}
	if windowsOf != nil && reached == 0 {
		fmt.Fprintf(stdout, "\nopen windows: no processor ops endpoint answered (%s); pass -ops with each instance's ops.listen\n", strings.Join(endpoints, ", "))
	}
	return nil
}

// groupStatusOf reads a group's members and assignment, and its committed offsets against the
// topics' ends.
func groupStatusOf(ctx context.Context, adm *kadm.Client, offsets sinks.OffsetsAdmin, role, group string, topics []string) (groupStatus, error) {
	gs := groupStatus{Role: role, Group: group, State: "unknown"}
	described, err := adm.DescribeGroups(ctx, group)
	if err != nil {
		return gs, fmt.Errorf("describe group %s: %w", group, err)
	}
	owner := map[string]map[int32]string{}
	if dg, ok := described[group]; ok && dg.Err == nil {
		gs.State = dg.State
		for _, m := range dg.Members {
			ms := memberStatus{MemberID: m.MemberID, Host: strings.TrimPrefix(m.ClientHost, "/"), Assigned: map[string][]int32{}}
			name := m.MemberID
			if m.InstanceID != nil {
				ms.InstanceID, name = *m.InstanceID, *m.InstanceID
			}
			if a, ok := m.Assigned.AsConsumer(); ok {
				for _, t := range a.Topics {
					ps := append([]int32(nil), t.Partitions...)
					sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
					ms.Assigned[t.Topic] = ps
					for _, p := range ps {
						if owner[t.Topic] == nil {
							owner[t.Topic] = map[int32]string{}
						}
						owner[t.Topic][p] = name
					}
				}
			}
			gs.Members = append(gs.Members, ms)
		}
	} else if ok && errors.Is(dg.Err, kerr.GroupIDNotFound) {
		gs.State = "none" // no member has joined it yet (Kafka 4's coordinator says so)
	} else if ok {
		return gs, fmt.Errorf("describe group %s: %w", group, dg.Err)
	}
	lags, err := offsets.Show(ctx, group, topics...)
	if err != nil {
		return gs, err
	}
	for _, l := range lags {
		gs.Partitions = append(gs.Partitions, partitionStatus{Topic: l.Topic, Partition: l.Partition, Committed: l.Committed,
			Start: l.Start, End: l.End, Lag: l.Lag, Deleted: l.Deleted, Owner: owner[l.Topic][l.Partition]})
		gs.Lag += l.Lag
		gs.Deleted += l.Deleted
	}
	return gs, nil
}

// addWindows sums the processor's lag per partition over its inputs and adds the open windows the
// ops endpoints reported.
func addWindows(gs *groupStatus, windows map[int32]int64) {
	gs.perPartition = true
	byPart := map[int32]*processorPartition{}
	var parts []int32
	for _, p := range gs.Partitions {
		pp := byPart[p.Partition]
		if pp == nil {
			pp = &processorPartition{Partition: p.Partition}
			byPart[p.Partition] = pp
			parts = append(parts, p.Partition)
		}
		pp.Lag += p.Lag
		if pp.Owner == "" {
			pp.Owner = p.Owner
		}
	}
	sort.Slice(parts, func(i, j int) bool { return parts[i] < parts[j] })
	var total int64
	seen := false
	for _, p := range parts {
		pp := byPart[p]
		if w, ok := windows[p]; ok {
			pp.OpenWindows = &w
			total += w
			seen = true
		}
		gs.ByPartition = append(gs.ByPartition, *pp)
	}
	if seen {
		gs.OpenWindows = &total
	}
}

// scrapeOpenWindows reads abacus_processor_windows_open of the topology from each ops endpoint:
// only the owner of a partition reports it, so the endpoints' answers add up.
func scrapeOpenWindows(ctx context.Context, endpoints []string, topology string) (map[int32]int64, int, []error) {
	out := map[int32]int64{}
	reached := 0
	var errs []error
	cl := &http.Client{Timeout: 3 * time.Second}
	for _, e := range endpoints {
		url := e
		if !strings.Contains(url, "://") {
			url = "http://" + url
		}
		if !strings.HasSuffix(url, "/metrics") {
			url = strings.TrimSuffix(url, "/") + "/metrics"
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			errs = append(errs, fmt.Errorf("-ops %s: %w", e, err))
			continue
		}
		resp, err := cl.Do(req)
		if err != nil {
			errs = append(errs, fmt.Errorf("-ops %s: %w", e, err))
			continue
		}
		parser := expfmt.NewTextParser(model.UTF8Validation)
		families, err := parser.TextToMetricFamilies(io.LimitReader(resp.Body, 64<<20))
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			errs = append(errs, fmt.Errorf("-ops %s: %s", e, resp.Status))
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("-ops %s: metrics: %w", e, err))
			continue
		}
		reached++
		mf := families["abacus_processor_windows_open"]
		if mf == nil {
			continue
		}
		for _, m := range mf.GetMetric() {
			var part, topo string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "partition":
					part = l.GetValue()
				case "topology":
					topo = l.GetValue()
				}
			}
			p, err := strconv.ParseInt(part, 10, 32)
			if err != nil || topo != topology {
				continue
			}
			out[int32(p)] += int64(m.GetGauge().GetValue())
		}
	}
	return out, reached, errs
}

func printGroupStatus(w io.Writer, gs groupStatus) error {
	fmt.Fprintf(w, "%s group %s: %s, %d members, lag %d", gs.title, gs.Group, gs.State, len(gs.Members), gs.Lag)
	if gs.Deleted > 0 {
		fmt.Fprintf(w, ", %d deleted unread", gs.Deleted)
	}
	if gs.AtRisk > 0 {
		fmt.Fprintf(w, ", %d unread near retention", gs.AtRisk)
	}
	if gs.OpenWindows != nil {
		fmt.Fprintf(w, ", open windows %d", *gs.OpenWindows)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if len(gs.Members) > 0 {
		fmt.Fprintln(tw, "  member\thost\tpartitions\t")
		for _, m := range gs.Members {
			id := m.InstanceID
			if id == "" {
				id = m.MemberID + " (dynamic)"
			}
			var parts []string
			for _, t := range sortedKeys(m.Assigned) {
				var ps []string
				for _, p := range m.Assigned[t] {
					ps = append(ps, strconv.Itoa(int(p)))
				}
				parts = append(parts, t+" "+strings.Join(ps, ","))
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t\n", id, m.Host, strings.Join(parts, "; "))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if gs.perPartition {
		fmt.Fprintln(tw, "  partition\towner\tlag\topen windows\t")
		for _, p := range gs.ByPartition {
			win := "-"
			if p.OpenWindows != nil {
				win = strconv.FormatInt(*p.OpenWindows, 10)
			}
			fmt.Fprintf(tw, "  %d\t%s\t%d\t%s\t\n", p.Partition, dash(p.Owner), p.Lag, win)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	fmt.Fprintln(tw, "  topic\tpartition\tcommitted\tend\tlag\towner\t")
	for _, p := range gs.Partitions {
		committed := "-"
		if p.Committed >= 0 {
			committed = strconv.FormatInt(p.Committed, 10)
		}
		fmt.Fprintf(tw, "  %s\t%d\t%s\t%d\t%d\t%s\t\n", p.Topic, p.Partition, committed, p.End, p.Lag, dash(p.Owner))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if gs.Deleted > 0 {
		fmt.Fprintf(w, "  WARNING: %d records after the group's committed offsets were deleted before it read them (retention shorter than its lag or outage?); it skips them when it resumes:\n", gs.Deleted)
		for _, p := range gs.Partitions {
			if p.Deleted > 0 {
				fmt.Fprintf(w, "    %s/%d: committed %d, the topic starts at %d: %d lost\n", p.Topic, p.Partition, p.Committed, p.Start, p.Deleted)
			}
		}
	}
	if gs.AtRisk > 0 {
		fmt.Fprintf(w, "  WARNING: %d unread records are older than %.0f%% of their topic's retention: the broker deletes them soon, and they are lost to the group, unless it catches up:\n", gs.AtRisk, retentionRiskShare*100)
		for _, p := range gs.Partitions {
			if p.AtRisk > 0 {
				fmt.Fprintf(w, "    %s/%d: %d of %d unread (retention %s)\n", p.Topic, p.Partition, p.AtRisk, p.Lag, p.Retention)
			}
		}
	}
	return nil
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
