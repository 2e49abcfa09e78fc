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
// It must never commit an offset before every cell derived from the records below it has been
// acknowledged by the store, never write a cell whose timestamp came from a clock rather than from
// the data, never use Increment or Append, and never drop a record silently: records that cannot be
// written go to the dead-letter topic with their reason.
package sinks
