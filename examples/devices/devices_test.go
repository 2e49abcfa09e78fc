package devices_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/abacus-stream/abacus/abacustest"
	"github.com/abacus-stream/abacus/deadletter"
	"github.com/abacus-stream/abacus/examples/devices"
	"github.com/abacus-stream/abacus/topology"
)

// A test of the devices topology that runs in memory: no Kafka, no HBase, no sleeping. Copy it
// to test a topology of your own.

var t0 = time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)

func reading(dev string, at time.Duration, temp float64, kind string) devices.Reading {
	return devices.Reading{Device: dev, Sensor: "s1", Time: t0.Add(at).UnixMilli(), Temp: temp, Humidity: 40, Kind: kind}
}

func newDriver(t *testing.T) *abacustest.Driver {
	topo, err := devices.Topology()
	if err != nil {
		t.Fatal(err)
	}
	// The wall clock starts with the stream: the processor judges idleness and early firings by it.
	return abacustest.New(t, topo, abacustest.Options{Start: t0})
}

func TestMinuteWindow(t *testing.T) {
	d := newDriver(t)
	d.Pipe(devices.Topic, "dev-1", reading("dev-1", 5*time.Second, 20, "reading"))
	d.Pipe(devices.Topic, "dev-1", reading("dev-1", 30*time.Second, 24, "reading"))
	d.Pipe(devices.Topic, "dev-1", reading("dev-1", 75*time.Second, 21, "reading")) // the next minute
	d.Advance(3 * time.Minute)                                                      // the device goes quiet: after the idle timeout stream time follows the clock

	d.Final("minute", "dev-1", t0).Expect(t, map[string]float64{"count": 2, "mean_temp": 22, "max_temp": 24})
	d.Final("minute", "dev-1", t0.Add(time.Minute)).Expect(t, map[string]float64{"count": 1})
}

func TestEarlyFiringsThenOneFinal(t *testing.T) {
	d := newDriver(t)
	for i := range 12 { // one reading a second
		d.Pipe(devices.Topic, "dev-2", reading("dev-2", time.Duration(i)*time.Second, float64(i), "reading"))
		d.Advance(time.Second)
	}
	var early int
	for _, tot := range d.Totals() {
		if tot.Set == "minute" && tot.Entity == "dev-2" && !tot.Final {
			early++
		}
	}
	if early < 2 {
		t.Fatalf("%d early firings in 12 s at one every 5 s", early)
	}
	d.Advance(2 * time.Minute)
	if got := len(d.FinalsOf("minute", "dev-2")); got != 1 {
		t.Fatalf("%d finals for one window", got)
	}
	d.Final("minute", "dev-2", t0).Expect(t, map[string]float64{"count": 12, "max_temp": 11})
}

func TestLateAndBadReadings(t *testing.T) {
	d := newDriver(t)
	d.Pipe(devices.Topic, "dev-3", reading("dev-3", 2*time.Minute, 20, "reading"))
	d.Pipe(devices.Topic, "dev-3", reading("dev-3", 5*time.Second, 99, "reading")) // past the 10 s grace of its minute
	d.Send(devices.Topic, "dev-3", []byte(`{"device":`))                           // undecodable
	d.Advance(5 * time.Minute)

	if got := d.Final("minute", "dev-3", t0.Add(2*time.Minute)).Float("max_temp"); got != 20 {
		t.Fatalf("max %v: the late reading must not count", got)
	}
	dls := d.DeadLetters()
	if len(dls) != 1 || dls[0].Reason != deadletter.Undecodable {
		t.Fatalf("dead letters %+v", dls)
	}
}

func TestRestartLosingLocalState(t *testing.T) {
	d := newDriver(t)
	d.Pipe(devices.Topic, "dev-4", reading("dev-4", time.Second, 20, "reading"))
	d.Restart(true)                  // local tables lost: state comes back from the changelog
	d.Redeliver(devices.Topic, 0, 0) // records replayed: they do not count twice
	d.Redeliver(devices.Topic, 1, 0)
	d.Redeliver(devices.Topic, 2, 0)
	d.Redeliver(devices.Topic, 3, 0)
	d.Pipe(devices.Topic, "dev-4", reading("dev-4", 2*time.Second, 30, "reading"))
	d.Advance(2 * time.Minute)
	d.Final("minute", "dev-4", t0).Expect(t, map[string]float64{"count": 2, "max_temp": 30})
}

// TestRollupSets: the topology declares the region and fleet rollups the dashboards chart, with
// the dimension that becomes their tag key, and RegionOf places devices deterministically and
// across every region. (What the rollups total is the engine's to test; this example only
// declares them.)
func TestRollupSets(t *testing.T) {
	topo, err := devices.Topology()
	if err != nil {
		t.Fatal(err)
	}
	for name, dim := range map[string]string{"region-minute": "region", "fleet-minute": "", "minute": topology.EntityDimension} {
		info, ok := topo.Set(name)
		if !ok || info.Dimension != dim || info.Rollup != (name != "minute") || info.Window.String() != "tumbling 1m0s" {
			t.Fatalf("set %s: %+v, want dimension %q", name, info, dim)
		}
	}
	seen := map[string]int{}
	for i := range 40 {
		dev := fmt.Sprintf("device-%03d", i)
		r := devices.RegionOf(dev)
		if r != devices.RegionOf(dev) || !slices.Contains(devices.Regions, r) {
			t.Fatalf("RegionOf(%s) = %q: not one stable region of %v", dev, r, devices.Regions)
		}
		seen[r]++
	}
	if len(seen) != len(devices.Regions) {
		t.Fatalf("40 devices fall in %d regions (%v): some region is never used", len(seen), seen)
	}
}

// TestRegionFromRegistry: a reading counts in the region the registry gave its device at the
// reading's time: before and after a move, in any order of arrival, and Unknown for a device the
// registry did not know yet.
func TestRegionFromRegistry(t *testing.T) {
	d := newDriver(t)
	d.PutTable("devices", "dev-5", devices.Device{Region: "eu-west", Since: t0.UnixMilli()}, t0)
	d.PutTable("devices", "dev-5", devices.Device{Region: "us-east", Since: t0.Add(time.Minute).UnixMilli()}, t0.Add(time.Minute))
	d.Pipe(devices.Topic, "dev-5", reading("dev-5", 65*time.Second, 20, "reading")) // us-east
	d.Pipe(devices.Topic, "dev-5", reading("dev-5", 50*time.Second, 22, "reading")) // eu-west: before the move
	d.Pipe(devices.Topic, "dev-6", reading("dev-6", 55*time.Second, 25, "reading")) // not registered
	d.Advance(3 * time.Minute)

	d.Final("region-minute", "eu-west", t0).Expect(t, map[string]float64{"count": 1, "max_temp": 22})
	d.Final("region-minute", "us-east", t0.Add(time.Minute)).Expect(t, map[string]float64{"count": 1, "max_temp": 20})
	d.Final("region-minute", devices.Unknown, t0).Expect(t, map[string]float64{"count": 1, "max_temp": 25})
}
