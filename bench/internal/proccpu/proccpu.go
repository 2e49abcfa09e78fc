// Package proccpu measures the CPU time that the processes of a benchmark run spent, grouped by
// role (region servers, HBase master, ZooKeeper, Kafka brokers, Java peers, the benchmark itself),
// read from Linux's /proc. On a machine whose cores the servers share with the system under test, a
// throughput figure alone cannot say whether one system was slower or only left the servers less
// CPU: the CPU each role took per cell can.
//
// It only reads /proc; it never signals or changes a process. Off Linux a snapshot is empty.
package proccpu

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Roles, as Role names them.
const (
	RegionServer = "regionserver"
	Master       = "hbase-master" // the standalone HBase too: its master runs its region server
	ZooKeeper    = "zookeeper"
	Kafka        = "kafka"
	JavaPeer     = "java-peer" // the benchmarks' Java programs (BufferedMutator loop, Kafka Streams)
	Self         = "self"      // this process
)

// Snapshot is the CPU time (user + system) each process had used when it was taken, by pid,
// with each process's role.
type Snapshot struct {
	cpu  map[int]time.Duration
	role map[int]string
}

// ticks is the kernel's USER_HZ, the unit of /proc/<pid>/stat's times: 100 on every Linux
// architecture Go builds for.
const ticks = 100

// Take reads every process's CPU time that Role recognises, and this process's.
func Take() Snapshot {
	s := Snapshot{cpu: map[int]time.Duration{}, role: map[int]string{}}
	self := os.Getpid()
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		pid, err := strconv.Atoi(filepath.Base(d))
		if err != nil {
			continue
		}
		role := Self
		if pid != self {
			cmd, err := os.ReadFile(filepath.Join(d, "cmdline"))
			if err != nil {
				continue
			}
			if role = Role(cmd); role == "" {
				continue
			}
		}
		if t, ok := cpuOf(d); ok {
			s.cpu[pid], s.role[pid] = t, role
		}
	}
	return s
}

// Role names what a process with this command line (NUL-separated, as /proc/<pid>/cmdline has
// it) is to a benchmark, from its main class; "" for any other process.
func Role(cmdline []byte) string {
	args := bytes.Split(bytes.TrimRight(cmdline, "\x00"), []byte{0})
	if len(args) == 0 || filepath.Base(string(args[0])) != "java" {
		return ""
	}
	for _, a := range args[1:] {
		switch string(a) {
		case "org.apache.hadoop.hbase.regionserver.HRegionServer":
			return RegionServer
		case "org.apache.hadoop.hbase.master.HMaster":
			return Master
		case "org.apache.zookeeper.server.quorum.QuorumPeerMain", "org.apache.zookeeper.server.ZooKeeperServerMain":
			return ZooKeeper
		case "kafka.Kafka":
			return Kafka
		}
		if strings.HasPrefix(string(a), "abacus.bench.") {
			return JavaPeer
		}
	}
	return ""
}

// cpuOf reads utime + stime of /proc/<pid> (dir).
func cpuOf(dir string) (time.Duration, bool) {
	b, err := os.ReadFile(filepath.Join(dir, "stat"))
	if err != nil {
		return 0, false
	}
	// The command name (field 2) is in parentheses and may hold spaces: count fields after the
	// last ')'. utime and stime are fields 14 and 15, so the 12th and 13th after it.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, false
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return time.Duration(u+st) * time.Second / ticks, true
}

// Since is the CPU time each role used from s until now: processes that started meanwhile
// count from zero, those that ended meanwhile are not counted (their time is lost to /proc).
func (s Snapshot) Since() Usage {
	return Take().Minus(s)
}

// Minus is the CPU time each role used between earlier and s.
func (s Snapshot) Minus(earlier Snapshot) Usage {
	u := Usage{}
	for pid, t := range s.cpu {
		if prev, ok := earlier.cpu[pid]; ok && earlier.role[pid] == s.role[pid] {
			t -= prev
		}
		u[s.role[pid]] += t
	}
	return u
}

// Usage is CPU time by role.
type Usage map[string]time.Duration

// Total is the CPU time of every role together.
func (u Usage) Total() time.Duration {
	var t time.Duration
	for _, d := range u {
		t += d
	}
	return t
}

// String lists the roles' CPU seconds, largest first.
func (u Usage) String() string {
	roles := make([]string, 0, len(u))
	for r := range u {
		roles = append(roles, r)
	}
	sort.Slice(roles, func(i, j int) bool { return u[roles[i]] > u[roles[j]] })
	var b strings.Builder
	for i, r := range roles {
		if i > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "%s=%.1fs", r, u[r].Seconds())
	}
	return b.String()
}

// Metrics is what a benchmark reports of a run's CPU: each role's seconds under "<role>-cpu-s"
// and, when work is positive, the region servers' (or the standalone HBase's) CPU seconds per
// million units of work under "hbase-cpu-s/M", the figure that shows whether a system cost the
// servers more for the same cells.
func (u Usage) Metrics(work float64) map[string]float64 {
	m := map[string]float64{}
	for r, d := range u {
		m[r+"-cpu-s"] = d.Seconds()
	}
	if work > 0 {
		m["hbase-cpu-s/M"] = (u[RegionServer] + u[Master]).Seconds() / work * 1e6
	}
	return m
}
