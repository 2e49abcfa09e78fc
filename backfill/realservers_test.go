package backfill_test

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/abacus-stream/abacus/abacustest"
	"github.com/abacus-stream/abacus/app"
	"github.com/abacus-stream/abacus/examples/devices"
	"github.com/abacus-stream/abacus/internal/kafkaread"
	"github.com/abacus-stream/abacus/internal/testenv"
	"github.com/abacus-stream/abacus/internal/testenv/gate"
	"github.com/abacus-stream/abacus/partitioner"
	"github.com/abacus-stream/abacus/partitioner/franz"
	"github.com/abacus-stream/abacus/processors"
	"github.com/abacus-stream/abacus/schema"
	"github.com/abacus-stream/abacus/sinks"
	"github.com/abacus-stream/abacus/state"
	"github.com/abacus-stream/abacus/store"
	"github.com/abacus-stream/abacus/store/hbasestore"
	"github.com/abacus-stream/abacus/topology"
	"github.com/abacus-stream/abacus/totals"
)

// TestBackfillRealServers is the "done when" on the real Kafka broker and HBase: a
// deployment of the example's sets (abacus run, in process) processes readings; it is redeployed
// with two sets and two rollups more and goes on; `abacus backfill` then writes those sets' windows from before
// the redeployment. Every final window of the new sets in HBase (the processor's and backfill's)
// is then, cell for cell, what the same topology gives over the same records from the start (the
// processor's engine on the in-memory driver, through the aggregates sink's encoder), though a
// first backfill was stopped halfway. A second backfill changes nothing.
func TestBackfillRealServers(t *testing.T) {
	brokers := testenv.Kafka(t)
	zk := gate.HBaseZooKeeper(t)
	hc := testenv.HBaseClient(t)
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	prefix := "bf-" + run + "-"
	agg, facts := prefix+"agg", prefix+"facts"
	for _, tb := range []string{agg, facts, schema.KeyIndexTable(agg)} {
		testenv.DropTableAtEnd(t, hc, tb)
	}
	dir := t.TempDir()
	conf := filepath.Join(dir, "abacus.yaml")
	// No idle advance while the test works (it would move stream time by the wall clock between
	// the two deployments); ticks, which write the partitions' records, every 15 s.
	if err := os.WriteFile(conf, fmt.Appendf(nil, `topology: devices
kafka: {brokers: [%q]}
hbase: {zookeeper: %q}
topics: {prefix: %s}
processor: {storage_path: %q, idle_timeout: 1m}
sinks:
  aggregates: {table: %s, salt_buckets: 4}
  facts: {table: %s, salt_buckets: 4}
  flush_interval: 200ms
membership: {mode: dynamic}
ops: {listen: "127.0.0.1:0"}
`, brokers[0], zk, prefix, filepath.Join(dir, "state"), agg, facts), 0o644); err != nil {
		t.Fatal(err)
	}
	v1, v2 := topo(t, false), topo(t, true)
	program := func(tp *topology.Topology) app.Program {
		return app.Program{Topologies: []func() (*topology.Topology, error){func() (*topology.Topology, error) { return tp, nil }}}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cli := func(p app.Program, args ...string) string {
		t.Helper()
		var out, errs bytes.Buffer
		if code := p.Run(ctx, args, &out, &errs); code != 0 {
			t.Fatalf("abacus %s: exit %d\n%s%s", strings.Join(args, " "), code, out.String(), errs.String())
		}
		return out.String() + errs.String()
	}
	cli(program(v2), "admin", "create", "-config", conf, "-partitions", "4")
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(franz.Partitioner()), kgo.DefaultProduceTopic(prefix+devices.Topic))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	sourceTopic := prefix + devices.Topic
	group := prefix + "devices"

	// Three hours of readings ending now, in two deployments.
	start := time.Now().Add(-3 * time.Hour).Truncate(time.Hour)
	recs := readings(rand.New(rand.NewPCG(5, 6)), start, time.Since(start)-time.Minute, 12000)
	deploy := func(p app.Program, part []source) context.CancelFunc {
		t.Helper()
		rctx, stop := context.WithCancel(ctx)
		done := make(chan int, 1)
		var logs testenv.SyncBuffer
		go func() {
			done <- p.Run(rctx, []string{"run", "-config", conf, "-roles", "processor,aggregates-sink,facts-sink"}, &logs, &logs)
		}()
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("abacus run:\n%s", logs.String())
			}
		})
		var out []*kgo.Record
		for _, r := range part {
			out = append(out, &kgo.Record{Key: []byte(r.key), Value: r.value, Timestamp: r.ts})
		}
		if err := cl.ProduceSync(ctx, out...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		waitCaughtUp(ctx, t, adm, group, sourceTopic)
		return func() {
			stop()
			if code := <-done; code != 0 {
				t.Errorf("abacus run exited with %d", code)
			}
		}
	}
	split := len(recs) * 11 / 20
	deploy(program(v1), recs[:split])()
	stop := deploy(program(v2), recs[split:])
	defer stop()
	waitCaughtUp(ctx, t, adm, prefix+"devices-aggregates-sink", prefix+"devices-totals")

	// The processor's records, once a tick has written the new sets into each.
	var live []*state.Partition
	for {
		live, err = processors.PartitionRecords(ctx, group, 4, kgo.SeedBrokers(brokers...))
		if err != nil {
			t.Fatal(err)
		}
		if slices.IndexFunc(live, func(p *state.Partition) bool { return p == nil || !hasSet(p, "hour") }) < 0 {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the processor's records never named the new sets")
		}
		time.Sleep(time.Second)
	}
	added := []string{"hour", "alarms-10m", "region-hour", "fleet-10m", "minute-10m", "region-10m"}
	st, err := hbasestore.New(hc, hbasestore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	// A backfill SIGKILLed halfway, then the command again: it resumes from the killed one's
	// last checkpoint, and the table must end as if nothing had stopped.
	testenv.DropTableAtEnd(t, hc, prefix+"abacus_backfill")
	killBackfill(ctx, t, conf, strings.Join(added, ","), int64(len(recs)*2/3))
	out := cli(program(v2), "backfill", "-config", conf, "-set", strings.Join(added, ","))
	t.Logf("abacus backfill:\n%s", out)
	if !strings.Contains(out, "resumed from a checkpoint") {
		t.Error("the backfill after the killed one did not resume from its checkpoint")
	}

	// The same records, in each partition's order, through the engine from the start.
	var got []*kgo.Record
	if err := kafkaread.All(ctx, brokers, sourceTopic, func(r *kgo.Record) { got = append(got, r) }); err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(got, func(a, b *kgo.Record) int {
		if a.Partition != b.Partition {
			return int(a.Partition - b.Partition)
		}
		return int(a.Offset - b.Offset)
	})
	d := abacustest.New(t, v2, abacustest.Options{Partitions: 4, Start: start})
	for _, r := range got {
		d.Send(devices.Topic, string(r.Key), r.Value, abacustest.At(r.Timestamp))
	}
	enc := &sinks.AggregatesEncoder{Table: agg, Family: "d", SaltBuckets: 4}
	want := map[string]string{}
	compared := map[bool]int{} // by backfilled
	for _, m := range d.Messages(v2.TotalsTopic()) {
		tot, err := (&totals.Decoder{}).Decode(m.Value)
		if err != nil {
			t.Fatal(err)
		}
		if !tot.Final || !slices.Contains(added, tot.Set) {
			continue
		}
		// An entity's windows are its partition's; a rollup's take every partition's share.
		recs := live[partitioner.Partition([]byte(tot.Entity), 4) : partitioner.Partition([]byte(tot.Entity), 4)+1]
		if info, _ := v2.Set(tot.Set); info.Rollup {
			recs = live
		}
		liveFrom, closed := int64(math.MinInt64), int64(math.MaxInt64)
		for _, p := range recs {
			g := graceOf(p, tot.Set)
			liveFrom, closed = max(liveFrom, g.LiveFrom), min(closed, max(p.StreamTime, p.IdleStreamTime)-g.Grace)
		}
		if tot.End > closed {
			continue // not closed on the real processor yet
		}
		compared[tot.Start < liveFrom]++
		cs, err := enc.Encode(&kgo.Record{Value: m.Value}, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cs {
			want[cellKey(c)] = fmt.Sprintf("%x", c.Value)
		}
	}
	if compared[true] == 0 || compared[false] == 0 {
		t.Fatalf("windows compared: %d backfilled, %d the processor's; the test must reach both", compared[true], compared[false])
	}
	read := func() map[string]string {
		out := map[string]string{}
		err := st.Scan(ctx, store.ScanSpec{Table: agg, Family: "d"}, func(row []byte, cs []store.Cell) bool {
			for _, c := range cs {
				c.Row = row
				if k := cellKey(c); want[k] != "" {
					out[k] = fmt.Sprintf("%x", c.Value)
				}
			}
			return true
		})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	table := read()
	for k, v := range want {
		if table[k] != v {
			t.Errorf("cell %s: HBase holds %q, the topology from the start %s", k, table[k], v)
		}
	}
	t.Logf("%d final windows compared: %d backfilled, %d written by the processor", compared[true]+compared[false], compared[true], compared[false])
	cli(program(v2), "backfill", "-config", conf, "-set", strings.Join(added, ","))
	again := read()
	for k, v := range table {
		if again[k] != v {
			t.Errorf("a second backfill changed cell %s: %s, then %s", k, v, again[k])
		}
	}
}

// waitCaughtUp waits until group has committed every partition of topic to its end.
func waitCaughtUp(ctx context.Context, t *testing.T, adm *kadm.Client, group, topic string) {
	t.Helper()
	for {
		ends, err := adm.ListEndOffsets(ctx, topic)
		var committed kadm.OffsetResponses
		if err == nil {
			committed, err = adm.FetchOffsets(ctx, group)
		}
		if err == nil {
			behind := 0
			ends.Each(func(o kadm.ListedOffset) {
				if c, ok := committed.Lookup(topic, o.Partition); o.Offset > 0 && (!ok || c.At < o.Offset) {
					behind++
				}
			})
			if behind == 0 {
				return
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("group %s did not catch up with %s: %v", group, topic, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func hasSet(p *state.Partition, set string) bool {
	return slices.ContainsFunc(p.Graces, func(g state.SetGrace) bool { return g.Set == set })
}

func graceOf(p *state.Partition, set string) state.SetGrace {
	i := slices.IndexFunc(p.Graces, func(g state.SetGrace) bool { return g.Set == set })
	return p.Graces[i]
}

func cellKey(c store.Cell) string { return fmt.Sprintf("%x %s %d", c.Row, c.Qualifier, c.Timestamp) }
