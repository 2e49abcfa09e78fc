package abacus.bench;

import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.hbase.HBaseConfiguration;
import org.apache.hadoop.hbase.TableName;
import org.apache.hadoop.hbase.client.Admin;
import org.apache.hadoop.hbase.client.BufferedMutator;
import org.apache.hadoop.hbase.client.ColumnFamilyDescriptorBuilder;
import org.apache.hadoop.hbase.client.Connection;
import org.apache.hadoop.hbase.client.ConnectionFactory;
import org.apache.hadoop.hbase.client.Put;
import org.apache.hadoop.hbase.client.Result;
import org.apache.hadoop.hbase.client.ResultScanner;
import org.apache.hadoop.hbase.client.Scan;
import org.apache.hadoop.hbase.client.Table;
import org.apache.hadoop.hbase.client.TableDescriptorBuilder;

/**
 * Writes N cells of 100-byte values (or valueBytes) into a fresh 16-region table through a BufferedMutator, then
 * scans them back, and prints one line per phase: "java put cells=N seconds=S cells_per_s=R"
 * (and "java put-start" just before the put begins).
 * The workload (row keys, explicit timestamps, value size, split keys) mirrors the Go benchmark in
 * bench/hbase so the two numbers compare like for like.
 *
 * Usage: JavaClientBench zookeeperHost:port cells [valueBytes]
 */
public final class JavaClientBench {
  public static void main(String[] args) throws Exception {
    String quorum = args.length > 0 ? args[0] : "127.0.0.1:2181";
    int cells = args.length > 1 ? Integer.parseInt(args[1]) : 1_000_000;
    String[] hp = quorum.split(":");
    Configuration conf = HBaseConfiguration.create();
    conf.set("hbase.zookeeper.quorum", hp[0]);
    conf.set("hbase.zookeeper.property.clientPort", hp.length > 1 ? hp[1] : "2181");
    TableName tn = TableName.valueOf("hbtest_javabench_" + System.nanoTime());
    byte[] fam = "f".getBytes();
    byte[] qual = "q".getBytes();
    byte[] value = new byte[args.length > 2 ? Integer.parseInt(args[2]) : 100];
    new Random(1).nextBytes(value);
    try (Connection conn = ConnectionFactory.createConnection(conf); Admin admin = conn.getAdmin()) {
      byte[][] splits = new byte[15][];
      for (int i = 1; i < 16; i++) {
        splits[i - 1] = Integer.toHexString(i).getBytes();
      }
      admin.createTable(TableDescriptorBuilder.newBuilder(tn)
          .setColumnFamily(ColumnFamilyDescriptorBuilder.of(fam)).build(), splits);
      try {
        // The Go side measures the servers' CPU from this line to the put's report.
        System.out.println("java put-start");
        System.out.flush();
        long t0 = System.nanoTime();
        try (BufferedMutator m = conn.getBufferedMutator(tn)) {
          for (int i = 0; i < cells; i++) {
            Put p = new Put(row(i));
            p.addColumn(fam, qual, i + 1L, value);
            m.mutate(p);
          }
          m.flush();
        }
        report("put", cells, System.nanoTime() - t0);
        System.out.flush();

        long t1 = System.nanoTime();
        long n = 0;
        Scan s = new Scan().setCaching(1000).setMaxResultSize(2L << 20);
        try (Table t = conn.getTable(tn); ResultScanner rs = t.getScanner(s)) {
          for (Result r : rs) {
            n += r.size();
          }
        }
        report("scan", n, System.nanoTime() - t1);
        if (n != cells) {
          throw new IllegalStateException("scanned " + n + " cells, wrote " + cells);
        }
      } finally {
        admin.disableTable(tn);
        admin.deleteTable(tn);
      }
    }
  }

  /** Row i: hex digit i%16 (which of the 16 regions) then the zero-padded index, as in Go. */
  static byte[] row(int i) {
    return String.format("%x-%09d", i % 16, i).getBytes();
  }

  static void report(String phase, long cells, long nanos) {
    double s = nanos / 1e9;
    System.out.printf("java %s cells=%d seconds=%.3f cells_per_s=%.0f%n", phase, cells, s, cells / s);
  }
}
