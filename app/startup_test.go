package app_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/abacus-stream/abacus/examples/devices"
	"github.com/abacus-stream/abacus/internal/testenv/gate"
)

// lateProxy forwards TCP connections from addr to a server, once opened: until then it accepts
// none, so a client's connection waits unanswered, as with a server that has not come up yet. It
// holds addr from the start: a port found free and let go was taken, between the two, by a role's
// own ops listener (also on a port the system picks), and the role's Kafka client then read HTTP.
// (Closing each connection instead is no stand-in: a reset is an answer, which the roles report
// as a wrong setting rather than wait out.) Kafka's and ZooKeeper's answers name the real
// servers, so only the first contact goes through it.
type lateProxy struct {
	t      *testing.T
	ln     net.Listener
	addr   string
	target string
}

func newLateProxy(t *testing.T, target string) *lateProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return &lateProxy{t: t, ln: ln, addr: ln.Addr().String(), target: target}
}

// open starts accepting and forwarding.
func (p *lateProxy) open() {
	go func() {
		for {
			c, err := p.ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				s, err := net.Dial("tcp", p.target)
				if err != nil {
					return
				}
				defer s.Close()
				go func() { _, _ = io.Copy(s, c); s.Close() }()
				_, _ = io.Copy(c, s)
			}()
		}
	}()
}

// readyDetail is the detail of a process's only role on /readyz, "" when it does not answer.
func (p *roleProc) readyDetail() string {
	_, body, err := p.get("/readyz")
	if err != nil {
		return ""
	}
	var rep opsReport
	if json.Unmarshal(body, &rep) != nil || len(rep.Roles) != 1 {
		return ""
	}
	return rep.Roles[0].Detail
}

// TestRolesWaitForServers: long-running roles started before Kafka or HBase answers wait for
// them, saying so in the log and on /readyz, and run once the servers answer, instead of exiting
// (an orchestrator starts everything at once; a role that exits only races again). The aggregates
// sink and the processor start with a broker address nothing listens on yet, the facts sink with
// a ZooKeeper address nothing listens on yet; the addresses start answering (a proxy to the real
// servers) after each sink has reported what it waits for, which for HBase takes one failed
// connection attempt (30 s). Before, the aggregates sink exited at once and the facts sink after
// two minutes.
func TestRolesWaitForServers(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for a connection attempt to time out: a minute")
	}
	e := newRolesEnv(t, "static")
	kafka := newLateProxy(t, e.brokers[0])
	zk := newLateProxy(t, gate.HBaseZooKeeper(t))
	proc := e.start(&roleProc{name: "proc", role: "processor", instance: "wait", extraEnv: []string{"ABACUS_KAFKA_BROKERS=" + kafka.addr}})
	agg := e.start(&roleProc{name: "agg", role: "aggregates-sink", instance: "wait", extraEnv: []string{"ABACUS_KAFKA_BROKERS=" + kafka.addr}})
	facts := e.start(&roleProc{name: "facts", role: "facts-sink", instance: "wait", extraEnv: []string{"ABACUS_HBASE_ZK=" + zk.addr}})

	waitDetail := func(p *roleProc, want string) {
		t.Helper()
		deadline := time.Now().Add(90 * time.Second)
		for {
			select {
			case <-p.done:
				t.Fatalf("%s exited (%v) while a server was down:\n%s", p.name, p.exit, tail(p.log, 20))
			default:
			}
			d := p.readyDetail()
			if strings.Contains(d, want) {
				t.Logf("%s /readyz while waiting: %s", p.name, d)
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: /readyz never said %q (last %q):\n%s", p.name, want, d, tail(p.log, 20))
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	waitDetail(agg, "waiting for Kafka "+kafka.addr)
	waitDetail(facts, "waiting for HBase (zookeeper "+zk.addr+")")
	for _, p := range []*roleProc{proc, agg, facts} {
		select {
		case <-p.done:
			t.Fatalf("%s exited (%v) while a server was down:\n%s", p.name, p.exit, tail(p.log, 20))
		default:
		}
	}
	if !strings.Contains(tail(agg.log, 200), "cannot reach Kafka") || !strings.Contains(tail(facts.log, 200), "cannot reach HBase") {
		t.Errorf("the logs do not say what the sinks wait for:\n--- agg\n%s\n--- facts\n%s", tail(agg.log, 10), tail(facts.log, 10))
	}

	kafka.open()
	zk.open()
	for _, p := range []*roleProc{proc, agg, facts} {
		p.waitReady(t, 2*time.Minute)
	}
	// And they work: every partition of each group moves.
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	e.produce(ctx)
	for group, topic := range map[string]string{"devices": devices.Topic, "devices-aggregates-sink": "devices-totals",
		"devices-facts-sink": devices.Topic} {
		tps := []string{e.prefix + topic}
		e.waitProgress(e.prefix+group, tps, e.committed(e.prefix+group, tps), 2*time.Minute)
	}
	for _, p := range []*roleProc{proc, agg, facts} {
		p.stop(t)
	}
}
