package devices_test

import (
	"testing"
	"time"

	"github.com/abacus-stream/abacus/abacustest"
	"github.com/abacus-stream/abacus/deadletter"
	"github.com/abacus-stream/abacus/examples/devices"
)

// The README's "Test your topology" example, word for word: it must keep passing.
func TestMinute(t *testing.T) {
	topo, err := devices.Topology()
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	d := abacustest.New(t, topo, abacustest.Options{Start: t0}) // the wall clock starts with the stream
	at := func(s int) int64 { return t0.Add(time.Duration(s) * time.Second).UnixMilli() }

	d.Pipe(devices.Topic, "dev-1", devices.Reading{Device: "dev-1", Time: at(5), Temp: 20, Kind: "reading"})
	d.Pipe(devices.Topic, "dev-1", devices.Reading{Device: "dev-1", Time: at(30), Temp: 24, Kind: "reading"})
	d.Send(devices.Topic, "dev-1", []byte(`{"device":`)) // raw bytes: undecodable
	d.Advance(3 * time.Minute)                           // quiet: windows close by the idle timeout

	d.Final("minute", "dev-1", t0).Expect(t, map[string]float64{"count": 2, "max_temp": 24})
	if dl := d.DeadLetters(); len(dl) != 1 || dl[0].Reason != deadletter.Undecodable {
		t.Fatalf("dead letters: %+v", dl)
	}
}
