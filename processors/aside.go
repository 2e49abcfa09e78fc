package processors

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"

	"github.com/abacus-stream/abacus/deadletter"
)

// Dead letters and late records once, across crashes.
//
// A record processed again after a crash (its offset was not committed) would set aside again
// what the crashed run set aside for it: a second dead letter, a second late record. Kafka
// Streams' exactly-once avoids that with transactions; goka has none. Instead, a session that
// takes over partitions reads back what was set aside for the records it will process again, and
// the engine does not write those a second time (engine.Config.Written):
//
//   - every set-aside record names the processor group and the record whose callback wrote it
//     (deadletter.HeaderGroup, HeaderBy), and is produced with the wall-clock time of its write as
//     its Kafka timestamp (the original record's timestamp is in deadletter.HeaderTimestamp);
//   - each committed offset carries, as its metadata (asideMetadata), a time before which nothing
//     was set aside for any record at or after it: the time the callback of the record at the
//     offset started, or earlier when a run before wrote for a later record earlier;
//   - at Setup, a session fetches its claims' committed offsets with their metadata, and reads
//     the set-aside topics from the earliest such time (less asideClockSkew, for clocks of other
//     hosts) to their end (Kafka's time index finds the offset): every record of its group by a
//     claim's record at or after the committed offset is one a crashed run wrote.
//
// What is not found is written again, never lost: a record whose write was still in flight when
// its writer died and reaches the broker after the read (a process is dead for a session timeout
// before its partitions move, so this does not happen short of a network partition), and records
// set aside before a version that wrote the metadata committed the offset.

// asideClockSkew is how far another host's clock may be behind this one's: the read starts that
// much before the committed time. A larger skew can only make a record written again.
const asideClockSkew = 10 * time.Second

// asideMetaPrefix starts the committed offsets' metadata; the rest is unix milliseconds.
const asideMetaPrefix = "abacus.aside-from="

// asideMetadata is the metadata of a committed offset whose records set nothing aside before ms.
func asideMetadata(ms int64) string { return asideMetaPrefix + strconv.FormatInt(ms, 10) }

// parseAsideMetadata reads asideMetadata; ok is false for any other metadata (an offset committed
// by an earlier version, or none).
func parseAsideMetadata(meta string) (ms int64, ok bool) {
	v, found := strings.CutPrefix(meta, asideMetaPrefix)
	if !found {
		return 0, false
	}
	ms, err := strconv.ParseInt(v, 10, 64)
	return ms, err == nil
}

// asideLedger is what the current session found set aside for the records it processes again, by
// identity (deadletter.Record.Identity); the engine asks it before each write.
type asideLedger struct {
	group  string
	topics []string // the dead-letter topic, and the late topic if there is one
	log    *slog.Logger
	found  atomic.Pointer[map[string]struct{}]
}

func newAsideLedger(group string, topics []string, log *slog.Logger) *asideLedger {
	return &asideLedger{group: group, topics: topics, log: log}
}

// written implements engine.Config.Written.
func (l *asideLedger) written(identity string) bool {
	m := l.found.Load()
	if m == nil {
		return false
	}
	_, ok := (*m)[identity]
	return ok
}

// count is how many identities the current session found.
func (l *asideLedger) count() int {
	if m := l.found.Load(); m != nil {
		return len(*m)
	}
	return 0
}

// claimStart is a claim's committed offset as a session found it at Setup.
type claimStart struct {
	offset    int64 // -1: nothing committed
	asideFrom int64 // see asideMetadata; valid when known
	known     bool
}

// inherited is a set-aside record a run before this session wrote for a record at or after the
// committed offset: the record's offset and the write's time. A commit past such a record no
// longer needs its time (partitionMarks.bound).
type inherited struct {
	offset int64
	at     int64 // unix ms
}

// asideScan is what Setup found: each claim's start and the records written for it before.
type asideScan struct {
	starts    map[topicPartition]claimStart
	inherited map[topicPartition][]inherited // ascending by offset
	records   int                            // set-aside records read
}

// scan reads the claims' committed offsets and what was set aside for their records at or after
// them (see the comment at the top of this file), installs the identities found for the engine
// and returns the rest for the session's commits.
func (l *asideLedger) scan(ctx context.Context, cl sarama.Client, claims map[string][]int32) (*asideScan, error) {
	s := &asideScan{starts: map[topicPartition]claimStart{}, inherited: map[topicPartition][]inherited{}}
	if err := s.fetchStarts(cl, l.group, claims); err != nil {
		return nil, err
	}
	from := int64(math.MaxInt64)
	for _, st := range s.starts {
		if st.known {
			from = min(from, st.asideFrom)
		}
	}
	found := map[string]struct{}{}
	if from != math.MaxInt64 {
		from -= asideClockSkew.Milliseconds()
		for _, topic := range l.topics {
			if err := l.read(ctx, cl, topic, from, s, found); err != nil {
				return nil, err
			}
		}
	}
	for _, in := range s.inherited {
		slices.SortFunc(in, func(a, b inherited) int { return int(a.offset - b.offset) })
	}
	l.found.Store(&found)
	return s, nil
}

// fetchStarts asks the group's coordinator for the claims' committed offsets and metadata.
func (s *asideScan) fetchStarts(cl sarama.Client, group string, claims map[string][]int32) error {
	coord, err := cl.Coordinator(group)
	if err != nil {
		return fmt.Errorf("the group's coordinator: %w", err)
	}
	req := &sarama.OffsetFetchRequest{Version: 1, ConsumerGroup: group}
	for topic, parts := range claims {
		for _, p := range parts {
			req.AddPartition(topic, p)
		}
	}
	resp, err := coord.FetchOffset(req)
	if err != nil {
		return fmt.Errorf("committed offsets: %w", err)
	}
	for topic, parts := range claims {
		for _, p := range parts {
			b := resp.GetBlock(topic, p)
			if b == nil {
				return fmt.Errorf("committed offsets: no answer for %s/%d", topic, p)
			}
			if b.Err != sarama.ErrNoError {
				return fmt.Errorf("committed offset of %s/%d: %w", topic, p, b.Err)
			}
			st := claimStart{offset: b.Offset}
			if b.Offset >= 0 {
				st.asideFrom, st.known = parseAsideMetadata(b.Metadata)
			}
			s.starts[topicPartition{topic, p}] = st
		}
	}
	return nil
}

// read reads topic from the first record written at or after from (ms) to its end, and keeps the
// records of this group by a claim's record at or after its committed offset.
func (l *asideLedger) read(ctx context.Context, cl sarama.Client, topic string, from int64, s *asideScan, found map[string]struct{}) error {
	parts, err := cl.Partitions(topic)
	if err != nil {
		return fmt.Errorf("partitions of %s: %w", topic, err)
	}
	var cons sarama.Consumer
	defer func() {
		if cons != nil {
			cons.Close()
		}
	}()
	for _, p := range parts {
		start, err := cl.GetOffset(topic, p, from)
		if err != nil {
			return fmt.Errorf("offset of %s/%d at %d ms: %w", topic, p, from, err)
		}
		end, err := cl.GetOffset(topic, p, sarama.OffsetNewest)
		if err != nil {
			return fmt.Errorf("end of %s/%d: %w", topic, p, err)
		}
		if start < 0 || start >= end {
			continue // nothing written since
		}
		if cons == nil {
			if cons, err = sarama.NewConsumerFromClient(cl); err != nil {
				return err
			}
		}
		if err := l.readPartition(ctx, cons, topic, p, start, end, s, found); err != nil {
			return err
		}
	}
	return nil
}

func (l *asideLedger) readPartition(ctx context.Context, cons sarama.Consumer, topic string, p int32, start, end int64, s *asideScan, found map[string]struct{}) error {
	pc, err := cons.ConsumePartition(topic, p, start)
	if err != nil {
		return fmt.Errorf("read %s/%d from %d: %w", topic, p, start, err)
	}
	defer pc.Close()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-pc.Errors():
			return fmt.Errorf("read %s/%d: %w", topic, p, err)
		case m := <-pc.Messages():
			s.records++
			l.keep(topic, m, s, found)
			if m.Offset >= end-1 {
				return nil
			}
		}
	}
}

// keep notes one set-aside record read back, if this group wrote it for a record it will process
// again.
func (l *asideLedger) keep(topic string, m *sarama.ConsumerMessage, s *asideScan, found map[string]struct{}) {
	hs := make([]deadletter.Header, 0, len(m.Headers))
	for _, h := range m.Headers {
		hs = append(hs, deadletter.Header{Key: string(h.Key), Value: h.Value})
	}
	r, err := deadletter.Parse(m.Value, hs)
	if err != nil || r.Group != l.group {
		return // another writer's (a sink's, another group's), or not one of ours at all
	}
	tp := topicPartition{r.By.Topic, r.By.Partition}
	st, claimed := s.starts[tp]
	if !claimed || r.By.Offset < st.offset {
		return // another instance's partition, or a record committed since
	}
	found[r.Identity(topic)] = struct{}{}
	s.inherited[tp] = append(s.inherited[tp], inherited{offset: r.By.Offset, at: m.Timestamp.UnixMilli()})
}

// scanWithRetries runs scan until it succeeds, ctx ends or a failure is not one that trying again
// cures. It gives up after a few minutes: the session then runs without what a crashed run set
// aside (its records may be set aside twice, never lost), which the log says.
func (l *asideLedger) scanWithRetries(ctx context.Context, cl sarama.Client, claims map[string][]int32) *asideScan {
	backoff := 250 * time.Millisecond
	deadline := time.Now().Add(2 * time.Minute)
	for {
		s, err := l.scan(ctx, cl, claims)
		if err == nil {
			return s
		}
		if ctx.Err() != nil || !transient(err) || time.Now().After(deadline) {
			if ctx.Err() != nil {
				// The session ended (a rebalance) before it started: the next one reads again.
				empty := map[string]struct{}{}
				l.found.Store(&empty)
				return nil
			}
			l.log.Warn("could not read back the dead letters and late records written before this session: records processed again may set theirs aside a second time",
				"err", err)
			empty := map[string]struct{}{}
			l.found.Store(&empty)
			return nil
		}
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}
