package sinks

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/abacus-stream/abacus/examples/devices"
	"github.com/abacus-stream/abacus/store"
	"github.com/abacus-stream/abacus/totals"
	"github.com/twmb/franz-go/pkg/kgo"
)

// BenchmarkFactsIntake measures the facts sink's own work per record between the fetch and the
// store: decoding the event with the topology's codec (examples/devices), building its cell,
// adding it to the batch, and coalescing the batch, without a broker or a store. On the two-core
// test machine this is CPU the sink takes from the region servers beside it.
func BenchmarkFactsIntake(b *testing.B) {
	topo, err := devices.Topology()
	if err != nil {
		b.Fatal(err)
	}
	enc := &FactsEncoder{Table: "facts", Family: "d", SaltBuckets: 16, MaxFutureSkew: topo.MaxFutureSkew(), Extract: FactsOf(topo)}
	s, err := NewFlushThenCommit(Config{Brokers: []string{"127.0.0.1:1"}, Group: "bench", Topics: []string{devices.Topic}, DeadLetterTopic: "dlq"}, enc, nopWriter{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.cl.Close()
	const batch = 10_000
	base := time.Now().Add(-time.Hour)
	recs := make([]*kgo.Record, batch)
	for i := range recs {
		dev := fmt.Sprintf("device-%04d", i%1000)
		ts := base.Add(time.Duration(i) * 10 * time.Millisecond)
		recs[i] = &kgo.Record{Topic: devices.Topic, Partition: int32(i % 12), Offset: int64(i), Key: []byte(dev), Timestamp: ts,
			Value: fmt.Appendf(nil, `{"device":"%s","ts":%d,"temp":%d.%d,"humidity":48.5,"kind":"reading","sensor":"s%d"}`,
				dev, ts.UnixMilli(), 15+i%20, i%10, i%3)}
	}
	b.ReportAllocs()
	for b.Loop() {
		for _, r := range recs {
			s.add(r)
		}
		if n := len(s.building.cells); n != batch {
			b.Fatalf("%d cells from %d records", n, batch)
		}
		s.take()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/record")
}

// nopWriter is a store that is never written to.
type nopWriter struct{}

func (nopWriter) Write(context.Context, []store.Cell) ([]store.CellError, error) { return nil, nil }

// BenchmarkAggregatesIntake is BenchmarkFactsIntake for the aggregates sink: totals records of the
// devices' minute set (count, mean and max temperature; five cells with the meta cell), with the
// key index on.
func BenchmarkAggregatesIntake(b *testing.B) {
	enc := &AggregatesEncoder{Table: "agg", Family: "d", SaltBuckets: 16, KeyIndex: "agg_keys"}
	s, err := NewFlushThenCommit(Config{Brokers: []string{"127.0.0.1:1"}, Group: "bench", Topics: []string{"totals"}, DeadLetterTopic: "dlq"}, enc, nopWriter{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.cl.Close()
	const batch = 10_000
	recs := make([]*kgo.Record, batch)
	for i := range recs {
		start := int64(1_796_000_000_000 + (i/1000)*60_000)
		r := totals.Record{Topology: "devices", Set: "minute", Entity: fmt.Sprintf("device-%04d", i%1000), Start: start, End: start + 60_000,
			Final: i%3 == 0, Revision: uint64(i), Values: []totals.Value{
				{Name: "count", Kind: totals.KindInt, Int: int64(i % 50)},
				{Name: "mean_temp", Kind: totals.KindFloat, Float: 17.5},
				{Name: "max_temp", Kind: totals.KindFloat, Float: 21.25},
				{Name: "sensors", Kind: totals.KindInt, Int: 3},
			}}
		recs[i] = &kgo.Record{Topic: "totals", Partition: int32(i % 12), Offset: int64(i), Key: []byte(r.Entity), Value: r.Encode()}
	}
	b.ReportAllocs()
	for b.Loop() {
		for _, r := range recs {
			s.add(r)
		}
		enc.batchLanded(s.take().cells)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/record")
}
