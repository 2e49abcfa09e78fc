package app_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/abacus-stream/abacus/examples/devices"
	"github.com/abacus-stream/abacus/internal/testenv"
	"github.com/abacus-stream/abacus/partitioner/franz"
	"github.com/abacus-stream/abacus/schema"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The membership tests run the abacus binary as real OS processes, one role per process, against
// the real Kafka and HBase: what a deployment across machines does, on one machine.

// membershipSessionTimeout is the groups' session timeout in these tests: long, so that a member
// that came back only because the dead one's session timed out is told apart from one that came
// back at once (static membership): the bound below is half of it.
const membershipSessionTimeout = 60 * time.Second

// resumeGoal is issue 12's goal for a restarted process and a clean stop's handover: under 5 s.
// Measured on an idle two-core machine: 0.3 to 1.4 s for every role.
const resumeGoal = 5 * time.Second

// buildAbacus builds the abacus command into the test's folder.
func buildAbacus(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "abacus")
	cmd := exec.Command("go", "build", "-o", bin, "../cmd/abacus")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/abacus: %v\n%s", err, out)
	}
	return bin
}

// handedOut are the addresses freeAddr gave in this test binary: the system may give a port it
// just let go to the next listener on port 0, and two processes of one test then got one port.
var handedOut sync.Map

// freeAddr is a loopback address no one listens on (for a process the test starts next), one
// that it has not given before.
func freeAddr(t *testing.T) string {
	t.Helper()
	for {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		if _, dup := handedOut.LoadOrStore(addr, true); !dup {
			return addr
		}
	}
}

// rolesEnv is a deployment of the devices topology on the real servers, under names of its own.
type rolesEnv struct {
	t       *testing.T
	bin     string
	dir     string
	config  string
	prefix  string // of topics and groups
	adm     *kadm.Client
	brokers []string

	mu    sync.Mutex
	procs []*roleProc
}

// roleProc is one `abacus run -roles ROLE` process of an instance.
type roleProc struct {
	name, role string
	instance   string // ABACUS_INSTANCE_ID
	ops        string // ABACUS_OPS_LISTEN
	extraEnv   []string
	cmd        *exec.Cmd
	log        string
	done       chan struct{}
	exit       error
}

// memberID is the group.instance.id the process's role joins under.
func (p *roleProc) memberID() string { return p.instance + "-" + p.role }

func newRolesEnv(t *testing.T, mode string) *rolesEnv {
	t.Helper()
	brokers := testenv.Kafka(t)
	hc := testenv.HBaseClient(t)
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	e := &rolesEnv{t: t, bin: buildAbacus(t), dir: t.TempDir(), prefix: "memb-" + run + "-", brokers: brokers}
	agg, facts := e.prefix+"agg", e.prefix+"facts" // the prefix goes before every table anyway
	testenv.DropTableAtEnd(t, hc, agg)
	testenv.DropTableAtEnd(t, hc, facts)
	testenv.DropTableAtEnd(t, hc, schema.KeyIndexTable(agg))
	e.config = filepath.Join(e.dir, "abacus.yaml")
	cfg := fmt.Sprintf(`topology: devices
topics: {prefix: %s}
processor:
  storage_path: ${ABACUS_TEST_STATE}
  idle_timeout: 5s
sinks:
  aggregates: {table: %s, salt_buckets: 4}
  facts: {table: %s, salt_buckets: 4}
  flush_interval: 200ms
membership:
  mode: %s
  session_timeout: %s
`, e.prefix, agg, facts, mode, membershipSessionTimeout)
	if err := os.WriteFile(e.config, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	e.adm = kadm.NewClient(cl)
	out := e.command("admin", "create", "-config", e.config, "-partitions", "4")
	t.Logf("admin create:\n%s", out)
	t.Cleanup(func() {
		e.mu.Lock()
		procs := e.procs
		e.mu.Unlock()
		for _, p := range procs {
			p.kill()
		}
		if t.Failed() {
			for _, p := range procs {
				t.Logf("--- log of %s (last lines):\n%s", p.name, tail(p.log, 30))
			}
		}
	})
	return e
}

// command runs an abacus command to its end and returns its output; it fails the test on an error.
func (e *rolesEnv) command(args ...string) string {
	e.t.Helper()
	cmd := exec.Command(e.bin, args...)
	cmd.Env = append(os.Environ(), "ABACUS_TEST_STATE="+filepath.Join(e.dir, "admin-state"))
	// Stdout alone is the answer (status -json): warnings, such as the test services' ABACUS_*
	// variables abacus does not read, go to stderr.
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		e.t.Fatalf("abacus %s: %v\n%s%s", strings.Join(args, " "), err, out.String(), errOut.String())
	}
	return out.String()
}

// start starts (or restarts) a role process of an instance.
func (e *rolesEnv) start(p *roleProc) *roleProc {
	e.t.Helper()
	if p.ops == "" {
		p.ops = freeAddr(e.t)
	}
	p.log = filepath.Join(e.dir, p.name+".log")
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		e.t.Fatal(err)
	}
	fmt.Fprintf(f, "=== start %s\n", time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(e.bin, "run", "-config", e.config, "-roles", p.role, "-log-level", "info")
	cmd.Env = append(os.Environ(), "ABACUS_INSTANCE_ID="+p.instance, "ABACUS_OPS_LISTEN="+p.ops,
		"ABACUS_TEST_STATE="+filepath.Join(e.dir, "state-"+p.instance))
	cmd.Env = append(cmd.Env, p.extraEnv...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	p.cmd, p.done, p.exit = cmd, make(chan struct{}), nil
	go func() {
		err := cmd.Wait()
		f.Close()
		p.exit = err
		close(p.done)
	}()
	e.mu.Lock()
	if !containsProc(e.procs, p) {
		e.procs = append(e.procs, p)
	}
	e.mu.Unlock()
	return p
}

func containsProc(ps []*roleProc, p *roleProc) bool {
	for _, q := range ps {
		if q == p {
			return true
		}
	}
	return false
}

// kill SIGKILLs the process (if it runs) and waits for its end.
func (p *roleProc) kill() {
	if p.cmd == nil {
		return
	}
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// stop sends SIGTERM and waits (up to a minute) for a clean exit.
func (p *roleProc) stop(t *testing.T) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(time.Minute):
		p.kill()
		t.Fatalf("%s did not stop within a minute of SIGTERM", p.name)
	}
	if p.exit != nil {
		t.Fatalf("%s exited with %v after SIGTERM:\n%s", p.name, p.exit, tail(p.log, 20))
	}
}

func tail(path string, n int) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// opsReport is the JSON answer of /readyz and /healthz.
type opsReport struct {
	Status string `json:"status"`
	Roles  []struct {
		Role       string `json:"role"`
		InstanceID string `json:"instance_id"`
		State      string `json:"state"`
		Ready      bool   `json:"ready"`
		Detail     string `json:"detail"`
	} `json:"roles"`
}

// get fetches a path of the process's ops endpoints.
func (p *roleProc) get(path string) (int, []byte, error) {
	cl := &http.Client{Timeout: 5 * time.Second}
	resp, err := cl.Get("http://" + p.ops + path)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// waitReady waits until the process's /readyz answers 200, and returns its report.
func (p *roleProc) waitReady(t *testing.T, within time.Duration) opsReport {
	t.Helper()
	deadline := time.Now().Add(within)
	var last string
	for {
		select {
		case <-p.done:
			t.Fatalf("%s exited (%v) before it was ready:\n%s", p.name, p.exit, tail(p.log, 20))
		default:
		}
		code, body, err := p.get("/readyz")
		if err == nil && code == http.StatusOK {
			var rep opsReport
			if err := json.Unmarshal(body, &rep); err != nil {
				t.Fatalf("%s /readyz: %v: %s", p.name, err, body)
			}
			return rep
		}
		last = fmt.Sprintf("%d %s %v", code, body, err)
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready within %v: last /readyz: %s\n%s", p.name, within, last, tail(p.log, 20))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitBalanced waits until each process is ready with its share of the 4 partitions: the group has
// settled.
func waitBalanced(t *testing.T, within time.Duration, ps ...*roleProc) {
	t.Helper()
	deadline := time.Now().Add(within)
	want := fmt.Sprintf("%d partitions", 4/len(ps))
	for _, p := range ps {
		for {
			rep := p.waitReady(t, within)
			if strings.HasPrefix(rep.Roles[0].Detail, want) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %q, want %s, within %v", p.name, rep.Roles[0].Detail, want, within)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// metric reads the sum of a metric's samples whose labels include every pair of want, from the
// process's /metrics (text format).
func (p *roleProc) metric(t *testing.T, name string, want ...string) float64 {
	t.Helper()
	code, body, err := p.get("/metrics")
	if err != nil || code != http.StatusOK {
		t.Fatalf("%s /metrics: %d %v", p.name, code, err)
	}
	return sumMetric(body, name, want...)
}

func sumMetric(body []byte, name string, want ...string) float64 {
	var sum float64
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name) || (len(line) > len(name) && line[len(name)] != '{' && line[len(name)] != ' ') {
			continue
		}
		ok := true
		for i := 0; i+1 < len(want); i += 2 {
			if !strings.Contains(line, want[i]+`="`+want[i+1]+`"`) {
				ok = false
			}
		}
		if !ok {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err == nil {
			sum += v
		}
	}
	return sum
}

// produce sends device readings with event time now to the source topic until ctx ends, to every
// partition, about 200 a second.
func (e *rolesEnv) produce(ctx context.Context) {
	e.t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...), kgo.RecordPartitioner(franz.Partitioner()),
		kgo.DefaultProduceTopic(e.prefix+devices.Topic), kgo.ProducerLinger(5*time.Millisecond))
	if err != nil {
		e.t.Fatal(err)
	}
	go func() {
		defer cl.Close()
		rng := rand.New(rand.NewPCG(1, 2))
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			for range 2 {
				dev := fmt.Sprintf("device-%03d", rng.IntN(200))
				v, _ := json.Marshal(devices.Reading{Device: dev, Sensor: "s1", Time: time.Now().UnixMilli(),
					Temp: 15 + 10*rng.Float64(), Humidity: 40, Kind: "reading"})
				cl.Produce(ctx, &kgo.Record{Key: []byte(dev), Value: v}, nil)
			}
		}
	}()
}

// committed reads a group's committed offsets of topics, by topic and partition.
func (e *rolesEnv) committed(group string, topics []string) map[string]map[int32]int64 {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := e.adm.FetchOffsetsForTopics(ctx, group, topics...)
	if err != nil {
		e.t.Fatalf("committed offsets of %s: %v", group, err)
	}
	out := map[string]map[int32]int64{}
	resp.Each(func(o kadm.OffsetResponse) {
		if out[o.Topic] == nil {
			out[o.Topic] = map[int32]int64{}
		}
		out[o.Topic][o.Partition] = o.At
	})
	return out
}

// waitProgress waits until every partition of topics has a committed offset past its offset in
// before, and returns when that was first seen.
func (e *rolesEnv) waitProgress(group string, topics []string, before map[string]map[int32]int64, within time.Duration) time.Time {
	e.t.Helper()
	deadline := time.Now().Add(within)
	for {
		now := time.Now()
		after := e.committed(group, topics)
		stuck := 0
		for t, ps := range after {
			for p, at := range ps {
				if at <= before[t][p] || at < 0 {
					stuck++
				}
			}
		}
		if stuck == 0 && len(after) == len(topics) {
			return now
		}
		if now.After(deadline) {
			e.t.Fatalf("group %s: %d partitions made no progress within %v (before %v, now %v)", group, stuck, within, before, after)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// resumeFigures are the measurements of one role.
type resumeFigures struct {
	role                                   string
	killToResume, restartToResume, toReady time.Duration
	stopToHandover, exitToHandover         time.Duration
}

// TestMembershipTimeToResume measures, for each role, how long a partition of an instance killed
// with SIGKILL and restarted at once waits before it makes progress again, and how long the
// partitions of an instance stopped cleanly (SIGTERM) wait for the other instance. Two instances
// of each role run as real processes (the abacus binary), with a session timeout of 60 s.
//
// With static membership (membership.mode: static, the default) the restarted process takes its
// partitions back without the session timing out and without a rebalance of the other instance:
// the test fails unless every partition moves again within 5 s of the restart (resumeGoal) and
// the other instance received no new assignment. A clean stop leaves the group explicitly, so its
// partitions move to the other instance within 5 s too (a static member that did not leave would
// keep them for the full session timeout).
//
// ABACUS_TEST_MEMBERSHIP_MODE=dynamic runs the same with dynamic members, for comparison: then
// the SIGKILLed instance's partitions wait for its session to time out, and the test asserts that
// (so the bound above can fail).
func TestMembershipTimeToResume(t *testing.T) {
	if testing.Short() {
		t.Skip("starts six processes and kills them: minutes")
	}
	mode := os.Getenv("ABACUS_TEST_MEMBERSHIP_MODE")
	if mode == "" {
		mode = "static"
	}
	e := newRolesEnv(t, mode)
	ctx, stopProducing := context.WithCancel(context.Background())
	defer stopProducing()
	e.produce(ctx)

	type pair struct{ a, b *roleProc }
	roles := map[string]pair{}
	for _, role := range []string{"processor", "aggregates-sink", "facts-sink"} {
		short := map[string]string{"processor": "proc", "aggregates-sink": "agg", "facts-sink": "facts"}[role]
		roles[role] = pair{
			e.start(&roleProc{name: short + "-a", role: role, instance: "inst-a"}),
			e.start(&roleProc{name: short + "-b", role: role, instance: "inst-b"}),
		}
	}
	for _, role := range []string{"processor", "aggregates-sink", "facts-sink"} {
		for _, p := range []*roleProc{roles[role].a, roles[role].b} {
			rep := p.waitReady(t, 3*time.Minute)
			if len(rep.Roles) != 1 || rep.Roles[0].Role != role || !rep.Roles[0].Ready {
				t.Fatalf("%s /readyz: %+v", p.name, rep)
			}
			if mode == "static" && rep.Roles[0].InstanceID != p.memberID() {
				t.Fatalf("%s /readyz: instance id %q, want %q", p.name, rep.Roles[0].InstanceID, p.memberID())
			}
		}
		// /readyz says how many partitions each instance has: two of the four each, once settled.
		waitBalanced(t, 2*time.Minute, roles[role].a, roles[role].b)
	}

	groups := map[string]string{"processor": e.prefix + "devices", "aggregates-sink": e.prefix + "devices-aggregates-sink",
		"facts-sink": e.prefix + "devices-facts-sink"}
	topics := map[string][]string{"processor": {e.prefix + devices.Topic}, "aggregates-sink": {e.prefix + "devices-totals"},
		"facts-sink": {e.prefix + devices.Topic}}
	// assignments counts what an instance was assigned since it started: it moves only when its
	// group rebalances.
	assignments := func(p *roleProc) float64 {
		if p.role == "processor" {
			return p.metric(t, "abacus_processor_assignments_total")
		}
		return p.metric(t, "abacus_sink_partition_changes_total")
	}
	// Every partition moves before any measurement: the pipeline is flowing.
	for _, role := range []string{"processor", "aggregates-sink", "facts-sink"} {
		e.waitProgress(groups[role], topics[role], e.committed(groups[role], topics[role]), 2*time.Minute)
	}

	var figures []resumeFigures
	for _, role := range []string{"processor", "aggregates-sink", "facts-sink"} {
		a, b := roles[role].a, roles[role].b
		group, tps := groups[role], topics[role]
		f := resumeFigures{role: role}

		// SIGKILL, then restart at once under the same instance id.
		bBefore := assignments(b)
		tKill := time.Now()
		a.kill()
		before := e.committed(group, tps)
		tRestart := time.Now()
		e.start(a)
		tResume := e.waitProgress(group, tps, before, 3*membershipSessionTimeout)
		f.killToResume, f.restartToResume = tResume.Sub(tKill), tResume.Sub(tRestart)
		a.waitReady(t, 3*membershipSessionTimeout)
		f.toReady = time.Since(tRestart)
		bAfter := assignments(b)
		t.Logf("%s (%s members): SIGKILL to progress on every partition %v, restart to progress %v, restart to /readyz %v; the other instance's assignments %v -> %v",
			role, mode, f.killToResume.Round(time.Millisecond), f.restartToResume.Round(time.Millisecond), f.toReady.Round(time.Millisecond), bBefore, bAfter)
		switch mode {
		case "static":
			if f.restartToResume > resumeGoal {
				t.Errorf("%s: a restarted static member waited %v for its partitions, not under %v (the session timeout is %v)",
					role, f.restartToResume, resumeGoal, membershipSessionTimeout)
			}
			if bAfter != bBefore {
				t.Errorf("%s: the other instance was assigned partitions again (%v -> %v) when the killed one came back: static membership should not rebalance it",
					role, bBefore, bAfter)
			}
		case "dynamic":
			if f.killToResume < membershipSessionTimeout/2 {
				t.Errorf("%s: dynamic members resumed %v after SIGKILL: the comparison expects the session timeout (%v) to be waited for",
					role, f.killToResume, membershipSessionTimeout)
			}
		}

		// Clean stop: the other instance takes the partitions, with no wait for the session.
		bBefore = assignments(b)
		tStop := time.Now()
		a.stop(t)
		tExit := time.Now()
		before = e.committed(group, tps)
		tHandover := e.waitProgress(group, tps, before, 3*membershipSessionTimeout)
		f.stopToHandover, f.exitToHandover = tHandover.Sub(tStop), tHandover.Sub(tExit)
		bAfter = assignments(b)
		t.Logf("%s (%s members): SIGTERM to progress on every partition %v (exit to progress %v); the other instance's assignments %v -> %v",
			role, mode, f.stopToHandover.Round(time.Millisecond), f.exitToHandover.Round(time.Millisecond), bBefore, bAfter)
		if f.exitToHandover > resumeGoal {
			t.Errorf("%s: after a clean stop the partitions waited %v for the other instance, not under %v (the session timeout is %v): did the stopped member leave?",
				role, f.exitToHandover, resumeGoal, membershipSessionTimeout)
		}
		if bAfter == bBefore {
			t.Errorf("%s: the other instance was assigned nothing after the clean stop, yet every partition moved", role)
		}
		// Back to two instances for the next role.
		e.start(a)
		a.waitReady(t, 3*membershipSessionTimeout)
		figures = append(figures, f)
	}
	t.Logf("time to resume (%s members, session timeout %v, two instances per role, 4 partitions):", mode, membershipSessionTimeout)
	t.Logf("%-16s %18s %20s %18s %18s", "role", "SIGKILL->progress", "restart->progress", "restart->ready", "SIGTERM->handover")
	for _, f := range figures {
		t.Logf("%-16s %18v %20v %18v %18v", f.role, f.killToResume.Round(10*time.Millisecond), f.restartToResume.Round(10*time.Millisecond),
			f.toReady.Round(10*time.Millisecond), f.stopToHandover.Round(10*time.Millisecond))
	}
	if mode != "static" {
		return
	}
	for _, role := range []string{"processor", "aggregates-sink", "facts-sink"} {
		waitBalanced(t, 2*time.Minute, roles[role].a, roles[role].b)
	}
	// Every instance has committed since it settled (the sinks' lag gauges follow commits).
	for _, role := range []string{"processor", "aggregates-sink", "facts-sink"} {
		e.waitProgress(groups[role], topics[role], e.committed(groups[role], topics[role]), time.Minute)
	}

	// Every role process serves its own metrics.
	pa, aa, fa := roles["processor"].a, roles["aggregates-sink"].a, roles["facts-sink"].a
	for _, c := range []struct {
		p    *roleProc
		name string
	}{
		{pa, "abacus_processor_events_in_total"}, {pa, "abacus_processor_windows_open"}, {pa, "abacus_processor_partitions_assigned"},
		{pa, "abacus_processor_input_lag_records"}, {aa, "abacus_sink_records_total"}, {aa, "abacus_sink_lag_records"},
		{fa, "abacus_sink_records_total"}, {fa, "abacus_sink_lag_records"},
	} {
		code, body, err := c.p.get("/metrics")
		if err != nil || code != 200 || !bytes.Contains(body, []byte("\n"+c.name)) {
			t.Errorf("%s /metrics (%d, %v) has no %s", c.p.name, code, err, c.name)
		}
	}
	for _, p := range []*roleProc{pa, aa, fa} {
		code, body, err := p.get("/healthz")
		if err != nil || code != 200 || !bytes.Contains(body, []byte(`"status":"ok"`)) {
			t.Errorf("%s /healthz: %d %s %v", p.name, code, body, err)
		}
	}

	// abacus status: every group's members by instance id, the lag per partition, and the open
	// windows the processor instances report.
	out := e.command("status", "-config", e.config, "-json", "-ops", roles["processor"].a.ops+","+roles["processor"].b.ops)
	var st struct {
		Groups []struct {
			Role    string
			Group   string
			State   string
			Members []struct {
				InstanceID string `json:"instance_id"`
				Assigned   map[string][]int32
			}
			Partitions []struct {
				Topic               string
				Partition           int32
				Committed, End, Lag int64
				Owner               string
			}
			ByPartition []struct {
				Partition   int32
				Owner       string
				OpenWindows *int64 `json:"open_windows"`
			} `json:"by_partition"`
			OpenWindows *int64 `json:"open_windows"`
		}
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("status -json: %v\n%s", err, out)
	}
	if len(st.Groups) != 3 {
		t.Fatalf("status: %d groups, want 3:\n%s", len(st.Groups), out)
	}
	for _, g := range st.Groups {
		want := map[string]bool{"inst-a-" + g.Role: true, "inst-b-" + g.Role: true}
		if g.Group != groups[g.Role] || g.State != "Stable" || len(g.Members) != 2 {
			t.Errorf("status of %s: group %s, state %s, %d members", g.Role, g.Group, g.State, len(g.Members))
		}
		for _, m := range g.Members {
			if !want[m.InstanceID] {
				t.Errorf("status of %s: member %q, want one of %v", g.Role, m.InstanceID, want)
			}
		}
		wantTopics := append([]string(nil), topics[g.Role]...)
		if g.Role == "processor" {
			wantTopics = append(wantTopics, g.Group+"-loop")
		}
		if len(g.Partitions) != 4*len(wantTopics) {
			t.Errorf("status of %s: %d partitions, want %d", g.Role, len(g.Partitions), 4*len(wantTopics))
		}
		for _, p := range g.Partitions {
			if !want[p.Owner] || p.Committed < 0 || p.Lag != p.End-p.Committed {
				t.Errorf("status of %s: partition %+v: want an owner of %v and lag = end - committed", g.Role, p, want)
			}
		}
		if g.Role == "processor" {
			if g.OpenWindows == nil || *g.OpenWindows == 0 || len(g.ByPartition) != 4 {
				t.Errorf("status of the processor: open windows %v over %d partitions, want some on 4", g.OpenWindows, len(g.ByPartition))
			}
			for _, p := range g.ByPartition {
				if p.OpenWindows == nil {
					t.Errorf("status of the processor: partition %d has no open windows from the ops endpoints", p.Partition)
				}
			}
		}
	}
	text := e.command("status", "-config", e.config, "-ops", roles["processor"].a.ops+","+roles["processor"].b.ops)
	for _, re := range []string{`processor group ` + groups["processor"] + `: Stable, 2 members, lag \d+, open windows [1-9]`,
		`inst-a-processor +127\.0\.0\.1 +` + regexp.QuoteMeta(e.prefix+devices.Topic),
		`aggregates sink group .*: Stable, 2 members`, `facts sink group .*: Stable, 2 members`} {
		if !regexp.MustCompile(re).MatchString(text) {
			t.Errorf("status output does not match %q:\n%s", re, text)
		}
	}
	t.Logf("abacus status:\n%s", text)
}

// TestMembershipDuplicateInstanceID: a second process that joins a group under an instance id a
// live one holds is refused at once on the same host (the host lock), and on another host (here:
// another temporary folder) fences the first one, which stops with an error naming the setting,
// while the newer one keeps the partitions. Processor (sarama) and sink (franz-go) alike.
func TestMembershipDuplicateInstanceID(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes: a minute")
	}
	e := newRolesEnv(t, "static")
	for _, role := range []string{"processor", "facts-sink"} {
		first := e.start(&roleProc{name: role + "-first", role: role, instance: "dup"})
		first.waitReady(t, 3*time.Minute)

		// Same host: refused before it joins; the first one is untouched.
		same := exec.Command(e.bin, "run", "-config", e.config, "-roles", role, "-log-level", "warn")
		same.Env = append(os.Environ(), "ABACUS_INSTANCE_ID=dup", "ABACUS_OPS_LISTEN="+freeAddr(t),
			"ABACUS_TEST_STATE="+filepath.Join(e.dir, "state-dup-same"))
		out, err := same.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || !strings.Contains(string(out), "another process on this host is already member dup-"+role) ||
			!strings.Contains(string(out), "membership.instance_id") {
			t.Fatalf("%s: a second process of the host under the same id: %v\n%s", role, err, out)
		}
		t.Logf("%s, same host: %s", role, strings.TrimSpace(string(out)))
		first.waitReady(t, time.Minute)

		// Another host: it joins and the broker fences the first one, which stops.
		other := filepath.Join(e.dir, "other-host-"+role)
		if err := os.MkdirAll(other, 0o755); err != nil {
			t.Fatal(err)
		}
		second := e.start(&roleProc{name: role + "-second", role: role, instance: "dup",
			extraEnv: []string{"TMPDIR=" + other, "ABACUS_TEST_STATE=" + filepath.Join(other, "state")}})
		select {
		case <-first.done:
		case <-time.After(2 * time.Minute):
			t.Fatalf("%s: the fenced process did not stop within two minutes:\n%s", role, tail(first.log, 20))
		}
		log := tail(first.log, 5)
		if first.exit == nil || !strings.Contains(log, "instance id dup-"+role+" was taken over by another process") ||
			!strings.Contains(log, "membership.instance_id") {
			t.Fatalf("%s: the fenced process exited with %v:\n%s", role, first.exit, log)
		}
		t.Logf("%s, other host: the first process stopped: %s", role, strings.TrimSpace(tail(first.log, 1)))
		rep := second.waitReady(t, 3*membershipSessionTimeout)
		if !strings.HasPrefix(rep.Roles[0].Detail, "4 partitions") {
			t.Errorf("%s: the newer process has %q, want every partition", role, rep.Roles[0].Detail)
		}
		second.stop(t)
	}
}

// TestOpsEndpointsWhileConnecting: a sink process answers /healthz and /readyz from its start,
// before it reaches HBase: alive, not ready, saying what it waits for.
func TestOpsEndpointsWhileConnecting(t *testing.T) {
	brokers := testenv.Kafka(t)
	bin := buildAbacus(t)
	dir := t.TempDir()
	config := filepath.Join(dir, "abacus.yaml")
	dead := freeAddr(t) // nothing listens: HBase's ZooKeeper never answers
	if err := os.WriteFile(config, []byte(fmt.Sprintf("topology: devices\nkafka: {brokers: [%q]}\nhbase: {zookeeper: %q}\n",
		brokers[0], dead)), 0o644); err != nil {
		t.Fatal(err)
	}
	p := &roleProc{name: "facts", role: "facts-sink", instance: "ops-test", ops: freeAddr(t), log: filepath.Join(dir, "facts.log")}
	f, err := os.Create(p.log)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command(bin, "run", "-config", config, "-roles", "facts-sink")
	cmd.Env = append(os.Environ(), "ABACUS_HBASE_ZK=", "ABACUS_INSTANCE_ID=ops-test", "ABACUS_OPS_LISTEN="+p.ops)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p.cmd, p.done = cmd, make(chan struct{})
	go func() { p.exit = cmd.Wait(); close(p.done) }()
	defer p.kill()
	deadline := time.Now().Add(time.Minute)
	for {
		select {
		case <-p.done:
			t.Fatalf("exited (%v):\n%s", p.exit, tail(p.log, 10))
		default:
		}
		code, body, err := p.get("/healthz")
		if err == nil {
			if code != 200 || !bytes.Contains(body, []byte(`"status":"ok"`)) {
				t.Fatalf("/healthz while connecting: %d %s", code, body)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no ops endpoint within a minute: %v\n%s", err, tail(p.log, 10))
		}
		time.Sleep(50 * time.Millisecond)
	}
	code, body, err := p.get("/readyz")
	if err != nil || code != http.StatusServiceUnavailable || !bytes.Contains(body, []byte(`"state":"starting"`)) ||
		!bytes.Contains(body, []byte(`"instance_id":"ops-test-facts-sink"`)) {
		t.Fatalf("/readyz while connecting: %d %s %v", code, body, err)
	}
	code, body, err = p.get("/metrics")
	if err != nil || code != 200 || !bytes.Contains(body, []byte(`abacus_role_info{group="devices-facts-sink",instance_id="ops-test-facts-sink",role="facts-sink"} 1`)) {
		t.Fatalf("/metrics while connecting: %d %v\n%s", code, err, body)
	}
}
