package processors_test

import (
	"context"
	"testing"
	"time"

	"github.com/abacus-stream/abacus/topology"
	"github.com/abacus-stream/abacus/windows"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestRecordsDeletedUnreadAreCounted: while the group is stopped, records after its commit are
// deleted (DeleteRecords, as retention does to a group whose lag or outage outlasts it). The
// restarted processor goes on from the log start, as Kafka's consumers do, and says what it lost:
// an error log and abacus_processor_records_deleted_unread_total. Its windows hold what it read
// and nothing of the lost records. On kfake and the real broker only: the driver has no log to
// delete from.
func TestRecordsDeletedUnreadAreCounted(t *testing.T) {
	for _, name := range []string{"kfake", "kafka"} {
		mk, ok := runners(t)[name]
		if !ok {
			continue
		}
		t.Run(name, func(t *testing.T) {
			topoName := uniqueTopology(t, "deleted")
			b := topology.New(topoName)
			source(b, topoName+"-in").Aggregate("m", windows.Tumbling(time.Minute)).Grace(0).Count("n")
			topo := build(t, b)
			r := mk(t, topo, runnerOptions{partitions: 1, start: start, idleTimeout: 4 * time.Second}).(*kafkaRunner)
			in := topo.SourceTopics()[0]
			send(r, in, ev{Entity: "a", TS: ms(10 * time.Second)})
			const lost = 5
			r.beforeRestart = func() {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				// Produced past the runner's count: the processor never sees them.
				for i := range lost {
					rec := &kgo.Record{Topic: in, Key: []byte("a"), Value: ev{Entity: "a", TS: ms(time.Duration(20+i) * time.Second)}.json()}
					if err := r.cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
						t.Fatal(err)
					}
				}
				adm := kadm.NewClient(r.cl)
				ends, err := adm.ListEndOffsets(ctx, in)
				if err == nil {
					err = ends.Error()
				}
				if err != nil {
					t.Fatal(err)
				}
				to := kadm.Offsets{}
				ends.Each(func(o kadm.ListedOffset) {
					to.Add(kadm.Offset{Topic: in, Partition: o.Partition, At: o.Offset, LeaderEpoch: -1})
				})
				deleted, err := adm.DeleteRecords(ctx, to)
				if err == nil {
					err = deleted.Error()
				}
				if err != nil {
					t.Fatalf("delete records: %v", err)
				}
			}
			if err := r.restartWith(topo, false); err != nil {
				t.Fatalf("restart: %v", err)
			}
			if got := r.counter("abacus_processor_records_deleted_unread_total"); got != lost {
				t.Fatalf("records_deleted_unread_total = %v, want %d", got, lost)
			}
			send(r, in, ev{Entity: "a", TS: ms(30 * time.Second)})
			r.advance(10 * time.Second) // idle: the window closes
			if got := oneFinal(t, r, "m", "a", base).Float("n"); got != 2 {
				t.Fatalf("final count %v, want 2: the events read before and after the deleted ones", got)
			}
		})
	}
}
