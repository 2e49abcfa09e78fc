// Package devices is the example topology that `abacus demo` runs: devices send readings with
// event times; abacus keeps per-device windows of them, and totals them per region, the region
// being what a device registry (a table) said at the reading's time. It also holds the demo's
// generator of such readings, with some late and some duplicated, as real device fleets send
// them, and of the registry, with devices that move.
//
// Copy it to start a topology of your own: see the README's tour.
package devices

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"time"

	"github.com/abacus-stream/abacus/topology"
	"github.com/abacus-stream/abacus/windows"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Topic is where readings arrive.
const Topic = "device-readings"

// RegistryTopic is the device registry: one record per change of a device, keyed by its id, its
// value a Device.
const RegistryTopic = "device-registry"

// Device is what the registry knows of a device: where it is, from when.
type Device struct {
	Region string `json:"region"`
	Since  int64  `json:"since"` // ms since the epoch: from when this record holds
}

// Unknown is the region of a reading whose device the registry did not know at its time.
const Unknown = "unknown"

// Reading is one measurement a device sends.
type Reading struct {
	Device   string  `json:"device"`
	Sensor   string  `json:"sensor"`
	Time     int64   `json:"ts"` // event time, ms since the epoch, from the device's clock
	Temp     float64 `json:"temp"`
	Humidity float64 `json:"humidity"`
	Kind     string  `json:"kind"` // "reading" or "alarm"
	// Region is not sent by devices: the join with the registry fills it in.
	Region string `json:"-"`
}

// Topology declares what abacus computes over the readings:
//   - per-device 1-minute windows (10 s grace) of count, mean/max temperature, temperature quantiles
//     and distinct sensors, with early firings every 5 s so dashboards see open windows move;
//   - per-device hourly windows of count and max humidity;
//   - per-device 10-minute windows sliding every minute of alarms only;
//   - per-region 1-minute windows (the rollup "region-minute", keyed by the region the registry
//     gave the device at the reading's time, Unknown if none) and fleet-wide
//     1-minute windows (the global rollup "fleet-minute") of count and mean/max temperature, one
//     final each, for the dashboards' region and fleet panels.
func Topology() (*topology.Topology, error) {
	b := topology.New("devices")
	src := topology.NewSource(b, Topic, topology.JSON[Reading](),
		func(r Reading) string { return r.Device },
		func(r Reading) time.Time { return time.UnixMilli(r.Time) }).
		EventType(func(r Reading) string { return r.Kind })
	// The registry, joined by event time: a reading counts in the region its device was in when
	// it was taken, whenever it arrives and however often it is replayed.
	registry := topology.NewTable[Device](b, "devices", RegistryTopic, topology.JSON[Device]()).
		ValueTime(func(d Device) time.Time { return time.UnixMilli(d.Since) })
	topology.Join(src, registry, func(r Reading) string { return r.Device }, func(r Reading, d Device, found bool) (Reading, error) {
		r.Region = Unknown
		if found {
			r.Region = d.Region
		}
		return r, nil
	})
	minute := src.Aggregate("minute", windows.Tumbling(time.Minute)).Grace(10*time.Second).
		Emit(topology.EarlyEvery(5*time.Second)).
		Count("count").Mean("mean_temp", "Temp").Max("max_temp", "Temp").
		Quantiles("temp_quantiles", "Temp", 0.5, 0.95, 0.99).Distinct("sensors", "Sensor")
	// A week of one device by 10 minutes is 1,008 rows of this set, not 10,080 minutes: the
	// OpenTSDB API reads it for the minute set's panels that sum counts or take maxima by 10
	// minutes or more, and they answer the same.
	minute.Coarser("minute-10m", 10*time.Minute, "count", "max_temp")
	src.Aggregate("hour", windows.Tumbling(time.Hour)).Grace(time.Minute).
		Emit(topology.EarlyEvery(10*time.Second)).
		Count("count").Max("max_humidity", "Humidity")
	src.Aggregate("alarms-10m", windows.Hopping(10*time.Minute, time.Minute)).Grace(30 * time.Second).
		Types("alarm").Emit(topology.EarlyEvery(10 * time.Second)).
		Count("alarms")
	// Rollups total the same readings across devices. They emit only finals: an early firing of a
	// key that takes many devices' readings would be a message per partition per firing for little
	// a dashboard needs.
	src.Aggregate("region-minute", windows.Tumbling(time.Minute)).Grace(10*time.Second).
		By("region", func(r Reading) string { return r.Region }).Emit(topology.FinalOnly()).
		Count("count").Mean("mean_temp", "Temp").Max("max_temp", "Temp")
	src.Aggregate("fleet-minute", windows.Tumbling(time.Minute)).Grace(10*time.Second).
		Global().Emit(topology.FinalOnly()).
		Count("count").Mean("mean_temp", "Temp").Max("max_temp", "Temp")
	return b.Build()
}

// Regions are the regions the generator places devices in.
var Regions = []string{"eu-west", "eu-north", "us-east", "ap-south"}

// RegionOf is where the generator first registers a device: one of Regions by an FNV-1a hash of
// its id, spread evenly over the regions whatever the ids look like. The topology does not use
// it: it reads the registry.
func RegionOf(device string) string {
	h := fnv.New32a()
	_, _ = h.Write([]byte(device))
	return Regions[h.Sum32()%uint32(len(Regions))]
}

// Generator produces readings for a fleet of devices at a steady rate. Event times trail the wall
// clock by up to Jitter; LatePercent of readings arrive minutes late (past every grace period) and
// DuplicatePercent are sent twice, as an at-least-once device would.
//
// With History set, Run first produces that much of the past at full speed, then goes on live, so
// that a dashboard opened at once shows real curves rather than one or two windows.
type Generator struct {
	Devices          int
	PerSecond        int
	Jitter           time.Duration
	LatePercent      int
	DuplicatePercent int
	Seed             uint64
	// History is how much of the past to produce before going live (0: none). Its readings are
	// produced in event-time order, a tick of 100 ms at a time as the live generator would have, so
	// the processor's stream time advances through them as it would have live and drops only the
	// readings meant to be late.
	History time.Duration
	// MoveEvery, if set, moves one device to another region every MoveEvery of event time: a
	// record of RegistryTopic, produced before the readings that follow it.
	MoveEvery time.Duration
}

// registry places the generator's devices: each registered in RegionOf an hour before the first
// reading, then moved now and then (Generator.MoveEvery), by a random source of its own so that
// the readings do not depend on the moves.
type registry struct {
	g        Generator
	rng      *rand.Rand
	at       map[int]string
	nextMove time.Time
}

func newRegistry(g Generator, start time.Time) (*registry, []*kgo.Record, error) {
	r := &registry{g: g, rng: rand.New(rand.NewPCG(g.Seed^0x5eed, 3)), at: map[int]string{}, nextMove: start.Add(g.MoveEvery)}
	var recs []*kgo.Record
	for d := range max(1, g.Devices) {
		rec, err := r.place(d, RegionOf(deviceName(d)), start.Add(-time.Hour))
		if err != nil {
			return nil, nil, err
		}
		recs = append(recs, rec)
	}
	return r, recs, nil
}

// place records that device d is in region from since on.
func (r *registry) place(d int, region string, since time.Time) (*kgo.Record, error) {
	r.at[d] = region
	v, err := json.Marshal(Device{Region: region, Since: since.UnixMilli()})
	if err != nil {
		return nil, fmt.Errorf("encode device: %w", err)
	}
	return &kgo.Record{Topic: RegistryTopic, Key: []byte(deviceName(d)), Value: v, Timestamp: since}, nil
}

// moves are the registry records due by now: a device moved to another region.
func (r *registry) moves(now time.Time) ([]*kgo.Record, error) {
	var recs []*kgo.Record
	for r.g.MoveEvery > 0 && !now.Before(r.nextMove) {
		d := r.rng.IntN(max(1, r.g.Devices))
		to := Regions[r.rng.IntN(len(Regions))]
		for to == r.at[d] {
			to = Regions[r.rng.IntN(len(Regions))]
		}
		rec, err := r.place(d, to, r.nextMove)
		if err != nil {
			return nil, err
		}
		recs = append(recs, rec)
		r.nextMove = r.nextMove.Add(r.g.MoveEvery)
	}
	return recs, nil
}

func deviceName(d int) string { return fmt.Sprintf("device-%03d", d) }

// tick is the generator's step: live, one batch every tick of wall-clock time; in history, one
// batch every tick of event time.
const tick = 100 * time.Millisecond

// historyBatch is how many history records go out in one produce call: large enough to move an
// hour of history in seconds, small enough to keep the client's buffers modest.
const historyBatch = 5000

// Run produces until ctx ends, through cl (which must partition keys as goka does: see
// franz.Partitioner, in partitioner/franz), and returns how many reading records it produced. The
// registry's records go first: every device registered before its first reading, and each move
// before the readings after it.
func (g Generator) Run(ctx context.Context, cl *kgo.Client) (int, error) {
	rng := rand.New(rand.NewPCG(g.Seed, g.Seed+1))
	n := 0
	reg, first, err := newRegistry(g, time.Now().Add(-g.History))
	if err != nil {
		return 0, err
	}
	register := func(recs []*kgo.Record) error {
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("produce the device registry: %w", err)
		}
		return nil
	}
	if err := register(first); err != nil {
		return 0, ignoreCancel(err)
	}
	produce := func(recs []*kgo.Record) error {
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("produce readings: %w", err)
		}
		n += len(recs)
		return nil
	}
	if g.History > 0 {
		now := time.Now()
		var recs []*kgo.Record
		for t := now.Add(-g.History); t.Before(now); t = t.Add(tick) {
			moves, err := reg.moves(t)
			if err != nil {
				return n, err
			}
			if len(moves) > 0 {
				// The readings before the move first, then the move, then those after it.
				if len(recs) > 0 {
					if err := produce(recs); err != nil {
						return n, ignoreCancel(err)
					}
					recs = recs[:0]
				}
				if err := register(moves); err != nil {
					return n, ignoreCancel(err)
				}
			}
			if recs, err = g.batch(rng, t, recs); err != nil {
				return n, err
			}
			if len(recs) >= historyBatch {
				if err := produce(recs); err != nil {
					return n, ignoreCancel(err)
				}
				recs = recs[:0]
			}
		}
		if len(recs) > 0 {
			if err := produce(recs); err != nil {
				return n, ignoreCancel(err)
			}
		}
	}
	ticker := time.NewTicker(tick)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return n, nil
		case <-ticker.C:
		}
		now := time.Now()
		moves, err := reg.moves(now)
		if err != nil {
			return n, err
		}
		if len(moves) > 0 {
			if err := register(moves); err != nil {
				return n, ignoreCancel(err)
			}
		}
		recs, err := g.batch(rng, now, nil)
		if err != nil {
			return n, err
		}
		if err := produce(recs); err != nil {
			return n, ignoreCancel(err)
		}
	}
}

func ignoreCancel(err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return nil
	}
	return err
}

// batch appends one tick's readings, as of now, to recs.
func (g Generator) batch(rng *rand.Rand, now time.Time, recs []*kgo.Record) ([]*kgo.Record, error) {
	perTick := max(1, g.PerSecond/10)
	for range perTick {
		d := rng.IntN(max(1, g.Devices))
		ts := now.Add(-time.Duration(rng.Int64N(int64(max(g.Jitter, time.Millisecond)))))
		if rng.IntN(100) < g.LatePercent {
			ts = ts.Add(-3 * time.Minute)
		}
		kind := "reading"
		if rng.IntN(100) < 5 {
			kind = "alarm"
		}
		// Each device has its own climate, with a slow daily-ish wave and noise.
		base := 18 + float64(d%7)*2.5
		wave := 3 * math.Sin(float64(now.UnixMilli())/600_000+float64(d))
		r := Reading{
			Device:   deviceName(d),
			Sensor:   fmt.Sprintf("s%d", rng.IntN(3)),
			Time:     ts.UnixMilli(),
			Temp:     math.Round((base+wave+rng.NormFloat64()*0.7)*100) / 100,
			Humidity: math.Round((45+float64(d%5)*5+rng.NormFloat64()*3)*10) / 10,
			Kind:     kind,
		}
		v, err := json.Marshal(r)
		if err != nil {
			return recs, fmt.Errorf("encode reading: %w", err)
		}
		rec := &kgo.Record{Topic: Topic, Key: []byte(r.Device), Value: v}
		recs = append(recs, rec)
		if rng.IntN(100) < g.DuplicatePercent {
			recs = append(recs, &kgo.Record{Topic: Topic, Key: rec.Key, Value: v})
		}
	}
	return recs, nil
}
