// Package hbasebench measures the native HBase client (package hbase) against HBase's own Java
// client on the same workload: batched Puts of 1M cells with 100-byte values into a 16-region table,
// then a full scan of them. It holds benchmarks only; run.sh runs both clients in one go and prints
// cells/s for each and their ratio.
package hbasebench
