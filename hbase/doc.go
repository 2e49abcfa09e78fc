// Package hbase is a native Go client for Apache HBase 2.x, speaking the HBase RPC protocol directly.
//
// It exists because no Go HBase client is available to abacus; it is kept small and self-contained
// (it imports nothing else from abacus) so it could be published on its own. It finds the cluster
// through ZooKeeper or, where the server offers it, through ClientMetaService (WithBootstrap).
//
// The surface is narrow, for sinks and query code:
//
//	c, err := hbase.NewClient(ctx, hbase.Config{ZooKeeper: "zk1:2181,zk2:2181"})
//	defer c.Close()
//	err = c.Apply(ctx, []*hbase.Mutation{
//		hbase.NewPut("aggregates", row).Add("t", qualifier, windowEndMillis, value),
//	})                                  // nil, or a *BatchError with one outcome per mutation
//	res, err := c.Get(ctx, hbase.Get{Table: "aggregates", Row: row})
//	sc := c.Scan(hbase.Scan{Table: "aggregates", Prefix: []byte("device|")})
//	for r, err := sc.Next(ctx); err == nil; r, err = sc.Next(ctx) { ... } // io.EOF at the end
//	err = c.Admin().CreateTable(ctx, hbase.TableSpec{Name: "aggregates", Families: ..., SplitKeys: ...})
//
// A cluster that requires Kerberos (hbase.security.authentication=kerberos) is reached with
// Config.Auth = AuthKerberos and Config.Kerberos (principal and keytab, or kinit's ticket cache):
// SASL GSSAPI on every connection, with the protection (authentication, integrity, privacy) the
// cluster's hbase.rpc.protection allows. Credentials problems wrap ErrAuthentication.
//
// Errors are *Error values (or a *BatchError of them) whose Kind says whether a retry can help:
// KindPermanent errors (no such family, cell too large, table missing, do_not_retry) are never
// resent by the client and must be dead-lettered by callers; IsRetriable tells them apart.
//
// It must never write a cell whose timestamp the caller did not state: every Put cell takes an
// explicit timestamp, and server time is used only when the caller passes ServerTimestamp by name.
// Durability defaults to the table's (SYNC_WAL unless the table says otherwise); SkipWAL only when a
// mutation asks for it by name.
package hbase
