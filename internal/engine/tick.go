package engine

import (
	"math"
	"strconv"

	"github.com/lovoo/goka"

	"github.com/abacus-stream/abacus/partitioner"
)

const tickKeyPrefix = "abacus-tick-"

// TickKeys finds, for each of npar partitions, a key that goka's partitioner sends to that
// partition, so that a tick sent with each key reaches every partition.
func TickKeys(npar int) []string {
	keys := make([]string, npar)
	found := 0
	for n := 0; found < npar; n++ {
		k := tickKeyPrefix + strconv.Itoa(n)
		if part := partitioner.Partition([]byte(k), int32(npar)); keys[part] == "" {
			keys[part] = k
			found++
		}
	}
	return keys
}

// IsTickKey reports whether a loop message key is a tick's.
func IsTickKey(k string) bool {
	return len(k) > len(tickKeyPrefix) && k[:len(tickKeyPrefix)] == tickKeyPrefix
}

// TickMessage is the loop message of a tick.
func TickMessage() []byte { return (&loopMsg{kind: loopTick}).encode() }

// onTick advances an idle partition's stream time with the wall clock, up to the last close time
// it waits for, and closes what is due.
func (pt *partition) onTick(ctx goka.Context) {
	now := pt.e.cfg.Now()
	if now.Sub(pt.lastInput) >= pt.e.cfg.IdleTimeout && len(pt.next) > 0 {
		var last int64 = math.MinInt64
		for _, at := range pt.next {
			last = max(last, at)
		}
		if target := min(now.UnixMilli(), last); target > pt.streamTime {
			pt.e.log.Debug("idle partition advances stream time", "partition", pt.id, "from", pt.streamTime, "to", target)
			pt.streamTime = target
		}
	}
	if pt.streamTime != math.MinInt64 {
		pt.lag.Set(float64(now.UnixMilli()-pt.streamTime) / 1000)
	}
	pt.closeDue(ctx)
	// Entities whose emitted windows have outlived FinalRetention and that no event has pruned
	// since get a close message, which prunes them.
	n := 0
	for n < len(pt.prunes) && !pt.prunes[n].at.After(now) {
		ent := pt.prunes[n].entity
		for _, em := range pt.emitted[ent] {
			if now.Sub(em.at) >= pt.e.cfg.FinalRetention {
				ctx.Loopback(ent, (&loopMsg{kind: loopClose}).encode())
				break
			}
		}
		n++
	}
	pt.prunes = pt.prunes[n:]
}

// onClose handles a close message: the entity's emitted windows that FinalRetention allows are
// pruned. Entities that receive events are pruned on the way (apply); close messages are for the
// others, sent from ticks.
func (pt *partition) onClose(ctx goka.Context) {
	ent, err := value(ctx)
	if err != nil {
		pt.e.fail(ctx, err)
		return
	}
	if ent == nil {
		return
	}
	if pt.prune(ctx.Key(), ent, pt.e.cfg.Now()) {
		ent.StreamTime = max(ent.StreamTime, pt.streamTime)
		ctx.SetValue(ent)
	}
	pt.schedule(ctx.Key(), ent)
}
