// Command probe answers whether the test services really serve: a Kafka broker that answers a
// Metadata request, and an HBase whose meta region is open and answers a scan (with -keytab, an
// HBase that requires Kerberos, the probe authenticating with that keytab). testenv/services.sh runs
// it until it succeeds; it exits non-zero with the reason.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/abacus-stream/abacus/hbase"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

func main() {
	kafka := flag.String("kafka", "", "broker host:port to send a Metadata request to")
	quorum := flag.String("zookeeper", "", "HBase ZooKeeper quorum to find the meta region through")
	timeout := flag.Duration("timeout", 5*time.Second, "time allowed for one probe")
	krb5conf := flag.String("krb5conf", "", "krb5.conf of the realm (with -keytab)")
	principal := flag.String("principal", "", "Kerberos principal to authenticate as (with -keytab)")
	keytab := flag.String("keytab", "", "keytab of -principal: authenticate to HBase with Kerberos")
	serverPrincipal := flag.String("server-principal", "", "HBase servers' principal pattern, e.g. hbase/_HOST@REALM")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	var (
		msg string
		err error
	)
	switch {
	case *kafka != "":
		msg, err = probeKafka(ctx, *kafka)
	case *quorum != "":
		cfg := hbase.Config{ZooKeeper: *quorum, MaxRounds: 1}
		if *keytab != "" {
			cfg.Auth = hbase.AuthKerberos
			cfg.Kerberos = hbase.KerberosConfig{Principal: *principal, Keytab: *keytab, Krb5Conf: *krb5conf, ServerPrincipal: *serverPrincipal}
		}
		msg, err = probeHBase(ctx, cfg)
	default:
		err = fmt.Errorf("say -kafka or -zookeeper")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(msg)
}

func probeKafka(ctx context.Context, broker string) (string, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(broker), kgo.RetryTimeout(2*time.Second))
	if err != nil {
		return "", err
	}
	defer cl.Close()
	md, err := kadm.NewClient(cl).BrokerMetadata(ctx)
	if err != nil {
		return "", fmt.Errorf("kafka metadata from %s: %w", broker, err)
	}
	if len(md.Brokers) == 0 {
		return "", fmt.Errorf("kafka metadata from %s: no brokers", broker)
	}
	return fmt.Sprintf("kafka cluster %s, %d broker(s), controller %d", md.Cluster, len(md.Brokers), md.Controller), nil
}

func probeHBase(ctx context.Context, cfg hbase.Config) (string, error) {
	loc := hbase.ZooKeeperLocator{Quorum: cfg.ZooKeeper, SessionTimeout: 4 * time.Second}
	sn, state, err := loc.MetaRegionServer(ctx)
	if err != nil {
		return "", err
	}
	if state != hbase.RegionStateOpen {
		return "", fmt.Errorf("hbase:meta on %s is in state %d, not open yet", sn, state)
	}
	// A real RPC, not a bare TCP dial: hbase:meta must answer a scan with at least one row.
	cl, err := hbase.NewClient(ctx, cfg)
	if err != nil {
		return "", err
	}
	defer cl.Close()
	sc := cl.Scan(hbase.Scan{Table: "hbase:meta", Caching: 1})
	defer sc.Close()
	row, err := sc.Next(ctx)
	if err != nil {
		return "", fmt.Errorf("hbase:meta on %s: scan: %w", sn, err)
	}
	// The master must have finished starting (after an unclean stop it replays crashed servers'
	// WALs first): until then it answers PleaseHoldException and tests could not create tables.
	tables, err := cl.Admin().ListTables(ctx, "")
	if err != nil {
		return "", fmt.Errorf("hbase master: list tables: %w", err)
	}
	return fmt.Sprintf("hbase:meta open on %s, first row %q; master answers (%d tables)", sn, row.Row(), len(tables)), nil
}
