package schema

import (
	"encoding/binary"
	"math/rand/v2"
	"time"
)

// A window row of the past can still be written long after its window closed: a sink that fell
// behind (HBase was down an hour), a replay, a backfill. A reader that keeps what it read of
// the past (query.Cache) must learn of such writes, and it does through the epoch row of the key
// index table: every writer that writes a window row whose start is more than SettledAfter
// before its clock writes, once that row has landed, a new value into the set's cell of
// EpochRow. A reader that reads a set's epoch before it reads windows settled by then, and finds
// it unchanged later, knows that no window row of that set older than SettledAfter has been
// written in between, so what it read is still the table's.
//
//	row:        EpochRow (in KeyIndexTable of the aggregates table)
//	qualifier:  the set's name
//	timestamp:  EpochTimestamp, always the same: each write replaces the last, whatever the
//	            writers' clocks say
//	value:      anything not written before (EpochValue: the writer's clock and random bytes)

// SettledAfter is how long after its start a window row is settled: written again only by a
// writer that then moves its set's epoch. Finals of windows shorter than about SettledAfter minus
// their grace land well inside it (a minute's final lands a minute and its grace after its
// start, a 10-minute window's ten), so a sink keeping up never moves an epoch for them; a set of
// longer windows moves its epoch with each of their writes, and readers then keep none of it.
// Shorter would move epochs for 10-minute sets; longer makes every request read more of the
// unsettled part (bench/query: 50 entities' day at 1 h, 35.8 ms; at 15 minutes, 24.8 ms).
const SettledAfter = 15 * time.Minute

// EpochRow is the key index table's row of the sets' epochs. 0x00 0x02 starts no index row (an
// escaped set name starts with a byte other than 0x00, or with 0x00 0xFF) and sorts after the
// marker row and the range read for it; listings step over rows that are not index rows.
var EpochRow = []byte{0, 2}

// EpochTimestamp is the timestamp of every epoch cell: far in the future, so no TTL expires it,
// and constant, so that the newest write wins (HBase keeps the later of two writes of a cell with
// one timestamp).
const EpochTimestamp = KeyIndexMarkerTimestamp

// EpochValue is a new epoch value: the clock and random bytes, so that two writers moving one
// epoch at the same moment still each write a value no reader has seen.
func EpochValue(now time.Time) []byte {
	b := binary.BigEndian.AppendUint64(make([]byte, 0, 16), uint64(now.UnixNano()))
	return binary.BigEndian.AppendUint64(b, rand.Uint64())
}
