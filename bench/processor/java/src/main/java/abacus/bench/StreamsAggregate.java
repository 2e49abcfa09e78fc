package abacus.bench;

import com.fasterxml.jackson.annotation.JsonInclude;
import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.io.PrintStream;
import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.LongAdder;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.Deserializer;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.serialization.Serializer;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.CloseOptions;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.EmitStrategy;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.KGroupedStream;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.KTable;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.Repartitioned;
import org.apache.kafka.streams.kstream.Suppressed;
import org.apache.kafka.streams.kstream.TimeWindowedKStream;
import org.apache.kafka.streams.kstream.TimeWindows;
import org.apache.kafka.streams.kstream.Windowed;
import org.apache.kafka.streams.processor.StateRestoreListener;
import org.apache.kafka.streams.processor.TimestampExtractor;
import org.apache.kafka.streams.processor.api.FixedKeyProcessor;
import org.apache.kafka.streams.processor.api.FixedKeyProcessorContext;
import org.apache.kafka.streams.processor.api.FixedKeyRecord;
import org.apache.kafka.streams.state.Stores;
import org.apache.kafka.streams.state.WindowStore;

/**
 * The abacus processor's benchmark workload as a Kafka Streams application: per entity (the record
 * key), 1-minute tumbling windows with no grace, count + sum + max of the reading's value, final
 * results only, written to an output topic.
 *
 * <p>It is the application a team would write: a RocksDB window store with its changelog, the
 * record cache and commit interval left at their defaults, two stream threads, and {@code
 * suppress(untilWindowCloses)} for finals (emit=close selects the window-close emit strategy
 * instead; that one checks for closed windows at most once per wall-clock second, so at the end of
 * a finite input the last windows may never be emitted: the harness defaults to suppress).
 *
 * <p>Event time is the reading's {@code ts} field, read from the deserialized value (Kafka Streams
 * deserializes before it extracts the timestamp, so the JSON is parsed once, as abacus does).
 *
 * <p>Output records: key = entity (UTF-8), value = 32 bytes big endian: window start (ms, int64),
 * count (int64), sum (float64), max (float64).
 *
 * <p>Talks to the harness through stdio: it prints {@code progress <records>} every 100 ms, {@code
 * state <STATE>} on state changes, {@code restoring <records>} at most once a second while it
 * restores, and {@code restored <store> <partition> <records> <ms>} for each restored changelog
 * partition; it closes (committing) and exits 0 when its stdin reaches EOF, and
 * exits 1 if a stream thread dies or the close times out.
 *
 * <p>With rollup=true (the harness's rollup workloads), two more windowed aggregations of the same
 * stream, with the same window and aggregations, write to the same output topic: per region
 * ({@link #regionOf}, the key is the region) and for all events (the key is {@code all}). Each is
 * a group-by to a new key, so Kafka Streams writes the whole input to a repartition topic for it
 * and aggregates it in a second sub-topology; the global one's repartition topic has one key, so
 * one task (one thread) aggregates every event. The records of a repartition partition come from
 * every input task, and nothing keeps the input tasks (of two threads, or of one) at the same event
 * time: on the harness's replayed input they drift apart by minutes, so with grace 0 these
 * aggregations drop most on-time events as late (seen: 7 of 8). They get rollup-grace-ms instead
 * (the harness's -kstreams-rollup-grace, default 10 minutes: the sparse input's whole span), which
 * holds every window open until the end of the input. The input's sentinels close the last windows by
 * stream time, which a repartition task advances only with records it receives: a sentinel is sent
 * to every region (and, as every record, to the global key), so every region partition sees one.
 * But the first input task to reach its sentinel would close every window while the others are
 * still minutes behind: after the repartition, a {@link SentinelBarrier} lets a key's sentinel
 * through only once the sentinels of all input partitions have come for it, i.e. once the whole
 * input has. Both are the harness's way to end a finite input, as the sentinels are.
 *
 * <p>Arguments, key=value: brokers, input, output, app (application.id), state (state.dir),
 * guarantee (at_least_once | exactly_once_v2), emit (suppress | close), threads (default 2),
 * rollup (false | true), rollup-grace-ms (default 600000), partitions (of the input, default 12:
 * the sentinels a barrier waits for).
 */
public final class StreamsAggregate {
  private StreamsAggregate() {}

  /** One input event, as the Go side writes it. */
  public static final class Reading {
    public String entity;
    public long ts;
    public double v;

    /** A join workload's region, from the registry; not in the input. */
    @JsonInclude(JsonInclude.Include.NON_NULL)
    public String region;
  }

  /** A window's running aggregate. Mutable: the aggregator updates the copy it was handed. */
  static final class Agg {
    long count;
    double sum;
    double max = Double.NEGATIVE_INFINITY;

    Agg add(Reading r) {
      count++;
      sum += r.v;
      max = Math.max(max, r.v);
      return this;
    }
  }

  /** Agg as 24 fixed bytes: the store keeps what abacus keeps (count, sum, max), no field names. */
  static final class AggSerde implements Serde<Agg> {
    @Override
    public Serializer<Agg> serializer() {
      return (topic, a) -> {
        if (a == null) {
          return null;
        }
        return ByteBuffer.allocate(24).putLong(a.count).putDouble(a.sum).putDouble(a.max).array();
      };
    }

    @Override
    public Deserializer<Agg> deserializer() {
      return (topic, data) -> {
        if (data == null) {
          return null;
        }
        ByteBuffer b = ByteBuffer.wrap(data);
        Agg a = new Agg();
        a.count = b.getLong();
        a.sum = b.getDouble();
        a.max = b.getDouble();
        return a;
      };
    }
  }

  static final class ReadingSerde implements Serde<Reading> {
    private static final ObjectMapper JSON =
        new ObjectMapper().configure(DeserializationFeature.FAIL_ON_UNKNOWN_PROPERTIES, false);

    @Override
    public Serializer<Reading> serializer() {
      return (topic, r) -> {
        try {
          return JSON.writeValueAsBytes(r);
        } catch (IOException e) {
          throw new IllegalStateException(e);
        }
      };
    }

    @Override
    public Deserializer<Reading> deserializer() {
      return (topic, data) -> {
        try {
          return JSON.readValue(data, Reading.class);
        } catch (IOException e) {
          throw new IllegalArgumentException("undecodable reading", e);
        }
      };
    }
  }

  /** Event time from the payload, as abacus reads it. */
  static final class ReadingTime implements TimestampExtractor {
    @Override
    public long extract(ConsumerRecord<Object, Object> rec, long partitionTime) {
      return ((Reading) rec.value()).ts;
    }
  }

  static byte[] encodeFinal(Windowed<String> key, Agg a) {
    return ByteBuffer.allocate(32)
        .putLong(key.window().start())
        .putLong(a.count)
        .putDouble(a.sum)
        .putDouble(a.max)
        .array();
  }

  static final int REGIONS = 100;
  static final String ENTITY_PREFIX = "dev-";
  static final String GLOBAL_KEY = "all";

  /**
   * The region of an entity named dev-NNNNNNN: its number mod 100, as region-NN; null for any
   * other name (the sentinels). The Go harness computes the same (regionOf in workload.go).
   */
  static String regionOf(String entity) {
    if (entity == null || !entity.startsWith(ENTITY_PREFIX)) {
      return null;
    }
    int i;
    try {
      i = Integer.parseInt(entity.substring(ENTITY_PREFIX.length()));
    } catch (NumberFormatException e) {
      return null;
    }
    return regionName(i % REGIONS);
  }

  static String regionName(int r) {
    return (r < 10 ? "region-0" : "region-") + r;
  }

  /**
   * Drops a key's sentinels until one has come from each of the input's partitions (each ends with
   * one, sent after all its records, and a repartition partition gets one producer's records in
   * order): the last one then moves the task's stream time past every window. In memory only: the
   * benchmark has no failures, and a lost count would fail its checks loudly.
   */
  static final class SentinelBarrier implements FixedKeyProcessor<String, Reading, Reading> {
    private final int partitions;
    private final Map<String, java.util.Set<String>> seen = new HashMap<>();
    private FixedKeyProcessorContext<String, Reading> ctx;

    SentinelBarrier(int partitions) {
      this.partitions = partitions;
    }

    @Override
    public void init(FixedKeyProcessorContext<String, Reading> ctx) {
      this.ctx = ctx;
    }

    @Override
    public void process(FixedKeyRecord<String, Reading> rec) {
      Reading r = rec.value();
      if (r.entity != null && r.entity.startsWith(SENTINEL_PREFIX)) {
        java.util.Set<String> from = seen.computeIfAbsent(rec.key(), k -> new java.util.HashSet<>());
        from.add(r.entity);
        if (from.size() < partitions) {
          return;
        }
      }
      ctx.forward(rec);
    }
  }

  static final String SENTINEL_PREFIX = "~sentinel-";

  /** One windowed count + sum + max of a grouped stream, its finals written to output. */
  static void aggregate(
      KGroupedStream<String, Reading> grouped, TimeWindows windows, String store, String emit, String output) {
    TimeWindowedKStream<String, Reading> windowed = grouped.windowedBy(windows);
    if (emit.equals("close")) {
      windowed = windowed.emitStrategy(EmitStrategy.onWindowClose());
    } else if (!emit.equals("suppress")) {
      throw new IllegalArgumentException("emit must be suppress or close, got " + emit);
    }
    KTable<Windowed<String>, Agg> table =
        windowed.aggregate(
            Agg::new,
            (k, r, a) -> a.add(r),
            Materialized.<String, Agg, WindowStore<Bytes, byte[]>>as(store)
                .withKeySerde(Serdes.String())
                .withValueSerde(new AggSerde()));
    if (emit.equals("suppress")) {
      table = table.suppress(Suppressed.untilWindowCloses(Suppressed.BufferConfig.unbounded()));
    }
    table
        .toStream()
        .map((wk, a) -> KeyValue.pair(wk.key(), encodeFinal(wk, a)))
        .to(output, Produced.with(Serdes.String(), Serdes.ByteArray()));
  }

  static Topology topology(
      String input,
      String output,
      String emit,
      boolean rollup,
      Duration rollupGrace,
      int partitions,
      String registry,
      LongAdder seen) {
    StreamsBuilder b = new StreamsBuilder();
    KStream<String, Reading> src =
        b.stream(input, Consumed.with(Serdes.String(), new ReadingSerde()).withTimestampExtractor(new ReadingTime()))
            .peek((k, v) -> seen.increment());
    if (registry != null) {
      // A join workload: the region from the registry, by event time (a versioned table: the
      // version valid at the stream record's timestamp, the event time), co-partitioned with
      // the input. A left join: the sentinels are in no region.
      KTable<String, String> regions =
          b.table(
              registry,
              Consumed.with(Serdes.String(), Serdes.String()),
              Materialized.<String, String>as(
                      Stores.persistentVersionedKeyValueStore("registry-versions", Duration.ofDays(2)))
                  .withKeySerde(Serdes.String())
                  .withValueSerde(Serdes.String()));
      src =
          src.leftJoin(
              regions,
              (r, region) -> {
                r.region = region;
                return r;
              });
    }
    final boolean joined = registry != null;
    aggregate(src.groupByKey(), TimeWindows.ofSizeWithNoGrace(Duration.ofMinutes(1)), "agg", emit, output);
    if (rollup) {
      TimeWindows windows = TimeWindows.ofSizeAndGrace(Duration.ofMinutes(1), rollupGrace);
      // groupBy(region), written as what groupBy is (a new key, a repartition topic, then
      // groupByKey), so that a sentinel goes to every region and the barrier sits after the
      // repartition.
      KStream<String, Reading> byRegion =
          src.flatMap(
              (k, r) -> {
                String region = joined ? r.region : regionOf(k);
                if (region != null) {
                  return List.of(KeyValue.pair(region, r));
                }
                List<KeyValue<String, Reading>> all = new ArrayList<>(REGIONS);
                for (int i = 0; i < REGIONS; i++) {
                  all.add(KeyValue.pair(regionName(i), r));
                }
                return all;
              });
      aggregate(
          byRegion
              .repartition(Repartitioned.with(Serdes.String(), new ReadingSerde()).withName("region"))
              .processValues(() -> new SentinelBarrier(partitions))
              .groupByKey(Grouped.with(Serdes.String(), new ReadingSerde())),
          windows, "agg-region", emit, output);
      // groupBy(constant), the same way.
      aggregate(
          src.selectKey((k, r) -> GLOBAL_KEY)
              .repartition(Repartitioned.with(Serdes.String(), new ReadingSerde()).withName("global"))
              .processValues(() -> new SentinelBarrier(partitions))
              .groupByKey(Grouped.with(Serdes.String(), new ReadingSerde())),
          windows, "agg-global", emit, output);
    }
    return b.build();
  }

  static Map<String, String> parse(String[] args) {
    Map<String, String> m = new HashMap<>();
    for (String a : args) {
      int i = a.indexOf('=');
      if (i < 0) {
        throw new IllegalArgumentException("argument " + a + " is not key=value");
      }
      m.put(a.substring(0, i), a.substring(i + 1));
    }
    for (String k : new String[] {"brokers", "input", "output", "app", "state", "guarantee"}) {
      if (!m.containsKey(k)) {
        throw new IllegalArgumentException("missing argument " + k + "=");
      }
    }
    return m;
  }

  public static void main(String[] args) throws Exception {
    Map<String, String> a = parse(args);
    PrintStream out = System.out;
    LongAdder seen = new LongAdder();

    Properties p = new Properties();
    p.put(StreamsConfig.APPLICATION_ID_CONFIG, a.get("app"));
    p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, a.get("brokers"));
    p.put(StreamsConfig.STATE_DIR_CONFIG, a.get("state"));
    p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, a.get("guarantee"));
    p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, a.getOrDefault("threads", "2"));
    // Everything else (commit interval, record cache, RocksDB settings, producer and consumer
    // settings) stays at Kafka Streams' defaults: the benchmark measures what a team gets.

    Topology topo =
        topology(
            a.get("input"),
            a.get("output"),
            a.getOrDefault("emit", "suppress"),
            Boolean.parseBoolean(a.getOrDefault("rollup", "false")),
            Duration.ofMillis(Long.parseLong(a.getOrDefault("rollup-grace-ms", "600000"))),
            Integer.parseInt(a.getOrDefault("partitions", "12")),
            a.get("registry"),
            seen);
    KafkaStreams streams = new KafkaStreams(topo, p);
    CountDownLatch stop = new CountDownLatch(1);
    AtomicBoolean failed = new AtomicBoolean();
    streams.setUncaughtExceptionHandler(
        e -> {
          e.printStackTrace();
          failed.set(true);
          stop.countDown();
          return StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });
    streams.setStateListener(
        (now, before) -> {
          synchronized (out) {
            out.println("state " + now);
            out.flush();
          }
          if (now == KafkaStreams.State.ERROR) {
            failed.set(true);
            stop.countDown();
          }
        });
    streams.setGlobalStateRestoreListener(
        new StateRestoreListener() {
          private final Map<TopicPartition, Long> started = new java.util.concurrent.ConcurrentHashMap<>();

          @Override
          public void onRestoreStart(TopicPartition tp, String store, long start, long end) {
            started.put(tp, System.nanoTime());
          }

          private final java.util.concurrent.atomic.AtomicLong restored = new java.util.concurrent.atomic.AtomicLong();
          private final java.util.concurrent.atomic.AtomicLong lastPrint = new java.util.concurrent.atomic.AtomicLong();

          // A sign of life for the harness's stall check, at most once a second.
          @Override
          public void onBatchRestored(TopicPartition tp, String store, long end, long n) {
            long total = restored.addAndGet(n);
            long now = System.nanoTime();
            long last = lastPrint.get();
            if (now - last > 1_000_000_000L && lastPrint.compareAndSet(last, now)) {
              synchronized (out) {
                out.println("restoring " + total);
                out.flush();
              }
            }
          }

          @Override
          public void onRestoreEnd(TopicPartition tp, String store, long total) {
            Long t0 = started.remove(tp);
            long ms = t0 == null ? -1 : (System.nanoTime() - t0) / 1_000_000;
            synchronized (out) {
              out.println("restored " + store + " " + tp.partition() + " " + total + " " + ms);
              out.flush();
            }
          }
        });

    ScheduledExecutorService reporter = Executors.newSingleThreadScheduledExecutor();
    Runnable report =
        () -> {
          synchronized (out) {
            out.println("progress " + seen.sum());
            out.flush();
          }
        };
    reporter.scheduleAtFixedRate(report, 100, 100, TimeUnit.MILLISECONDS);

    // The harness stops us by closing stdin; if the harness dies, so does its pipe, and we stop too.
    Thread stdin =
        new Thread(
            () -> {
              try {
                while (System.in.read() != -1) {
                  // discard
                }
              } catch (IOException ignored) {
                // treated as EOF
              }
              stop.countDown();
            },
            "stdin-eof");
    stdin.setDaemon(true);
    stdin.start();

    streams.start();
    stop.await();
    // Leave the group on close, as sarama (goka, abacus) does: by default Kafka Streams stays a
    // member, and a restart then waits out the session timeout (45 s) before it gets its tasks,
    // which would hide the restore time the harness measures.
    boolean clean =
        streams.close(
            CloseOptions.groupMembershipOperation(CloseOptions.GroupMembershipOperation.LEAVE_GROUP)
                .withTimeout(Duration.ofSeconds(60)));
    reporter.shutdownNow();
    report.run();
    synchronized (out) {
      out.println("closed clean=" + clean);
      out.flush();
    }
    System.exit(failed.get() || !clean ? 1 : 0);
  }
}
