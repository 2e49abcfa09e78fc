package main

import (
	"testing"
	"time"

	"github.com/abacus-stream/abacus/abacustest"
)

// The sensors topology, tested in memory: a day of readings from two devices, the hourly and
// daily finals checked against what the readings say.
func TestSensorsDay(t *testing.T) {
	topo, err := sensors("sensors", "readings")
	if err != nil {
		t.Fatal(err)
	}
	day := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	d := abacustest.New(t, topo, abacustest.Options{Start: day})
	for m := range 24 * 60 { // one reading a minute per device, for a day
		at := day.Add(time.Duration(m) * time.Minute)
		for i, dev := range []string{"a", "b"} {
			temp := float64(m%60) + float64(10*i) // 0..59 each hour, b 10 warmer
			d.Pipe("readings", dev, Reading{Device: dev, TS: at.UnixMilli(), Temp: temp}, abacustest.At(at))
		}
		d.Advance(time.Minute)
	}
	d.Advance(3 * time.Hour) // quiet: the last windows close by the idle timeout
	for h := range 24 {
		hour := day.Add(time.Duration(h) * time.Hour)
		d.Final("device-hourly", "a", hour).Expect(t, map[string]float64{"max_temp": 59, "mean_temp": 29.5})
		d.Final("device-hourly", "b", hour).Expect(t, map[string]float64{"max_temp": 69, "mean_temp": 39.5})
	}
	d.Final("device-daily", "a", day).Expect(t, map[string]float64{"events": 24 * 60})
	if n := d.Entities(); n != 0 {
		t.Fatalf("%d entities still held after every window closed", n)
	}
}
