// Package sinkbench measures the facts sink (topic -> HBase cells per second) beside the loop a team
// would write by hand in Java (KafkaConsumer + BufferedMutator + flush + commitSync) on the same
// topic, broker and HBase, in one run. run.sh runs both and prints the ratio.
package sinkbench
