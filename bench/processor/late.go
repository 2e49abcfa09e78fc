package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// lateStats is what abacus's late topic held at the end of a step.
type lateStats struct {
	records int64 // records in the topic: the sum of its end offsets
	matched int64 // late records of the input's late events, the first for each
	dups    int64 // a second late record for one event
	unknown int64 // a late record whose source is not a late event of the input
	bad     int64 // not a late record of the input's set
	samples []string
}

// readLate reads the late topic of a step whose process has exited, to its end offsets. Reading
// after the step, not during it, keeps the read out of the measured CPU and time.
func readLate(ctx context.Context, adm *admin, topic, input string, x *expectation) (lateStats, error) {
	var st lateStats
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	l, err := adm.adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = l.Error()
	}
	if err != nil {
		return st, fmt.Errorf("end offsets of the late topic %s: %w", topic, err)
	}
	ends := map[int32]kgo.Offset{}
	left := map[int32]int64{} // the end offset of each partition not read to its end yet
	l.Each(func(o kadm.ListedOffset) {
		st.records += o.Offset
		if o.Offset > 0 {
			ends[o.Partition] = kgo.NewOffset().AtStart()
			left[o.Partition] = o.Offset
		}
	})
	if len(left) == 0 {
		return st, nil
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(adm.brokers...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: ends}))
	if err != nil {
		return st, fmt.Errorf("late topic reader: %w", err)
	}
	defer cl.Close()
	seen := make([]bool, x.lateCount)
	for len(left) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return st, fmt.Errorf("read the late topic %s (%d partitions short of their end): %w", topic, len(left), err)
		}
		var ferr error
		fs.EachError(func(t string, p int32, err error) { ferr = errors.Join(ferr, fmt.Errorf("read %s/%d: %w", t, p, err)) })
		if ferr != nil {
			return st, ferr
		}
		fs.EachRecord(func(rec *kgo.Record) {
			st.add(rec, input, x, seen)
			if end, ok := left[rec.Partition]; ok && rec.Offset+1 >= end {
				delete(left, rec.Partition)
			}
		})
	}
	return st, nil
}

// add checks one record of the late topic.
func (st *lateStats) add(rec *kgo.Record, input string, x *expectation, seen []bool) {
	sample := func(what string) {
		if len(st.samples) < 5 {
			st.samples = append(st.samples, fmt.Sprintf("%s: late record %s/%d@%d", what, rec.Topic, rec.Partition, rec.Offset))
		}
	}
	r, err := decodeLate(rec)
	switch {
	case err != nil:
		st.bad++
		sample(err.Error())
		return
	case !r.late || r.set != setName || r.topic != input:
		st.bad++
		sample(fmt.Sprintf("reason %q, set %q, source %s/%d@%d", r.reason, r.set, r.topic, r.partition, r.offset))
		return
	}
	at := func() string { return fmt.Sprintf("%s/%d@%d", r.topic, r.partition, r.offset) }
	i := x.lateIndex(r.partition, r.offset)
	switch {
	case i < 0:
		st.unknown++
		sample("an event that is not late: " + at())
	case seen[i]:
		st.dups++
		sample("a second one for " + at())
	default:
		seen[i] = true
		st.matched++
	}
}

// check compares the late topic with the input's late events: exactly one late record for each.
func (st lateStats) check(x *expectation) error {
	want := int64(x.lateCount)
	if st.records == want && st.matched == want && st.dups+st.unknown+st.bad == 0 {
		return nil
	}
	msg := fmt.Sprintf("LATE RECORDS DO NOT MATCH: the late topic holds %d records, the input %d late events (one late record each): %d matched, %d repeated, %d for events that are not late, %d not late records of the input's set",
		st.records, want, st.matched, st.dups, st.unknown, st.bad)
	if len(st.samples) > 0 {
		msg += "\n    " + strings.Join(st.samples, "\n    ")
	}
	return errors.New(msg)
}
