// Package hbase is a native Go client for Apache HBase 2.x, speaking the HBase RPC protocol directly.
//
// It exists because no Go HBase client is available to abacus; it is kept small and self-contained
// (it imports nothing else from abacus) so it could be published on its own. It finds the cluster
// through ZooKeeper or, where the server offers it, through ClientMetaService.
//
// It must never write a cell whose timestamp the caller did not state: a Put without a timestamp is
// refused unless the caller asks for server time by name.
package hbase
