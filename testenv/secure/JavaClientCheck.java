// JavaClientCheck proves a Kerberized testenv HBase with HBase's own Java client, independently of
// the project's Go client: with a principal and keytab it creates a table, writes, reads and scans a
// cell and drops the table; without them it must be refused. testenv/services.sh compiles and runs it
// (`check-secure-java`), so a failure of the Go client can be told apart from a broken server.
//
// Usage: java -cp CONF:CLASSPATH JavaClientCheck ZK_PORT SERVER_PRINCIPAL [CLIENT_PRINCIPAL KEYTAB]
import java.security.PrivilegedExceptionAction;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.hbase.HBaseConfiguration;
import org.apache.hadoop.hbase.TableName;
import org.apache.hadoop.hbase.client.Admin;
import org.apache.hadoop.hbase.client.ColumnFamilyDescriptorBuilder;
import org.apache.hadoop.hbase.client.Connection;
import org.apache.hadoop.hbase.client.ConnectionFactory;
import org.apache.hadoop.hbase.client.Get;
import org.apache.hadoop.hbase.client.Put;
import org.apache.hadoop.hbase.client.Result;
import org.apache.hadoop.hbase.client.ResultScanner;
import org.apache.hadoop.hbase.client.Scan;
import org.apache.hadoop.hbase.client.Table;
import org.apache.hadoop.hbase.client.TableDescriptorBuilder;
import org.apache.hadoop.hbase.util.Bytes;
import org.apache.hadoop.security.UserGroupInformation;

public class JavaClientCheck {
  public static void main(String[] args) throws Exception {
    Configuration conf = HBaseConfiguration.create();
    conf.set("hbase.zookeeper.quorum", "127.0.0.1");
    conf.set("hbase.zookeeper.property.clientPort", args[0]);
    conf.set("hbase.master.kerberos.principal", args[1]);
    conf.set("hbase.regionserver.kerberos.principal", args[1]);
    conf.set("hbase.client.retries.number", "2");
    conf.set("hbase.rpc.timeout", "10000");
    conf.set("hbase.client.operation.timeout", "20000");
    // Servers register as 127.0.0.1; without this the client would turn that into "localhost".
    conf.set("hbase.unsafe.client.kerberos.hostname.disable.reversedns", "true");
    if (args.length < 4) {
      conf.set("hbase.security.authentication", "simple");
      conf.set("hadoop.security.authentication", "simple");
      UserGroupInformation.setConfiguration(conf);
      try (Connection c = ConnectionFactory.createConnection(conf); Admin a = c.getAdmin()) {
        a.listTableNames();
        System.out.println("UNEXPECTED: a client without credentials was served");
        System.exit(1);
      } catch (Exception e) {
        Throwable t = e;
        while (t.getCause() != null) t = t.getCause();
        System.out.println("refused without credentials: " + t);
        System.exit(0);
      }
    }
    conf.set("hbase.security.authentication", "kerberos");
    conf.set("hadoop.security.authentication", "kerberos");
    UserGroupInformation.setConfiguration(conf);
    UserGroupInformation ugi = UserGroupInformation.loginUserFromKeytabAndReturnUGI(args[2], args[3]);
    ugi.doAs((PrivilegedExceptionAction<Void>) () -> {
      TableName tn = TableName.valueOf("javacheck_" + System.currentTimeMillis());
      try (Connection c = ConnectionFactory.createConnection(conf); Admin a = c.getAdmin()) {
        a.createTable(TableDescriptorBuilder.newBuilder(tn)
            .setColumnFamily(ColumnFamilyDescriptorBuilder.of("f")).build());
        try (Table t = c.getTable(tn)) {
          t.put(new Put(Bytes.toBytes("r1")).addColumn(Bytes.toBytes("f"), Bytes.toBytes("q"), 42L, Bytes.toBytes("v1")));
          Result r = t.get(new Get(Bytes.toBytes("r1")));
          String v = Bytes.toString(r.getValue(Bytes.toBytes("f"), Bytes.toBytes("q")));
          int n = 0;
          try (ResultScanner sc = t.getScanner(new Scan())) {
            for (Result x : sc) n++;
          }
          if (!"v1".equals(v) || n != 1) throw new IllegalStateException("read back " + v + ", scanned " + n + " rows");
          System.out.println("java client as " + ugi.getUserName() + ": created " + tn + ", put/get/scan ok");
        } finally {
          a.disableTable(tn);
          a.deleteTable(tn);
        }
      }
      return null;
    });
  }
}
