package app

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/abacus-stream/abacus/examples/devices"
	"github.com/abacus-stream/abacus/partitioner/franz"
	"github.com/abacus-stream/abacus/sinks"
	"github.com/abacus-stream/abacus/store"
	"github.com/abacus-stream/abacus/store/cellstore"
	"github.com/abacus-stream/abacus/topology"
)

// registerRole adds r to the roles table for the rest of the test.
func registerRole(t *testing.T, r *role) {
	saved := roles
	roles = append(slices.Clip(roles), r)
	t.Cleanup(func() { roles = saved })
}

// echoRole is a sink that copies each source record into its table: one cell per record,
// keyed by the record's key, partition and offset, so that a record written twice is one cell.
func echoRole(tbl *SinkTable) *role {
	return sinkRole("echo-sink", "echo sink", "127.0.0.1:9369", "echo",
		func(*Config) *SinkTable { return tbl },
		func(_ *Config, t *topology.Topology) []string { return t.SourceTopics() },
		func(_ *deployment, t SinkTable) (sinks.Encoder, error) {
			return sinks.EncoderFunc(func(rec *kgo.Record, dst []store.Cell) ([]store.Cell, error) {
				return append(dst, store.Cell{Table: t.Table, Row: fmt.Appendf(nil, "%s/%d/%d", rec.Key, rec.Partition, rec.Offset),
					Family: []byte(t.Family), Qualifier: []byte("v"), Timestamp: rec.Timestamp.UnixMilli(), Value: rec.Value}), nil
			}), nil
		}, false)
}

// TestRegisteredRoleInEveryCommand registers a sink with one entry of the roles table and finds
// it in every command: the command line, the config's defaults and validation, admin create and
// verify, run (its records land, its ops endpoints report it), status, offsets, the demo and the
// bounds the deploy checks read. Nothing else names it.
func TestRegisteredRoleInEveryCommand(t *testing.T) {
	var tbl SinkTable
	registerRole(t, echoRole(&tbl))
	p := Program{Topologies: []func() (*topology.Topology, error){devices.Topology}}
	// The file says where everything is: the test services' variables must not move it.
	for _, v := range EnvVars() {
		t.Setenv(v, "")
	}

	// The command line and the deploy checks.
	inv, err := p.ParseCommandLine([]string{"run", "-config", "x.yaml", "-roles", "facts-sink,echo-sink"})
	if err != nil || !slices.Equal(inv.Roles, []string{RoleFacts, "echo-sink"}) {
		t.Fatalf("run -roles facts-sink,echo-sink: %v, %v", inv, err)
	}
	for _, args := range [][]string{{"run", "-config", "x.yaml"}, {"demo"}} {
		if inv, err := p.ParseCommandLine(args); err != nil || !slices.Contains(inv.Roles, "echo-sink") {
			t.Errorf("%v runs %v (%v): want the echo sink among all roles", args, inv, err)
		}
	}
	if _, err := p.ParseCommandLine([]string{"offsets", "show", "-config", "x.yaml", "-sink", "echo"}); err != nil {
		t.Errorf("offsets -sink echo: %v", err)
	}
	if d, ok := StopBound("echo-sink"); !ok || d != sinkStop() {
		t.Errorf("StopBound(echo-sink) = %v, %v: want a sink's", d, ok)
	}

	// Defaults and validation.
	cfg := &Config{Topology: "devices", Kafka: KafkaConfig{Brokers: []string{"b:9092"}}}
	cfg.HBase.Embedded = "x"
	cfg.Membership.Mode = "dynamic"
	cfg.EnsureDefaults()
	if tbl.Table != "devices_echo" || tbl.Group != "devices-echo-sink" || cfg.groupOf("echo-sink") != tbl.Group {
		t.Errorf("echo sink's defaults: table %q group %q", tbl.Table, tbl.Group)
	}
	if addr, _ := opsListen(cfg, []string{"echo-sink"}); addr != "127.0.0.1:9369" {
		t.Errorf("a process running the echo sink alone serves its ops endpoints on %q", addr)
	}
	tbl.Table = cfg.Sinks.Facts.Table
	if err := cfg.Validate(nil); err == nil || !strings.Contains(err.Error(), "sinks.echo.table") {
		t.Errorf("the echo sink on the facts table: %v, want an error naming sinks.echo.table", err)
	}
	tbl = SinkTable{}

	// admin, run, status and offsets on an in-process broker and the embedded store.
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DefaultNumPartitions(2))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	dir := t.TempDir()
	conf := filepath.Join(dir, "abacus.yaml")
	cells := filepath.Join(dir, "cells")
	if err := os.WriteFile(conf, fmt.Appendf(nil, "topology: %s\nkafka: {brokers: [%q]}\nhbase: {embedded: %q}\n"+
		"processor: {storage_path: %q}\nmembership: {mode: dynamic}\nops: {listen: \"127.0.0.1:0\"}\n",
		"devices", cluster.ListenAddrs()[0], cells, filepath.Join(dir, "state")), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	try := func(args ...string) (string, error) {
		var out, errs bytes.Buffer
		if code := p.Run(ctx, args, &out, &errs); code != 0 {
			return "", fmt.Errorf("abacus %s: exit %d: %s%s", strings.Join(args, " "), code, out.String(), errs.String())
		}
		return out.String(), nil
	}
	cli := func(args ...string) string {
		t.Helper()
		out, err := try(args...)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	// admin create says what it made, and what it found already made.
	for i, verb := range []string{"create", "create", "verify"} {
		out := cli("admin", verb, "-config", conf, "-partitions", "2")
		want := map[int]string{0: "created", 1: "exists", 2: "ok"}[i]
		for _, what := range []string{"table devices_echo (family d, 16 salt buckets)", "source topic " + devices.Topic + " (2 partitions"} {
			line := regexp.MustCompile(regexp.QuoteMeta(what) + `.*\.\.\. (\w+)`).FindStringSubmatch(out)
			if line == nil || line[1] != want {
				t.Errorf("admin %s (run %d): want %q for %s\n%s", verb, i+1, want, what, out)
			}
		}
	}
	const n = 40
	produce(t, ctx, cluster.ListenAddrs(), n)

	runCtx, stop := context.WithCancel(ctx)
	pr, pw := io.Pipe()
	done := make(chan int, 1)
	go func() {
		done <- p.Run(runCtx, []string{"run", "-config", conf, "-roles", "echo-sink"}, pw, io.Discard)
		pw.Close()
	}()
	opsURL := make(chan string, 1)
	go func() {
		re := regexp.MustCompile(`ops endpoints: (http://\S+)`)
		for sc := bufio.NewScanner(pr); sc.Scan(); {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				opsURL <- m[1]
			}
		}
	}()
	var base string
	select {
	case base = <-opsURL:
	case code := <-done:
		t.Fatalf("run -roles echo-sink exited with %d", code)
	}
	// Ready, and every record committed: its offsets say lag 0.
	for {
		ready, _ := httpGet(base + "readyz")
		lag, err := try("offsets", "lag", "-config", conf, "-sink", "echo") // no group before its first commit
		if err != nil {
			lag = err.Error()
		}
		if strings.Contains(ready, "echo-sink") && strings.Contains(ready, "table devices_echo reachable") &&
			strings.Contains(lag, "group devices-echo-sink lag 0") {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the echo sink never became ready with lag 0: readyz %q, offsets %q", ready, lag)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if out := cli("status", "-config", conf); !strings.Contains(out, "echo sink group devices-echo-sink: Stable, 1 members, lag 0") {
		t.Errorf("status does not show the echo sink's group:\n%s", out)
	}
	if out := cli("offsets", "show", "-config", conf, "-sink", "echo"); strings.Count(out, devices.Topic) != 2 {
		t.Errorf("offsets show -sink echo: want the source's two partitions:\n%s", out)
	}
	stop()
	if code := <-done; code != 0 {
		t.Fatalf("run -roles echo-sink exited with %d", code)
	}
	if got := countCells(t, cells, "devices_echo"); got != n {
		t.Errorf("the echo sink wrote %d cells, want one per record: %d", got, n)
	}

	// A disabled sink is not started, and the process is ready without it (it used to wait,
	// "starting", for ever).
	tbl.Disabled = true
	if err := os.WriteFile(conf, append(must(os.ReadFile(conf)), "sinks: {facts: {disabled: true}}\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	runCtx, stop = context.WithCancel(ctx)
	defer stop()
	pr, pw = io.Pipe()
	go func() {
		done <- p.Run(runCtx, []string{"run", "-config", conf, "-roles", "aggregates-sink,echo-sink,facts-sink"}, pw, io.Discard)
		pw.Close()
	}()
	go func() {
		re := regexp.MustCompile(`ops endpoints: (http://\S+)`)
		for sc := bufio.NewScanner(pr); sc.Scan(); {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				opsURL <- m[1]
			}
		}
	}()
	select {
	case base = <-opsURL:
	case code := <-done:
		t.Fatalf("run with the echo and facts sinks disabled exited with %d", code)
	}
	for {
		ready, err := httpGet(base + "readyz")
		if err == nil && strings.Contains(ready, `"status":"ready"`) {
			if strings.Contains(ready, "echo-sink") || strings.Contains(ready, "facts-sink") {
				t.Errorf("/readyz reports disabled sinks: %s", ready)
			}
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("never ready with two of its three sinks disabled: %s %v", ready, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	stop()
	if code := <-done; code != 0 {
		t.Fatalf("run exited with %d", code)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestDemoRunsRegisteredRole: the demo runs every role of the table, a registered one too.
func TestDemoRunsRegisteredRole(t *testing.T) {
	var tbl SinkTable
	registerRole(t, echoRole(&tbl))
	p := Program{
		Topologies: []func() (*topology.Topology, error){devices.Topology},
		DemoGenerator: func(ctx context.Context, cl *kgo.Client) error {
			_, err := devices.Generator{Devices: 3, PerSecond: 100, Seed: 1}.Run(ctx, cl)
			return err
		},
	}
	dir := t.TempDir()
	var errs bytes.Buffer
	if code := p.Run(context.Background(), []string{"demo", "-listen", "127.0.0.1:0", "-for", "8s", "-data", dir}, io.Discard, &errs); code != 0 {
		t.Fatalf("demo: exit %d: %s", code, errs.String())
	}
	if got := countCells(t, filepath.Join(dir, "cells"), "devices_echo"); got == 0 {
		t.Error("the demo ran without the registered echo sink: its table is empty")
	}
}

// produce writes n device readings with event times around now.
func produce(t *testing.T, ctx context.Context, brokers []string, n int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(franz.Partitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	now := time.Now().UnixMilli()
	var recs []*kgo.Record
	for i := range n {
		v := fmt.Sprintf(`{"device":"device-%03d","sensor":"s1","ts":%d,"temp":%d,"humidity":50,"kind":"reading"}`, i%7, now-int64(i)*1000, 20+i%5)
		recs = append(recs, &kgo.Record{Topic: devices.Topic, Key: fmt.Appendf(nil, "device-%03d", i%7), Value: []byte(v)})
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// countCells counts the cells of a table of the embedded store in dir.
func countCells(t *testing.T, dir, table string) int {
	t.Helper()
	cs, err := cellstore.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	n := 0
	if err := cs.Scan(context.Background(), store.ScanSpec{Table: table}, func(_ []byte, cells []store.Cell) bool {
		n += len(cells)
		return true
	}); err != nil {
		t.Fatal(err)
	}
	return n
}

// httpGet is the body of a GET of url.
func httpGet(url string) (string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}
