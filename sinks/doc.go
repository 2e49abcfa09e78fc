// Package sinks turns Kafka topics into HBase cells so that at-least-once delivery yields
// effectively-once tables: the flush-then-commit runtime (FlushThenCommit), the cell encoders of the
// aggregate and facts sinks, their row keys, and the offset stores.
//
// It must never commit an offset before every cell derived from the records below it has been
// acknowledged by the store, never write a cell whose timestamp came from a clock rather than from
// the data, never use Increment or Append, and never drop a record silently: records that cannot be
// written go to the dead-letter topic with their reason.
package sinks
