package abacus.bench;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Properties;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.hbase.HBaseConfiguration;
import org.apache.hadoop.hbase.TableName;
import org.apache.hadoop.hbase.client.BufferedMutator;
import org.apache.hadoop.hbase.client.BufferedMutatorParams;
import org.apache.hadoop.hbase.client.Connection;
import org.apache.hadoop.hbase.client.ConnectionFactory;
import org.apache.hadoop.hbase.client.Put;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.hbase.thirdparty.com.google.common.hash.Hashing;

/**
 * The facts sink as a hand-written loop: poll, build one Put per event (the same row key, qualifier
 * and timestamp as abacus's facts sink), mutate, flush, commitSync. Prints the cells per second it
 * reached once it has written the expected number of events.
 *
 * <p>Arguments: brokers zkQuorum topic group table family saltBuckets expectedEvents
 */
public final class SinkLoop {
  public static void main(String[] args) throws Exception {
    String brokers = args[0], quorum = args[1], topic = args[2], group = args[3], table = args[4];
    byte[] family = args[5].getBytes(StandardCharsets.UTF_8);
    int buckets = Integer.parseInt(args[6]);
    long expected = Long.parseLong(args[7]);

    Configuration conf = HBaseConfiguration.create();
    String[] hp = quorum.split(":");
    conf.set("hbase.zookeeper.quorum", hp[0]);
    conf.set("hbase.zookeeper.property.clientPort", hp.length > 1 ? hp[1] : "2181");

    Properties props = new Properties();
    props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, brokers);
    props.put(ConsumerConfig.GROUP_ID_CONFIG, group);
    props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
    props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
    props.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "10000");
    props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
    props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());

    ObjectMapper json = new ObjectMapper();
    long written = 0;
    long start = System.nanoTime();
    try (Connection conn = ConnectionFactory.createConnection(conf);
        BufferedMutator mutator =
            conn.getBufferedMutator(
                new BufferedMutatorParams(TableName.valueOf(table)).writeBufferSize(4 << 20));
        KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props)) {
      consumer.subscribe(List.of(topic));
      while (written < expected) {
        ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(500));
        if (records.isEmpty()) {
          continue;
        }
        for (ConsumerRecord<byte[], byte[]> rec : records) {
          JsonNode ev = json.readTree(rec.value());
          String entity = ev.get("device").asText();
          long ts = ev.get("ts").asLong();
          String type = ev.get("kind").asText();
          byte[] row = factRow(entity, ts, buckets);
          byte[] qualifier =
              (type + ":" + rec.partition() + ":" + rec.offset()).getBytes(StandardCharsets.UTF_8);
          mutator.mutate(new Put(row).addColumn(family, qualifier, ts, rec.value()));
        }
        mutator.flush();
        consumer.commitSync();
        written += records.count();
      }
    }
    double secs = (System.nanoTime() - start) / 1e9;
    System.out.printf("java-sink events=%d seconds=%.3f cells/s=%.0f%n", written, secs, written / secs);
  }

  /** salt | entity escaped and terminated | MaxLong - ts, as abacus's sinks.FactRow builds it. */
  static byte[] factRow(String entity, long ts, int buckets) {
    byte[] e = entity.getBytes(StandardCharsets.UTF_8);
    int salt = Integer.remainderUnsigned(Hashing.murmur3_32_fixed().hashBytes(e).asInt(), buckets);
    ByteBuffer b = ByteBuffer.allocate(1 + e.length * 2 + 2 + 8);
    b.put((byte) salt);
    for (byte x : e) {
      b.put(x);
      if (x == 0) {
        b.put((byte) 0xFF);
      }
    }
    b.put((byte) 0).put((byte) 1).putLong(Long.MAX_VALUE - ts);
    byte[] out = new byte[b.position()];
    b.flip().get(out);
    return out;
  }
}
