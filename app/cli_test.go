package app_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/abacus-stream/abacus/app"
	"github.com/abacus-stream/abacus/examples/devices"
	"github.com/abacus-stream/abacus/internal/testenv"
	"github.com/abacus-stream/abacus/internal/testenv/gate"
	"github.com/abacus-stream/abacus/partitioner/franz"
	"github.com/abacus-stream/abacus/topology"
	"github.com/rogpeppe/go-internal/testscript"
	"github.com/twmb/franz-go/pkg/kgo"
)

// program is the abacus binary's program: the devices example, with the demo's hour of history.
// Ten readings a second (the binary's demo sends 100): every device still has readings in every
// minute, and the hour of history is little enough to go through in time on a test machine that
// runs four stages at once (at 50 a second, TestDemo once saw 51 of the hour's 60 minutes after
// 7 minutes, and no rollup window in 6).
var program = app.Program{
	Topologies: []func() (*topology.Topology, error){devices.Topology},
	DemoTopics: map[string]int32{devices.Topic: 4},
	DemoGenerator: func(ctx context.Context, cl *kgo.Client) error {
		_, err := devices.Generator{Devices: 5, PerSecond: 10, Jitter: time.Second, Seed: 1, History: time.Hour}.Run(ctx, cl)
		return err
	},
}

func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){
		"abacus": func() {
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
			defer stop()
			os.Exit(program.Run(ctx, os.Args[1:], os.Stdout, os.Stderr))
		},
	})
}

// TestCLI runs the scripts in testdata/script that need no servers: usage and bad input.
func TestCLI(t *testing.T) {
	testscript.Run(t, testscript.Params{Dir: "testdata/script"})
}

// TestCLIRealServers runs the scripts in testdata/real against the real Kafka and HBase: every
// subcommand's happy path.
func TestCLIRealServers(t *testing.T) {
	brokers := testenv.Kafka(t)
	quorum := gate.HBaseZooKeeper(t)
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	testscript.Run(t, testscript.Params{
		Dir: "testdata/real",
		Setup: func(e *testscript.Env) error {
			e.Setenv("ABACUS_KAFKA_BROKERS", strings.Join(brokers, ","))
			e.Setenv("ABACUS_HBASE_ZK", quorum)
			e.Setenv("RUN", run)
			// A free port for servers the script waits for (wait-http): the script must know the
			// address before the server prints it.
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				return err
			}
			e.Setenv("PORT", strconv.Itoa(ln.Addr().(*net.TCPAddr).Port))
			return ln.Close()
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			// wait-http URL waits (up to a minute) until URL answers 200.
			"wait-http": func(ts *testscript.TestScript, neg bool, args []string) {
				deadline := time.Now().Add(time.Minute)
				for {
					resp, err := http.Get(args[0])
					if err == nil {
						resp.Body.Close()
						if resp.StatusCode == http.StatusOK {
							return
						}
					}
					if time.Now().After(deadline) {
						ts.Fatalf("%s did not answer 200 within a minute (last: %v)", args[0], err)
					}
					time.Sleep(50 * time.Millisecond)
				}
			},
			// produce-readings N writes N device readings with event times around now.
			"produce-readings": func(ts *testscript.TestScript, neg bool, args []string) {
				n, err := strconv.Atoi(args[0])
				if err != nil {
					ts.Fatalf("produce-readings N: %v", err)
				}
				cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(franz.Partitioner()))
				ts.Check(err)
				defer cl.Close()
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				var recs []*kgo.Record
				now := time.Now().UnixMilli()
				for i := range n {
					v := fmt.Sprintf(`{"device":"device-%03d","sensor":"s%d","ts":%d,"temp":%d,"humidity":50,"kind":"reading"}`, i%10, i%3, now-int64(i%30)*1000, 20+i%5)
					recs = append(recs, &kgo.Record{Topic: devices.Topic, Key: fmt.Appendf(nil, "device-%03d", i%10), Value: []byte(v)})
				}
				ts.Check(cl.ProduceSync(ctx, recs...).FirstErr())
			},
		},
	})
}
