package tables

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/abacus-stream/abacus/internal/kafkaread"
	"github.com/abacus-stream/abacus/internal/plan"
)

// Config is what reading a topology's tables needs.
type Config struct {
	// Group is the processor group: its versions topics (plan.VersionsTopic) keep the versions
	// the group read. They must exist (the processor creates them with its other topics).
	Group string
	// Client are the franz-go options of the readers' clients: the seed brokers, security.
	Client []kgo.Opt
	// Metrics receive the tables' metrics (NewMetrics); nil: none are kept.
	Metrics *Metrics
	// Logger receives the readers' logs.
	Logger *slog.Logger
	// PruneEvery is how often superseded versions are looked for (default a minute).
	PruneEvery time.Duration
	// Freshness is how often, while events look the table up, its topic's end offsets are
	// asked for (default DefaultFreshness): an event waits for an answer asked after its record's
	// timestamp, so that whatever was written to the table before the event was is read first.
	Freshness time.Duration
}

// DefaultFreshness is the default Config.Freshness: at most this much latency added to an event
// whose table has nothing newer than it (a registry that changes seldom), never to throughput.
const DefaultFreshness = 20 * time.Millisecond

// partition is what a reader knows of one partition of its table's topic.
type partition struct {
	next    int64 // the offset of the next record to apply
	hwm     int64 // the high watermark of the latest fetch (or the end offset at Open)
	newest  int64 // the latest value time applied from it
	applied bool  // a record of it was applied: newest means something
}

// Reader reads one table: first the versions its group kept, then its topic from where those
// end, into a Versions store; and it says when the store can answer for an event time (Wait).
type Reader struct {
	def      *plan.Table
	versions string // the versions topic
	cfg      Config
	log      *slog.Logger
	cl       *kgo.Client
	store    *Versions
	// nsaved is the versions topic's partition count: the versions read from partition p of
	// the table's topic go to its partition p % nsaved, in the order they were read.
	nsaved  int32
	metrics tableMetrics

	mu      sync.Mutex
	parts   []*partition  // by partition id (a topic's partitions are 0 to n-1)
	changed chan struct{} // closed, and replaced, at every apply
	// looked is the latest event time the table answered for (At): a version at or before it,
	// read after, came too late for that event.
	looked atomic.Int64
	// observed is when the latest listing of the topic's end offsets was asked for (under mu):
	// every record written before then is below the hwm it set.
	observed time.Time
	// active says an event looked the table up since the watch's last tick: the end offsets are
	// listed only while events come.
	active atomic.Bool

	stop    context.CancelFunc
	running sync.WaitGroup
}

// Open reads the table as far as its topic went when Open was called, then keeps reading it in
// the background until Close.
func Open(ctx context.Context, def *plan.Table, cfg Config) (*Reader, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.PruneEvery <= 0 {
		cfg.PruneEvery = time.Minute
	}
	if cfg.Freshness <= 0 {
		cfg.Freshness = DefaultFreshness
	}
	r := &Reader{def: def, versions: plan.VersionsTopic(cfg.Group, def.Name), cfg: cfg, store: NewVersions(),
		log: cfg.Logger.With("table", def.Name, "topic", def.Topic), changed: make(chan struct{}),
		metrics: cfg.Metrics.of(def.Name)}
	r.looked.Store(minTime)
	adm, err := kgo.NewClient(cfg.Client...)
	if err != nil {
		return nil, fmt.Errorf("table %q: kafka client: %w", def.Name, err)
	}
	defer adm.Close()
	asked := time.Now() // every record written before this is below the end offsets listed now
	ends, starts, err := r.offsets(ctx, kadm.NewClient(adm))
	if err != nil {
		return nil, err
	}
	resume, err := r.readVersions(ctx, kadm.NewClient(adm))
	if err != nil {
		return nil, err
	}
	from := map[int32]kgo.Offset{}
	r.parts = make([]*partition, len(ends))
	for p, end := range ends {
		if p < 0 || int(p) >= len(ends) {
			return nil, fmt.Errorf("table %q: its topic %s lists partition %d of %d", def.Name, def.Topic, p, len(ends))
		}
		next := max(resume[p], starts[p])
		r.parts[p] = &partition{next: next, hwm: end}
		from[p] = kgo.NewOffset().At(next)
	}
	opts := append([]kgo.Opt{kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{def.Topic: from}),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.KeepControlRecords(), kgo.FetchMaxWait(time.Second),
		// Versions go to the partition their table partition maps to, in the order they were
		// read (readVersions resumes after the last one it finds of each table partition: an
		// idempotent producer keeps one partition's records in order, so none before it is
		// missing, even after a crash in the middle of a write).
		kgo.RecordPartitioner(kgo.ManualPartitioner())}, cfg.Client...)
	if r.cl, err = kgo.NewClient(opts...); err != nil {
		return nil, fmt.Errorf("table %q: kafka client: %w", def.Name, err)
	}
	rctx, stop := context.WithCancel(context.Background())
	r.stop = stop
	r.observed = asked
	r.running.Add(2)
	go r.run(rctx)
	go r.watch(rctx)
	r.log.Info("table reading its topic", "versions_kept", r.store.Len(), "partitions", len(ends))
	for !r.caughtUp(ends) {
		select {
		case <-ctx.Done():
			r.Close()
			return nil, fmt.Errorf("table %q: stopped while reading %s: %w", def.Name, def.Topic, ctx.Err())
		case <-r.changedCh():
		case <-time.After(100 * time.Millisecond):
		}
	}
	r.log.Info("table read", "versions", r.store.Len())
	return r, nil
}

// offsets are the end and start offsets of the table's topic, by partition.
func (r *Reader) offsets(ctx context.Context, adm *kadm.Client) (ends, starts map[int32]int64, err error) {
	ends, starts = map[int32]int64{}, map[int32]int64{}
	le, err := adm.ListEndOffsets(ctx, r.def.Topic)
	if err == nil {
		err = le.Error()
	}
	if err != nil {
		return nil, nil, fmt.Errorf("table %q: end offsets of its topic %s: %w", r.def.Name, r.def.Topic, err)
	}
	ls, err := adm.ListStartOffsets(ctx, r.def.Topic)
	if err == nil {
		err = ls.Error()
	}
	if err != nil {
		return nil, nil, fmt.Errorf("table %q: start offsets of its topic %s: %w", r.def.Name, r.def.Topic, err)
	}
	le.Each(func(o kadm.ListedOffset) { ends[o.Partition] = o.Offset })
	ls.Each(func(o kadm.ListedOffset) { starts[o.Partition] = o.Offset })
	if len(ends) == 0 {
		return nil, nil, fmt.Errorf("table %q: its topic %s does not exist: create it before starting the processor", r.def.Name, r.def.Topic)
	}
	vs, err := adm.ListEndOffsets(ctx, r.versions)
	if err == nil {
		err = vs.Error()
	}
	if err != nil {
		return nil, nil, fmt.Errorf("table %q: versions topic %s: %w", r.def.Name, r.versions, err)
	}
	r.nsaved = int32(len(vs.KOffsets()[r.versions]))
	if r.nsaved == 0 {
		return nil, nil, fmt.Errorf("table %q: versions topic %s does not exist", r.def.Name, r.versions)
	}
	return ends, starts, nil
}

// readVersions loads the versions the group kept and returns, per partition of the table's
// topic, the offset after the last one they came from.
func (r *Reader) readVersions(ctx context.Context, _ *kadm.Client) (map[int32]int64, error) {
	kept := map[string]saved{}
	err := kafkaread.All(ctx, nil, r.versions, func(rec *kgo.Record) {
		if rec.Value == nil {
			delete(kept, string(rec.Key))
			return
		}
		s, err := decodeSaved(rec.Value)
		if err != nil {
			r.log.Error("versions topic holds a record abacus cannot read: skipped", "offset", rec.Offset, "partition", rec.Partition, "err", err)
			return
		}
		kept[string(rec.Key)] = s
	}, r.cfg.Client...)
	if err != nil {
		return nil, fmt.Errorf("table %q: read versions topic %s: %w", r.def.Name, r.versions, err)
	}
	resume := map[int32]int64{}
	for k, s := range kept {
		key, from, err := decodeVersionKey([]byte(k))
		if err != nil {
			r.log.Error("versions topic holds a key abacus cannot read: skipped", "err", err)
			continue
		}
		resume[s.partition] = max(resume[s.partition], s.offset+1)
		var v any
		if !s.deleted {
			if v, err = r.decode(s.value); err != nil {
				r.metrics.undecoded.Inc()
				continue
			}
		}
		r.store.Put(key, from, v, s.deleted, s.partition)
	}
	r.metrics.versions.Set(float64(r.store.Len()))
	return resume, nil
}

// decode runs the table's codec, a panic of it being an error.
func (r *Reader) decode(b []byte) (v any, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("codec panicked: %v", p)
		}
	}()
	return r.def.Decode(b)
}

// valueTime is when a record's value is valid from: its value's time, or its timestamp.
func (r *Reader) valueTime(rec *kgo.Record, v any) (t int64, err error) {
	if r.def.ValueTime == nil || v == nil {
		return rec.Timestamp.UnixMilli(), nil
	}
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("value time panicked: %v", p)
		}
	}()
	return r.def.ValueTime(v), nil
}

// part is partition p's state, nil for a partition the topic did not have at Open (one added
// since is not read: the processor reads it at its next start).
func (r *Reader) part(p int32) *partition {
	if p < 0 || int(p) >= len(r.parts) {
		return nil
	}
	return r.parts[p]
}

// noteLag sets the lag gauge; r.mu is held.
func (r *Reader) noteLag() {
	var n int64
	for _, st := range r.parts {
		n += max(st.hwm-st.next, 0)
	}
	r.metrics.lag.Set(float64(n))
}

func (r *Reader) changedCh() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.changed
}

// caughtUp reports whether every partition was read up to the given offsets.
func (r *Reader) caughtUp(ends map[int32]int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for p, end := range ends {
		if r.part(p).next < end {
			return false
		}
	}
	return true
}

// run reads the table's topic until ctx ends: each fetch's versions are written to the versions
// topic first, then applied, so that nothing an event saw is missing after a restart.
func (r *Reader) run(ctx context.Context) {
	defer r.running.Done()
	prune := time.NewTicker(r.cfg.PruneEvery)
	defer prune.Stop()
	for {
		select {
		case <-prune.C:
			r.prune(ctx)
		default:
		}
		fs := r.cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return
		}
		fs.EachError(func(_ string, p int32, err error) {
			r.log.Warn("reading the table's topic", "partition", p, "err", err)
		})
		var recs []*kgo.Record
		r.mu.Lock()
		fs.EachPartition(func(fp kgo.FetchTopicPartition) {
			if st := r.part(fp.Partition); st != nil {
				// Known before the records are applied: an event waits for them meanwhile.
				st.hwm = max(st.hwm, fp.HighWatermark)
			}
			recs = append(recs, fp.Records...)
		})
		r.mu.Unlock()
		if len(recs) == 0 {
			continue
		}
		type update struct {
			rec     *kgo.Record
			from    int64
			value   any
			deleted bool
			skip    bool
		}
		ups := make([]update, len(recs))
		var out []*kgo.Record
		for i, rec := range recs {
			u := update{rec: rec, deleted: rec.Value == nil}
			var err error
			switch {
			case rec.Attrs.IsControl() || rec.Key == nil:
				u.skip = true // a transaction marker, or a record no key can look up
			case !u.deleted:
				if u.value, err = r.decode(rec.Value); err == nil {
					u.from, err = r.valueTime(rec, u.value)
				}
			default:
				u.from = rec.Timestamp.UnixMilli()
			}
			if err != nil {
				r.metrics.undecoded.Inc()
				r.log.Warn("table record undecodable: the key's version before stays in force", "partition", rec.Partition, "offset", rec.Offset, "err", err)
				u.skip = true
			}
			ups[i] = u
			if !u.skip {
				out = append(out, &kgo.Record{Topic: r.versions, Partition: rec.Partition % r.nsaved,
					Key: versionKey(string(rec.Key), u.from), Value: encodeSaved(saved{partition: rec.Partition, offset: rec.Offset, deleted: u.deleted, value: rec.Value})})
			}
		}
		if !r.save(ctx, out) {
			return
		}
		looked := r.looked.Load()
		r.mu.Lock()
		for _, u := range ups {
			st := r.part(u.rec.Partition)
			if st == nil {
				continue
			}
			st.next = max(st.next, u.rec.Offset+1)
			if u.skip {
				continue
			}
			r.store.Put(string(u.rec.Key), u.from, u.value, u.deleted, u.rec.Partition)
			r.metrics.updates.Inc()
			if u.from <= looked {
				r.metrics.late.Inc()
				r.log.Warn("table version read after an event at or past its time looked the table up: that event saw the version before",
					"key", string(u.rec.Key), "valid_from", time.UnixMilli(u.from).UTC(), "partition", u.rec.Partition, "offset", u.rec.Offset)
			}
			if !st.applied || u.from > st.newest {
				st.newest, st.applied = u.from, true
			}
		}
		r.noteLag()
		close(r.changed)
		r.changed = make(chan struct{})
		r.mu.Unlock()
		r.metrics.versions.Set(float64(r.store.Len()))
	}
}

// save writes versions to the versions topic, retrying until Kafka takes them or ctx ends (false).
// A version Kafka refuses for good (larger than the topic takes) is counted and left out.
func (r *Reader) save(ctx context.Context, recs []*kgo.Record) bool {
	backoff := 100 * time.Millisecond
	for len(recs) > 0 {
		res := r.cl.ProduceSync(ctx, recs...)
		var again []*kgo.Record
		for _, pr := range res {
			switch {
			case pr.Err == nil:
			case errors.Is(pr.Err, kerr.MessageTooLarge) || errors.Is(pr.Err, kerr.RecordListTooLarge):
				r.metrics.unsaved.Inc()
				r.log.Error("versions topic refused a version as too large: kept in memory only", "err", pr.Err)
			default:
				again = append(again, pr.Record)
			}
		}
		if ctx.Err() != nil {
			return false
		}
		if len(again) > 0 {
			r.log.Warn("writing table versions failed; trying again", "records", len(again), "err", res.FirstErr(), "retry_in", backoff)
			select {
			case <-ctx.Done():
				return false
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 5*time.Second)
		}
		recs = again
	}
	return true
}

// prune drops the versions older than the table's History (Versions.Prune) and deletes them from
// the versions topic.
func (r *Reader) prune(ctx context.Context) {
	newest := r.store.Newest()
	if newest == minTime {
		return
	}
	gone := r.store.Prune(newest - r.def.History.Milliseconds())
	if len(gone) == 0 {
		return
	}
	r.metrics.pruned.Add(float64(len(gone)))
	r.metrics.versions.Set(float64(r.store.Len()))
	var out []*kgo.Record
	for _, g := range gone {
		out = append(out, &kgo.Record{Topic: r.versions, Partition: g.Origin % r.nsaved, Key: versionKey(g.Key, g.From)})
	}
	r.save(ctx, out)
}

// watch lists the topic's end offsets every Freshness while events look the table up: an
// event waits for a listing asked for after its record's timestamp (Wait).
func (r *Reader) watch(ctx context.Context) {
	defer r.running.Done()
	adm := kadm.NewClient(r.cl)
	tick := time.NewTicker(r.cfg.Freshness)
	defer tick.Stop()
	idle := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		// Listed while events come, and for a second after the last: a table nobody looks up
		// costs the broker nothing.
		if r.active.Swap(false) {
			idle = 0
		} else if idle++; idle*int(r.cfg.Freshness) > int(time.Second) {
			continue
		}
		asked := time.Now()
		ends, err := adm.ListEndOffsets(ctx, r.def.Topic)
		if err == nil {
			err = ends.Error()
		}
		if err != nil {
			if ctx.Err() == nil {
				r.log.Warn("listing the table's end offsets", "err", err)
			}
			continue
		}
		r.mu.Lock()
		ends.Each(func(o kadm.ListedOffset) {
			if st := r.part(o.Partition); st != nil {
				st.hwm = max(st.hwm, o.Offset)
			}
		})
		r.observed = asked
		r.noteLag()
		close(r.changed)
		r.changed = make(chan struct{})
		r.mu.Unlock()
	}
}

// Wait blocks until the table can answer for event time t of an event whose record is stamped
// record, or its Grace passed (false), or ctx ended. It can answer once every partition of its
// topic either holds a version at or after t (a later record of it cannot be earlier, short of a
// late update) or has been read up to its end offset as listed after record: whatever a
// producer wrote to the table before the event's record was, the event sees (to within the
// clocks' skew).
func (r *Reader) Wait(ctx context.Context, t int64, record time.Time) bool {
	if !r.active.Load() {
		r.active.Store(true)
	}
	after := written(record, time.Now())
	ready, ch := r.ready(t, after)
	if ready {
		return true
	}
	r.metrics.waits.Inc()
	start := time.Now()
	defer func() { r.metrics.waitsSpent.Add(time.Since(start).Seconds()) }()
	timer := time.NewTimer(r.def.Grace)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-timer.C:
			r.metrics.expired.Inc()
			return false
		case <-ch:
		}
		if ready, ch = r.ready(t, after); ready {
			return true
		}
	}
}

// written is the latest time by which a record stamped record, as Kafka stamps (to the
// millisecond, rounded down), was written, as known at now: the end of its millisecond, or now
// when that is sooner (a stamp of the last millisecond, or one ahead of this clock because its
// producer's is fast). Whatever was written to the table before the record was is below end offsets
// listed from then on; a listing asked within the stamp's millisecond may have come before it.
func written(record, now time.Time) time.Time {
	end := record.Truncate(time.Millisecond).Add(time.Millisecond)
	if end.After(now) {
		return now
	}
	return end
}

// ready reports whether the table can answer for t, of a record written by after (written), and
// the channel that closes at its next change.
func (r *Reader) ready(t int64, after time.Time) (bool, <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fresh := !r.observed.Before(after)
	for _, st := range r.parts {
		if (st.applied && st.newest >= t) || (fresh && st.next >= st.hwm) {
			continue
		}
		return false, r.changed
	}
	return true, r.changed
}

// At is the value key had at time t (Versions.At).
func (r *Reader) At(key string, t int64) (any, bool) {
	for {
		cur := r.looked.Load()
		if t <= cur || r.looked.CompareAndSwap(cur, t) {
			break
		}
	}
	v, ok := r.store.At(key, t)
	if !ok {
		r.metrics.missing.Inc()
	}
	return v, ok
}

// Close stops reading.
func (r *Reader) Close() {
	if r.stop != nil {
		r.stop()
		r.running.Wait()
	}
	if r.cl != nil {
		r.cl.Close()
	}
}

// saved is a version as the versions topic keeps it: where it was read, and its record's value.
type saved struct {
	partition int32
	offset    int64
	deleted   bool
	value     []byte
}

// savedFormat is the version of the versions topic's value format.
const savedFormat = 1

func encodeSaved(s saved) []byte {
	b := make([]byte, 0, 2+2*binary.MaxVarintLen64+len(s.value))
	flags := byte(0)
	if s.deleted {
		flags = 1
	}
	b = append(b, savedFormat, flags)
	b = binary.AppendUvarint(b, uint64(s.partition))
	b = binary.AppendUvarint(b, uint64(s.offset))
	return append(b, s.value...)
}

func decodeSaved(b []byte) (saved, error) {
	if len(b) < 2 || b[0] != savedFormat {
		return saved{}, fmt.Errorf("versions record: unknown format")
	}
	s := saved{deleted: b[1]&1 != 0}
	b = b[2:]
	p, n := binary.Uvarint(b)
	if n <= 0 {
		return saved{}, fmt.Errorf("versions record: bad partition")
	}
	b = b[n:]
	o, n := binary.Uvarint(b)
	if n <= 0 {
		return saved{}, fmt.Errorf("versions record: bad offset")
	}
	s.partition, s.offset, s.value = int32(p), int64(o), b[n:]
	return s, nil
}

// versionKey is the versions topic's key of key's version from from: one record per version, so
// that compaction keeps every version until it is pruned.
func versionKey(key string, from int64) []byte {
	b := binary.AppendUvarint(make([]byte, 0, len(key)+18), uint64(len(key)))
	b = append(b, key...)
	return binary.BigEndian.AppendUint64(b, uint64(from))
}

func decodeVersionKey(b []byte) (string, int64, error) {
	n, w := binary.Uvarint(b)
	if w <= 0 || uint64(len(b)-w) != n+8 {
		return "", 0, fmt.Errorf("versions key of %d bytes: malformed", len(b))
	}
	return string(b[w : w+int(n)]), int64(binary.BigEndian.Uint64(b[w+int(n):])), nil
}
