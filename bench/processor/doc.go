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
//   - dense: 10k entities reporting every second for 100 s, about 60 events per entity-window;
//   - sparse-late<pct>, dense-late<pct> (sparse-late10): the base workload's on-time events, and
//     late events among them, pct percent of all events. They come in bursts, as the backlog of an
//     entity that was offline: 5 to 30 events of one entity, 2 to 30 minutes behind its
//     partition's stream time, between two on-time events of the stream. Each is late for every
//     window, so the finals are the base's, and the ratios of a late workload's figures to its
//     base's (printed at the end) are what late events cost;
//   - sparse-rollup, dense-rollup: the base workload's very input topic, aggregated by three sets
//     on one source: per entity as above, per region (100 regions, entity i in region i mod 100,
//     By("region", ...)) and for all events (Global()), each with the same window and
//     aggregations. Kafka Streams does the same with two more windowed aggregations after a
//     group-by to the region and to a constant key (through repartition topics). The ratios of a
//     rollup workload's figures to its base's are what the two rollup sets cost, and the global
//     lag (below) whether the global key's owner keeps up with the input rate. Systems that
//     write no finals (franz-consume, goka-naive) are not run on them: they would repeat their
//     base's run.
//   - sparse-join, dense-join: the rollup workload, with its region looked up in a table by event
//     time instead of computed: the registry topic holds one record per entity (its region, as
//     above, stamped a day before the input), partitioned as the input. abacus declares it with
//     topology.NewTable and joins it (every instance reads it whole); Kafka Streams left-joins
//     the stream with it as a versioned KTable (co-partitioned, the version valid at the event's
//     timestamp). The finals are the rollup workload's; a join workload's figures over its
//     rollup workload's are what one lookup per event costs.
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
// last windows close the same way everywhere, each partition ends with one sentinel event eleven
// minutes after the last real window's end; the sentinels' own windows stay open and are not
// expected.
//
// Rollups need more in Kafka Streams. Its per-region and global aggregations read repartition
// topics that every input task writes to, and on a replayed input the tasks drift apart in event
// time by minutes (nothing keeps them together): with grace 0 those aggregations drop most on-time
// events as late. They get a grace of 10 minutes (-kstreams-rollup-grace; the sparse input spans 10
// minutes of event time), which holds their windows open until the sentinels, eleven minutes
// past the last window, close them all; and a sentinel is sent to every region, because a
// repartition task's stream time moves only with the records it receives. abacus's rollups keep
// grace 0: each partition closes its own partial by its own stream time, and the key's owner emits
// the final once every partition's progress has passed the window (docs/DESIGN.md, Rollups).
//
// # What is measured and checked
//
// Per system: startup (process start to its first processed record), the time until every input
// record is processed and until the group has committed them all (events/s is computed from the
// latter), the time of the last final (broker append time, read back from the output topic), the
// CPU time of the system's own process (not the broker's) per million events, and its peak RSS.
// Every final read back is compared with the expected total of its window (of each set, in a
// rollup workload: every region's and the global total are the merge of their entities'); a run
// whose finals differ in number, window, totals or multiplicity fails, loudly, with examples.
// In a rollup workload, the global lag of a window is the broker append time of its global final
// minus that of its newest entity final (the last partition closing the window): for the last
// window, closed by the sentinels after the whole input, and the largest and median over all
// windows, most of which close while the input streams at full rate. abacus routes late
// events to a late topic (as users who keep them do, so their cost is in the figures); once its
// process has exited, the late topic is read back, and a run whose late records are not exactly
// one per late event of the input (at its offset, for the topology's one set) fails the same way.
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
