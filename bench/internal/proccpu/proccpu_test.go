package proccpu

import (
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestRole(t *testing.T) {
	for cmd, want := range map[string]string{
		"java\x00-Xmx384m\x00-cp\x00x.jar\x00org.apache.hadoop.hbase.regionserver.HRegionServer\x00start\x00": RegionServer,
		"/usr/bin/java\x00-cp\x00y\x00org.apache.hadoop.hbase.master.HMaster\x00start\x00":                    Master,
		"java\x00org.apache.zookeeper.server.quorum.QuorumPeerMain\x00zoo.cfg\x00":                            ZooKeeper,
		"java\x00-Xmx1g\x00kafka.Kafka\x00server.properties\x00":                                              Kafka,
		"java\x00-cp\x00a.jar\x00abacus.bench.SinkLoop\x00127.0.0.1:9092\x00":                                 JavaPeer,
		"java\x00-jar\x00other.jar\x00":                                                                       "",
		"/bin/bash\x00-c\x00echo kafka.Kafka\x00":                                                             "",
		"": "",
		"go\x00test\x00org.apache.hadoop.hbase.master.HMaster\x00": "",
	} {
		if got := Role([]byte(cmd)); got != want {
			t.Errorf("Role(%q) = %q, want %q", strings.ReplaceAll(cmd, "\x00", " "), got, want)
		}
	}
}

// TestSelfCPU burns CPU until the kernel's own account of this process (getrusage) says it spent
// 300 ms, and checks that the snapshot's difference shows about that, and nothing like twice it.
// It counts CPU, not wall time: on a loaded machine a 300 ms busy loop gets far less of a core.
func TestSelfCPU(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc: Linux only")
	}
	rusage := func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			t.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	s := Take()
	before := rusage()
	x := 0
	for rusage()-before < 300*time.Millisecond {
		for i := range 100_000 {
			x += i * i
		}
	}
	_ = x
	u := s.Since()
	spent := rusage() - before
	if got := u[Self]; got < spent/2 || got > 2*spent {
		t.Fatalf("self CPU over a busy loop that spent %v: %v (usage %v)", spent, got, u)
	}
	if u.Total() < u[Self] {
		t.Fatalf("total %v below self %v", u.Total(), u[Self])
	}
	if !strings.Contains(u.String(), "self=") {
		t.Fatalf("String() = %q, want self listed", u.String())
	}
}

func TestMetrics(t *testing.T) {
	u := Usage{RegionServer: 3 * time.Second, Master: time.Second, Kafka: 500 * time.Millisecond}
	m := u.Metrics(2e6)
	if m["regionserver-cpu-s"] != 3 || m["kafka-cpu-s"] != 0.5 || m["hbase-cpu-s/M"] != 2 {
		t.Fatalf("Metrics(2e6) = %v", m)
	}
	if _, ok := u.Metrics(0)["hbase-cpu-s/M"]; ok {
		t.Fatal("Metrics(0) reports a per-work figure")
	}
}
