// Package sinks turns Kafka topics into HBase cells so that at-least-once delivery yields
// effectively-once tables: the flush-then-commit runtime (FlushThenCommit), the encoders of the
// aggregates sink (a totals record becomes one window row's cells) and of the facts sink (a raw
// event becomes one cell), laid out as package schema says, and the offset stores.
//
// A batch's cells are written through a store.Writer (HBase or the embedded store); its records'
// offsets are committed only once every cell is acknowledged, in the order the batches were
// taken. While writes are behind and the next batch is full, the sink holds its poll; records that
// can never be written go to the dead-letter topic (package deadletter).
//
// HBaseOffsets is the one part that reaches HBase through package hbase instead of package store,
// because its cells break store's contract on purpose: a version's timestamp is the commit time
// (never below the newest version seen plus one), where a store.Cell's comes from the data so
// that a replay rewrites an identical cell; and every commit adds a version, kept as history
// (OffsetHistoryVersions), where a replay must add none. Its table is no schema.TableLayout
// either: not salted, without the abacus.salt.buckets attribute that store.Tables checks an
// existing table by, and read by row (Get). It exists only on HBase, beside the cells it covers, so
// that tables restored from a snapshot resume from the offsets that match them. (It is not
// written with the cells: Commit runs after every cell below the offsets was acknowledged, as for
// any OffsetStore.)
//
// It must never commit an offset before every cell derived from the records below it has been
// acknowledged by the store, never write a cell whose timestamp came from a clock rather than from
// the data (the offsets table, which no event derives, aside), never use Increment or Append, and
// never drop a record silently: records that cannot be written go to the dead-letter topic with
// their reason.
package sinks
