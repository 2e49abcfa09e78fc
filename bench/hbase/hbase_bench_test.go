package hbasebench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/abacus-stream/abacus/bench/internal/proccpu"
	"github.com/abacus-stream/abacus/hbase"
)

// benchCells is the number of cells per run: ABACUS_BENCH_CELLS, default 1,000,000 (the issue's
// workload); smaller while developing.
func benchCells() int {
	if n, err := strconv.Atoi(os.Getenv("ABACUS_BENCH_CELLS")); err == nil && n > 0 {
		return n
	}
	return 1_000_000
}

func quorum(b *testing.B) string {
	q := os.Getenv("ABACUS_HBASE_ZK")
	if q == "" {
		q = "127.0.0.1:2181"
	}
	c, err := net.DialTimeout("tcp", strings.Split(q, ",")[0], 2*time.Second)
	if err != nil {
		msg := fmt.Sprintf("HBase not reachable at %s: %v; start testenv/services.sh", q, err)
		if os.Getenv("ABACUS_REQUIRE_SERVICES") == "1" {
			b.Fatal(msg)
		}
		b.Skip(msg)
	}
	c.Close()
	return q
}

// valueBytes is the size of every cell's value: 100 bytes by default; ABACUS_BENCH_VALUE_BYTES
// sets another size, e.g. to write cells as large as a sink's (a facts cell is about 180 bytes:
// its row, qualifier and the event). Both clients write values of this size.
func valueBytes() int {
	if n, err := strconv.Atoi(os.Getenv("ABACUS_BENCH_VALUE_BYTES")); err == nil && n > 0 {
		return n
	}
	return 100
}

// row i: hex digit i%16 picks one of the 16 regions, then the zero-padded index (as the Java
// program does).
func row(i int) []byte { return fmt.Appendf(nil, "%x-%09d", i%16, i) }

func splitKeys() [][]byte {
	var ks [][]byte
	for i := 1; i < 16; i++ {
		ks = append(ks, []byte(strconv.FormatInt(int64(i), 16)))
	}
	return ks
}

// BenchmarkGoClient writes benchCells cells through Client.Apply (sub-benchmark put) and scans them
// back (scan), reporting cells/s.
func BenchmarkGoClient(b *testing.B) {
	q := quorum(b)
	ctx := context.Background()
	c, err := hbase.NewClient(ctx, hbase.Config{ZooKeeper: q})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	table := fmt.Sprintf("hbtest_gobench_%d", time.Now().UnixNano())
	adm := c.Admin()
	if err := adm.CreateTable(ctx, hbase.TableSpec{Name: table, Families: []hbase.FamilySpec{{Name: "f"}}, SplitKeys: splitKeys()}); err != nil {
		b.Fatal(err)
	}
	defer func() {
		_ = adm.DisableTable(ctx, table)
		_ = adm.DeleteTable(ctx, table)
	}()
	cells := benchCells()
	value := make([]byte, valueBytes())
	rng := rand.New(rand.NewPCG(1, 1))
	for i := range value {
		value[i] = byte(rng.Uint32())
	}
	qual := []byte("q")

	b.Run("put", func(b *testing.B) {
		chunk := 20_000
		if s, err := strconv.Atoi(os.Getenv("ABACUS_BENCH_CHUNK")); err == nil && s > 0 {
			chunk = s
		}
		cpu := proccpu.Take()
		for b.Loop() {
			// Like a sink: build a batch, hand it to Apply, several batches in flight at once.
			var wg sync.WaitGroup
			errc := make(chan error, 1)
			sem := make(chan struct{}, 4)
			for start := 0; start < cells; start += chunk {
				end := min(start+chunk, cells)
				ms := make([]*hbase.Mutation, 0, end-start)
				for i := start; i < end; i++ {
					ms = append(ms, hbase.NewPut(table, row(i)).Add("f", qual, int64(i)+1, value))
				}
				sem <- struct{}{}
				wg.Add(1)
				go func() {
					defer func() { <-sem; wg.Done() }()
					if err := c.Apply(ctx, ms); err != nil {
						select {
						case errc <- err:
						default:
						}
					}
				}()
			}
			wg.Wait()
			select {
			case err := <-errc:
				b.Fatal(err)
			default:
			}
		}
		b.ReportMetric(float64(cells)*float64(b.N)/b.Elapsed().Seconds(), "cells/s")
		used := cpu.Since()
		for unit, v := range used.Metrics(float64(cells) * float64(b.N)) {
			b.ReportMetric(v, unit)
		}
		b.Logf("CPU: %v", used)
	})

	b.Run("scan", func(b *testing.B) {
		for b.Loop() {
			sc := c.Scan(hbase.Scan{Table: table, Caching: 1000, MaxResultSize: 2 << 20})
			n := 0
			for {
				r, err := sc.Next(ctx)
				if err == io.EOF {
					break
				}
				if err != nil {
					b.Fatal(err)
				}
				n += len(r.Cells)
			}
			if n != cells {
				b.Fatalf("scanned %d cells, wrote %d", n, cells)
			}
		}
		b.ReportMetric(float64(cells)*float64(b.N)/b.Elapsed().Seconds(), "cells/s")
	})
}

// BenchmarkJavaClient runs the same workload through HBase's Java client (java/, built by run.sh)
// and reports the cells/s it measured itself, so JVM start-up is not counted against it. It skips
// when the Java program has not been built.
func BenchmarkJavaClient(b *testing.B) {
	q := quorum(b)
	cpFile := filepath.Join("java", "target", "classpath.txt")
	cp, err := os.ReadFile(cpFile)
	if err != nil {
		b.Skipf("Java benchmark not built (%v): run bench/hbase/run.sh", err)
	}
	classpath := filepath.Join("java", "target", "hbase-java-bench-1.jar") + string(os.PathListSeparator) + strings.TrimSpace(string(cp))
	cells := benchCells()
	var put, scan float64
	used := proccpu.Usage{}
	for b.Loop() {
		cmd := exec.Command("java", "-Xmx1g", "-cp", classpath, "abacus.bench.JavaClientBench", q, strconv.Itoa(cells), strconv.Itoa(valueBytes()))
		var stderr, out bytes.Buffer
		cmd.Stderr = &stderr
		pipe, err := cmd.StdoutPipe()
		if err != nil {
			b.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		// The servers' and the program's CPU of the put phase, from the line it prints before the
		// put to the put's report: JVM start-up and the table's creation left out, as the Go
		// benchmark leaves them out.
		var start proccpu.Snapshot
		started := false
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			line := sc.Text()
			out.WriteString(line + "\n")
			if line == "java put-start" {
				start, started = proccpu.Take(), true
				continue
			}
			var phase string
			var n int64
			var secs, rate float64
			if _, err := fmt.Sscanf(line, "java %s cells=%d seconds=%f cells_per_s=%f", &phase, &n, &secs, &rate); err != nil {
				continue
			}
			switch phase {
			case "put":
				put += rate
				if started {
					for r, d := range start.Since() {
						used[r] += d
					}
				}
			case "scan":
				scan += rate
			}
		}
		if err := cmd.Wait(); err != nil {
			b.Fatalf("java bench: %v\n%s\n%s", err, out.Bytes(), stderr.Bytes())
		}
		if put == 0 || scan == 0 {
			b.Fatalf("java bench printed no figures:\n%s\n%s", out.Bytes(), stderr.Bytes())
		}
	}
	b.ReportMetric(put/float64(b.N), "put-cells/s")
	b.ReportMetric(scan/float64(b.N), "scan-cells/s")
	for unit, v := range used.Metrics(float64(cells) * float64(b.N)) {
		b.ReportMetric(v, "put-"+unit)
	}
	b.Logf("CPU of the puts: %v", used)
}
