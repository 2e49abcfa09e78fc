package processors

import (
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lovoo/goka"
	"github.com/lovoo/goka/storage"
	"github.com/prometheus/client_golang/prometheus"
)

// handover times partition moves, for operators and for the scale-out tests (docs/OPERATIONS.md
// quotes them). A partition this instance did not own before is assigned to it, its table is restored
// from the changelog, and its first source event is processed: the log line "partition taken
// over" says how long each step took and how many changelog records were restored, and
// abacus_processor_partition_takeover_seconds observes assignment to first event. The other side
// of a move, an instance giving partitions up at a rebalance or a clean stop, logs "partitions
// released" with how long that took. With both lines (they carry wall-clock times) a move can be
// timed from the revoke at the old owner to the first event at the new one.
type handover struct {
	log      *slog.Logger
	table    string
	takeover prometheus.Histogram

	mu      sync.Mutex
	owned   map[int32]bool      // the last assignment
	pending map[int32]*takeover // taken over, no source event processed yet
	waiting atomic.Int32        // len(pending), read without the lock on every event
}

type takeover struct {
	assigned  time.Time
	recovered time.Time // zero until the table is restored
	restored  int       // changelog records loaded into the table before it was restored
}

func newHandover(log *slog.Logger, reg prometheus.Registerer, topology, table string) (*handover, error) {
	h := &handover{log: log, table: table, owned: map[int32]bool{}, pending: map[int32]*takeover{},
		takeover: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "abacus", Subsystem: "processor", Name: "partition_takeover_seconds",
			ConstLabels: prometheus.Labels{"topology": topology},
			Help:        "From the assignment of a partition this instance did not own to its first source event processed (table restore included).",
			Buckets:     []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 60, 150, 300},
		})}
	if err := reg.Register(h.takeover); err != nil {
		return nil, err
	}
	return h, nil
}

// rebalanced notes the partitions of a new assignment that this instance did not own. goka calls
// it at the start of every session, before any partition is restored.
func (h *handover) rebalanced(a goka.Assignment) {
	now := time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	owned := make(map[int32]bool, len(a))
	for p := range a {
		owned[p] = true
		if !h.owned[p] {
			h.pending[p] = &takeover{assigned: now}
		}
	}
	for p := range h.pending {
		if !owned[p] {
			delete(h.pending, p) // taken away again before its first event
		}
	}
	h.owned = owned
	h.waiting.Store(int32(len(h.pending)))
}

// released logs the partitions of a session this instance gave up (all of them: sarama's
// rebalances revoke every partition, and hand the kept ones back in the next session), with how
// long giving them up took (processing stopped, writes acknowledged, offsets committed).
func (h *handover) released(parts []int32, generation int32, took time.Duration) {
	slices.Sort(parts)
	h.log.Info("partitions released", "partitions", parts, "generation", generation, "took", took)
}

// recovered notes that a partition's table is restored.
func (h *handover) recovered(part int32, restored int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if t := h.pending[part]; t != nil && t.recovered.IsZero() {
		t.recovered, t.restored = time.Now(), restored
	}
}

// processed notes a source event processed in a partition: the first after a takeover ends it.
func (h *handover) processed(part int32) {
	if h.waiting.Load() == 0 {
		return
	}
	h.mu.Lock()
	t := h.pending[part]
	if t != nil {
		delete(h.pending, part)
		h.waiting.Store(int32(len(h.pending)))
	}
	h.mu.Unlock()
	if t == nil {
		return
	}
	first := time.Since(t.assigned)
	h.takeover.Observe(first.Seconds())
	restore := time.Duration(0)
	if !t.recovered.IsZero() {
		restore = t.recovered.Sub(t.assigned)
	}
	h.log.Info("partition taken over", "partition", part, "restored_records", t.restored,
		"restore", restore, "first_event", first)
}

// observe wraps a source callback so that the first event after a takeover is timed.
func (h *handover) observe(cb goka.ProcessCallback) goka.ProcessCallback {
	return func(ctx goka.Context, msg any) {
		cb(ctx, msg)
		h.processed(ctx.Partition())
	}
}

// storage wraps a partition's table to count the changelog records restored into it: goka
// restores through Set and Delete, then calls MarkRecovered.
func (h *handover) storage(part int32, st storage.Storage) storage.Storage {
	return &countingTable{Storage: st, h: h, part: part}
}

type countingTable struct {
	storage.Storage
	h         *handover
	part      int32
	writes    atomic.Int64
	recovered atomic.Bool
}

func (t *countingTable) Set(key string, value []byte) error {
	if !t.recovered.Load() {
		t.writes.Add(1)
	}
	return t.Storage.Set(key, value)
}

func (t *countingTable) Delete(key string) error {
	if !t.recovered.Load() {
		t.writes.Add(1)
	}
	return t.Storage.Delete(key)
}

func (t *countingTable) MarkRecovered() error {
	err := t.Storage.MarkRecovered()
	if !t.recovered.Swap(true) {
		t.h.recovered(t.part, int(t.writes.Load()))
	}
	return err
}

// partitionsOf lists the partitions of a session's claims (goka's inputs are copartitioned: every
// topic lists the same ones).
func partitionsOf(claims map[string][]int32) []int32 {
	seen := map[int32]bool{}
	var out []int32
	for _, ps := range claims {
		for _, p := range ps {
			if !seen[p] {
				seen[p] = true
				out = append(out, p)
			}
		}
	}
	return out
}
