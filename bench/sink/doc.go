// Package sinkbench measures the facts sink (topic -> HBase cells per second) beside the loop a team
// would write by hand in Java (KafkaConsumer + BufferedMutator + flush + commitSync) and beside the
// native client's Apply of the very same cells, on the same topic, broker and HBase, with the CPU
// each process spent; BenchmarkSideBySide interleaves them over rounds and reports medians, and
// BenchmarkRegionServerKill measures the resume after a region server's SIGKILL. run.sh runs them
// and prints the ratios.
package sinkbench
