// Command probe answers whether the test services really serve: a Kafka broker that answers a
// Metadata request (listing as many brokers as the cluster should have), its SASL_SSL listener
// logging in with every mechanism, and an HBase whose meta region is open and answers a scan (with
// -keytab, an HBase that requires Kerberos, the probe authenticating with that keytab).
// testenv/services.sh runs it until it succeeds; it exits non-zero with the reason. With -cluster
// it runs the HBase cluster's operator commands for the script (regions, move-region, balance).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/abacus-stream/abacus/hbase"
	"github.com/abacus-stream/abacus/kafkasec"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

func main() {
	kafka := flag.String("kafka", "", "broker host:port to send a Metadata request to")
	brokers := flag.Int("brokers", 1, "brokers the Metadata answer must list (a cluster is ready when every node is in it)")
	saslAddr := flag.String("sasl", "", "SASL_SSL host:port to log in to with PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 "+
		"(users from ABACUS_KAFKA_SASL_*_USER/_PASSWORD); missing SCRAM users are added through -kafka first")
	caFile := flag.String("ca", "", "CA file that signs the SASL_SSL listener's certificate")
	quorum := flag.String("zookeeper", "", "HBase ZooKeeper quorum to find the meta region through")
	timeout := flag.Duration("timeout", 5*time.Second, "time allowed for one probe")
	krb5conf := flag.String("krb5conf", "", "krb5.conf of the realm (with -keytab)")
	principal := flag.String("principal", "", "Kerberos principal to authenticate as (with -keytab)")
	keytab := flag.String("keytab", "", "keytab of -principal: authenticate to HBase with Kerberos")
	serverPrincipal := flag.String("server-principal", "", "HBase servers' principal pattern, e.g. hbase/_HOST@REALM")
	cluster := flag.String("cluster", "", "with -zookeeper: run an HBase cluster command instead of probing "+
		"(regions TABLE...; move TABLE ENCODED_REGION HOST:PORT; balance), its arguments after the flags")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	var (
		msg string
		err error
	)
	switch {
	case *kafka != "":
		msg, err = probeKafka(ctx, *kafka, *brokers)
		if err == nil && *saslAddr != "" {
			var more string
			more, err = probeSASL(ctx, *kafka, *saslAddr, *caFile)
			msg += "; " + more
		}
	case *quorum != "" && *cluster != "":
		msg, err = clusterCommand(ctx, *quorum, *cluster, flag.Args())
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

func probeKafka(ctx context.Context, broker string, want int) (string, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(broker), kgo.RetryTimeout(2*time.Second))
	if err != nil {
		return "", err
	}
	defer cl.Close()
	md, err := kadm.NewClient(cl).BrokerMetadata(ctx)
	if err != nil {
		return "", fmt.Errorf("kafka metadata from %s: %w", broker, err)
	}
	if len(md.Brokers) < want {
		return "", fmt.Errorf("kafka metadata from %s: %d of %d brokers", broker, len(md.Brokers), want)
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

// saslUser is one login of the SASL_SSL listener, as testenv/services.sh env prints it.
type saslUser struct {
	mechanism, env string
	scram          kadm.ScramMechanism // 0 for PLAIN, whose users live in the broker's JAAS config
}

var saslUsers = []saslUser{
	{kafkasec.MechanismPlain, "PLAIN", 0},
	{kafkasec.MechanismSCRAMSHA256, "SCRAM256", kadm.ScramSha256},
	{kafkasec.MechanismSCRAMSHA512, "SCRAM512", kadm.ScramSha512},
}

// probeSASL makes sure the SCRAM users exist (a data folder formatted before they were added at
// format time has none: they are added through the Admin API on the plaintext listener), then
// logs in once per mechanism through the SASL_SSL listener with kafkasec, as the product would.
func probeSASL(ctx context.Context, plaintext, saslAddr, caFile string) (string, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(plaintext), kgo.RetryTimeout(2*time.Second))
	if err != nil {
		return "", err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	var names []string
	for _, u := range saslUsers {
		if u.scram != 0 {
			names = append(names, os.Getenv("ABACUS_KAFKA_SASL_"+u.env+"_USER"))
		}
	}
	described, err := adm.DescribeUserSCRAMs(ctx, names...)
	if err != nil {
		return "", fmt.Errorf("describe SCRAM users on %s: %w", plaintext, err)
	}
	var upserts []kadm.UpsertSCRAM
	var added []string
	for _, u := range saslUsers {
		if u.scram == 0 {
			continue
		}
		name := os.Getenv("ABACUS_KAFKA_SASL_" + u.env + "_USER")
		have := false
		for _, ci := range described[name].CredInfos {
			have = have || ci.Mechanism == u.scram
		}
		if !have {
			upserts = append(upserts, kadm.UpsertSCRAM{User: name, Mechanism: u.scram, Iterations: 8192,
				Password: os.Getenv("ABACUS_KAFKA_SASL_" + u.env + "_PASSWORD")})
			added = append(added, u.mechanism+" "+name)
		}
	}
	if len(upserts) > 0 {
		res, err := adm.AlterUserSCRAMs(ctx, nil, upserts)
		if err == nil {
			err = res.Error()
		}
		if err != nil {
			return "", fmt.Errorf("add SCRAM users on %s: %w", plaintext, err)
		}
	}
	for _, u := range saslUsers {
		c := kafkasec.Config{
			TLS: kafkasec.TLS{Enabled: true, CAFile: caFile},
			SASL: kafkasec.SASL{Mechanism: u.mechanism, Username: os.Getenv("ABACUS_KAFKA_SASL_" + u.env + "_USER"),
				Password: kafkasec.Secret(os.Getenv("ABACUS_KAFKA_SASL_" + u.env + "_PASSWORD"))},
		}
		if err := c.Check(ctx, []string{saslAddr}); err != nil {
			return "", fmt.Errorf("SASL_SSL %s: %w", saslAddr, err)
		}
	}
	msg := "SASL_SSL " + saslAddr + ": PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 log in over TLS"
	if len(added) > 0 {
		msg += " (SCRAM users added to a folder formatted without them: " + strings.Join(added, ", ") + ")"
	}
	return msg, nil
}
