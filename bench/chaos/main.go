// Command chaos is abacus's failure suite: it runs the whole pipeline (processor, aggregates sink
// and facts sink, each a process of the real abacus binary built with the chaos topology) on the
// real Kafka and HBase of testenv/services.sh, feeds it a generated stream with on-time,
// out-of-order, late, future-dated, malformed and duplicated events, and meanwhile, at random,
// SIGKILLs each role again and again, stops HBase for a while, SIGKILLs HBase (WAL recovery),
// restarts the broker, splits the busiest region of each table and unassigns and assigns regions.
//
// At the end it compares the aggregates and facts tables cell by cell with an oracle computed from
// the stream as it lies in Kafka (package stream) and with a crash-free run of the same stream
// (same cells, one version each, nothing missing, nothing extra), checks that every bad source
// record has its dead letters and every event the oracle judges late for a set its late record
// (nothing else in either topic, repeats identical), prints a summary and exits non-zero on any
// difference.
//
//	go run ./bench/chaos            # the short form CI runs: a few minutes
//	go run ./bench/chaos -long      # ten million events, faults for an hour
//	go run ./bench/chaos -hbase-cluster   # on three region servers: they and meta's are killed
//
// It starts Kafka and HBase through testenv/services.sh on ports of its own (29092, 24181,
// 24000, 24020; KAFKA_PORT and friends override them) with data under testenv/.data/chaos
// (ABACUS_TESTENV_DIR), because it stops and kills them; services already running there are used
// and left running. With -hbase-cluster, HBase is a cluster of three region servers (ZooKeeper
// on 25100, HBASE_CLUSTER_PORT) and Kafka listens on 29192, with data under
// testenv/.data/chaos-cluster, so that both forms can run at once.
package main

import (
	"context"
	"flag"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// options are the run's settings.
type options struct {
	long           bool
	events         int64
	duration       time.Duration // faults are injected for this long, while the stream is produced
	outage         time.Duration // how long HBase stays stopped in an outage
	outages        int
	hbaseKills     int
	brokerRestarts int
	splits         int // per table
	bounces        int // unassign/assign per table
	hbaseCluster   bool
	rsKills        int // -hbase-cluster: region servers other than meta's SIGKILLed
	metaKills      int // -hbase-cluster: hbase:meta's region server SIGKILLed
	moves          int // -hbase-cluster: rounds of region moves and the balancer
	killEvery      time.Duration
	partitions     int
	entities       int
	seed           uint64
	reference      bool
	drainTimeout   time.Duration
	dir            string
	keep           bool
}

func main() {
	o := parseFlags()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ok, err := run(ctx, o)
	if err != nil {
		log.Printf("chaos: %v", err)
		os.Exit(2)
	}
	if !ok {
		os.Exit(1)
	}
}

// parseFlags reads the command line; what it leaves unset takes the short or the long form's
// value.
func parseFlags() *options {
	var o options
	flag.BoolVar(&o.long, "long", false, "the long form: 10M events, faults for an hour, a 5-minute HBase outage (other flags still override)")
	flag.Int64Var(&o.events, "events", 0, "events to generate (default 30000; -long 10000000)")
	flag.DurationVar(&o.duration, "duration", 0, "how long faults are injected while the stream is produced (default 3m; -long 1h)")
	flag.DurationVar(&o.outage, "hbase-outage", 0, "how long HBase stays stopped in an outage (default 40s; -long 5m)")
	flag.IntVar(&o.partitions, "partitions", 0, "source partitions (default 4; -long 8)")
	flag.IntVar(&o.entities, "entities", 200, "distinct entities")
	flag.Uint64Var(&o.seed, "seed", 0, "random seed of the stream and the faults (default: from the clock)")
	flag.BoolVar(&o.reference, "reference", true, "also run the stream through a crash-free pipeline and compare with it")
	flag.StringVar(&o.dir, "dir", "", "folder for logs, configs and processor state (default: a new one under $TMPDIR)")
	flag.BoolVar(&o.keep, "keep", false, "keep tables, topics and the folder even when the run passes")
	flag.BoolVar(&o.hbaseCluster, "hbase-cluster", false, "HBase as a cluster of three region servers (ZooKeeper on HBASE_CLUSTER_PORT, default 25100): region servers and hbase:meta's server are SIGKILLed and regions moved instead of HBase stopped and SIGKILLed")
	flag.Parse()
	o.ensureDefaults()
	return &o
}

// ensureDefaults fills what the flags left unset with the short form's values, or the long
// form's.
func (o *options) ensureDefaults() {
	if o.seed == 0 {
		o.seed = uint64(time.Now().UnixNano())
	}
	def := func(v *int64, short, long int64) {
		if *v == 0 {
			*v = short
			if o.long {
				*v = long
			}
		}
	}
	defd := func(v *time.Duration, short, long time.Duration) {
		if *v == 0 {
			*v = short
			if o.long {
				*v = long
			}
		}
	}
	def(&o.events, 30_000, 10_000_000)
	defd(&o.duration, 3*time.Minute, time.Hour)
	defd(&o.outage, 40*time.Second, 5*time.Minute)
	defd(&o.killEvery, 25*time.Second, 3*time.Minute)
	defd(&o.drainTimeout, 15*time.Minute, 3*time.Hour)
	if o.partitions == 0 {
		o.partitions = 4
		if o.long {
			o.partitions = 8
		}
	}
	o.outages, o.hbaseKills, o.brokerRestarts, o.splits, o.bounces = 1, 1, 1, 2, 1
	if o.long {
		o.hbaseKills, o.brokerRestarts, o.splits, o.bounces = 2, 3, 4, 3
	}
	if o.hbaseCluster {
		// Whole-HBase outages are the standalone form's; a cluster loses one server at a time.
		o.outages, o.hbaseKills = 0, 0
		o.rsKills, o.metaKills, o.moves = 2, 1, 1
		if o.long {
			o.rsKills, o.metaKills, o.moves = 8, 3, 4
		}
	}
}

// form names the run's form in its log and summary.
func (o *options) form() string {
	if o.long {
		return "long"
	}
	return "short"
}
