package app

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/abacus-stream/abacus/backfill"
	"github.com/abacus-stream/abacus/examples/devices"
	"github.com/abacus-stream/abacus/hbase"
	"github.com/abacus-stream/abacus/internal/testenv"
	"github.com/abacus-stream/abacus/internal/testenv/gate"
	"github.com/abacus-stream/abacus/store/hbasestore"
	"github.com/abacus-stream/abacus/topology"
)

// TestAdminDropRemovesWhatCreateMade: on the real broker and HBase, admin drop deletes what admin
// create made for a prefixed deployment (its topics but the sources, its sink tables, key index,
// offsets table and backfill's checkpoints table), refuses a -confirm that is not the
// deployment's group and touches nothing then, and leaves the source topics unless -sources.
func TestAdminDropRemovesWhatCreateMade(t *testing.T) {
	for _, v := range EnvVars() {
		t.Setenv(v, "")
	}
	brokers := testenv.Kafka(t)
	zk := gate.HBaseZooKeeper(t)
	hc := testenv.HBaseClient(t)
	prefix := "drop-" + strconv.FormatInt(time.Now().UnixNano(), 36) + "-"
	conf := filepath.Join(t.TempDir(), "abacus.yaml")
	file := fmt.Appendf(nil, "topology: devices\nkafka: {brokers: [%q]}\nhbase: {zookeeper: %q}\n"+
		"topics: {prefix: %s}\nsinks: {offsets: hbase}\nmembership: {mode: dynamic}\n", brokers[0], zk, prefix)
	if err := os.WriteFile(conf, file, 0o644); err != nil {
		t.Fatal(err)
	}
	p := Program{Topologies: []func() (*topology.Topology, error){devices.Topology}}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	run := func(args ...string) (int, string) {
		var out bytes.Buffer
		code := p.Run(ctx, args, &out, &out)
		return code, out.String()
	}
	if code, out := run("admin", "create", "-config", conf, "-partitions", "2"); code != 0 {
		t.Fatalf("admin create: %d\n%s", code, out)
	}
	cfg, err := ParseConfig(file, func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	cfg, _, err = p.resolve(&common{}, cfg, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	tables := []string{cfg.Sinks.Aggregates.Table, cfg.Sinks.Aggregates.Table + "_keys", cfg.Sinks.Facts.Table, cfg.Sinks.OffsetsTable,
		cfg.Sinks.BackfillTable}
	for _, tb := range tables {
		testenv.DropTableAtEnd(t, hc, tb)
	}
	// What a backfill run leaves.
	st, err := hbasestore.New(hc, hbasestore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.EnsureTable(ctx, backfill.CheckpointLayout(cfg.Sinks.BackfillTable)); err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ours := func() []string {
		t.Helper()
		ts, err := adm.ListTopics(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, n := range ts.Names() {
			if strings.HasPrefix(n, prefix) {
				out = append(out, n)
			}
		}
		slices.Sort(out)
		return out
	}
	exists := func(tb string) bool {
		t.Helper()
		_, err := hc.Admin().DescribeTable(ctx, tb)
		if err != nil && !hbase.IsTableNotFound(err) {
			t.Fatal(err)
		}
		return err == nil
	}
	before := ours()
	source := prefix + devices.Topic
	if !slices.Contains(before, source) || len(before) < 4 {
		t.Fatalf("admin create made the topics %v: want the source %s and the deployment's own", before, source)
	}
	for _, tb := range tables {
		if !exists(tb) {
			t.Fatalf("table %s missing after admin create", tb)
		}
	}

	if code, out := run("admin", "drop", "-config", conf, "-confirm", "devices"); code == 0 || !strings.Contains(out, "nothing deleted") {
		t.Errorf("admin drop confirming another name: exit %d\n%s", code, out)
	}
	if after := ours(); !slices.Equal(after, before) {
		t.Fatalf("a refused drop changed the topics: %v, then %v", before, after)
	}
	code, out := run("admin", "drop", "-config", conf, "-confirm", prefix+"devices")
	if code != 0 {
		t.Fatalf("admin drop: %d\n%s", code, out)
	}
	t.Logf("admin drop:\n%s", out)
	for _, tb := range tables {
		if exists(tb) {
			t.Errorf("table %s still there after admin drop", tb)
		}
	}
	// Topic deletion is asynchronous in Kafka: wait for the listing to settle. The source and
	// the table's topic (the device registry) are the user's: kept without -sources.
	kept := []string{source, prefix + devices.RegistryTopic}
	for {
		after := ours()
		if slices.Equal(after, kept) {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("topics after admin drop: %v; want only the source and table topics %v", after, kept)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if code, out := run("admin", "drop", "-config", conf, "-confirm", prefix+"devices", "-sources"); code != 0 {
		t.Fatalf("admin drop -sources: %d\n%s", code, out)
	}
	for len(ours()) > 0 {
		if ctx.Err() != nil {
			t.Fatalf("topics after admin drop -sources: %v; want none", ours())
		}
		time.Sleep(200 * time.Millisecond)
	}
}
