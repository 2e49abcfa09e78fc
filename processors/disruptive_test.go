package processors_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/abacus-stream/abacus/internal/testenv"
	"github.com/abacus-stream/abacus/internal/testenv/gate"
)

// TestDisruptiveBrokerRestart runs the oracle scenario on the single test broker while the broker
// is SIGKILLed and started again, then stopped cleanly and started again, each time while records
// are coming. With the only broker gone, sarama cannot name a partition's leader and gives up its
// writes at once, and goka stops the group on the first failed write: before, the processor then
// exited (the failure suite counted such exits). It must ride the outages out in process
// (Processor.Run runs the group again from the changelogs) and every final must equal the
// oracle's, dead letters and late records all present (repeats, identical, are allowed: a group
// run again replays like a restarted process).
//
// Like every TestDisruptive*, it runs only with ABACUS_DISRUPTIVE=1 (testenv/run-tests.sh sets it
// in a pass of its own). By hand:
//
//	ABACUS_DISRUPTIVE=1 go test -count=1 -run '^TestDisruptive' ./processors/
func TestDisruptiveBrokerRestart(t *testing.T) {
	gate.Disruptive(t)
	brokers := testenv.Kafka(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	p := newPipe(ctx, t, brokers, kadm.NewClient(cl), 1, "restart", 31, 3000, scenarioPartitions, false, false)
	p.start(t)
	t.Cleanup(func() {
		if t.Failed() { // whatever happened, the broker runs again for the tests that follow
			gate.StartService(t, "kafka")
		}
	})

	p.await(t, "first stretch", p.produce(ctx, t, 0, 0), 3*time.Minute)
	for i, how := range []string{"kill-broker", "stop"} {
		stretch := 1 + 2*i
		ch := p.produce(ctx, t, stretch, 15*time.Second)
		time.Sleep(3 * time.Second)
		t0 := time.Now()
		if how == "kill-broker" {
			gate.ServiceCommand(t, "kafka", "kill-broker", "1")
		} else {
			gate.StopService(t, "kafka")
		}
		time.Sleep(5 * time.Second)
		gate.StartService(t, "kafka")
		t.Logf("broker %s and started again: %v down", map[string]string{"kill-broker": "SIGKILLed", "stop": "stopped"}[how],
			time.Since(t0).Round(time.Millisecond))
		p.await(t, "records produced while the broker was down", ch, 3*time.Minute)
		p.alive(t, "after the broker came back")
		p.await(t, "the next stretch", p.produce(ctx, t, stretch+1, 0), 3*time.Minute)
	}
	t.Logf("the processor ran its group again %v times", counter(t, p.reg, "abacus_processor_restarts_total"))
	p.check(ctx, t, true)
}
