// Command procbench benchmarks the abacus processor beside Kafka Streams, on the same topic and
// broker, one system after another (bench/processor/run.sh builds and runs it).
//
// Every system does the same work: per entity (the record key), 1-minute tumbling windows with no
// grace, count + sum + max of a JSON field, finals only, written to an output topic. The input is
// produced once per workload (JSON readings keyed by entity, 12 partitions, partitioned by FNV-1a
// as goka and sarama partition keys) and kept for later runs of the same size, so runs before and
// after a change read the same records:
//
//   - sparse: 100k entities, one event per entity-window, 10 windows (at 1M events);
//   - dense: 10k entities reporting every second for 100 s, about 60 events per entity-window.
//
// The systems, each a process of its own with a fresh group: franz-go consume-only (the floor),
// a naive goka processor (decode, SetValue), the Kafka Streams application in java/ with
// at_least_once and with exactly_once_v2 (RocksDB window store with changelog, record cache and
// commit interval at their defaults, suppress until the window closes, two stream threads), and
// abacus (processors.New with the same topology built by package topology).
//
// # Closing windows at the end of a finite input
//
// With grace 0 a window closes when its partition's stream time passes its end, and both Kafka
// Streams (suppress, per task) and abacus (per partition) close by stream time alone. So that the
// last windows close the same way everywhere, each partition ends with one sentinel event two
// minutes after the last real one; the sentinels' own windows stay open and are not expected.
//
// # What is measured and checked
//
// Per system: startup (process start to its first processed record), the time until every input
// record is processed and until the group has committed them all (events/s is computed from the
// latter), the time of the last final (broker append time, read back from the output topic), the
// CPU time of the system's own process (not the broker's) per million events, and its peak RSS.
// Every final read back is compared with the expected total of its window; a run whose finals
// differ in number, window, totals or multiplicity fails, loudly, with examples.
//
// Every step is a process watched every 100 ms: it fails with the reason, and the tail of its log,
// when the process exits before it was asked to, when nothing moved (records processed, offsets
// committed, finals written, restore progress) for -stall, or at -step-timeout. Stopping is
// closing the process's stdin; it then commits and exits.
//
// After the workloads, abacus's state is measured: N entities with one open window each are loaded,
// the local LevelDB table is read at rest (bytes per open window, and where they go), and the
// processor is restarted with its local state and after losing it (rebuilding it from the
// changelog), beside Kafka Streams doing the same.
//
// The program must never write to topics it did not create: its inputs are named after the
// workload (-input-prefix), and everything else a run creates (outputs, changelogs, groups) starts
// with the run's own prefix and is deleted at the end unless -keep is set or a step failed.
package main
