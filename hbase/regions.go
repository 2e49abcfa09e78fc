package hbase

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	"google.golang.org/protobuf/encoding/protowire"
)

// metaRegionName is the region name of hbase:meta's only region in a non-replicated cluster.
var metaRegionName = []byte("hbase:meta,,1")

// metaTableName is the catalog table, which is located through ZooKeeper (or ClientMetaService)
// rather than through itself.
const metaTableName = "hbase:meta"

// invalidate forgets a region location the server refused.
func (c *Client) invalidate(r *region) {
	if r.table == metaTableName {
		c.metaMu.Lock()
		c.metaAddr = ""
		c.metaMu.Unlock()
		return
	}
	c.regions.invalidate(r)
	c.forgetSems("r:" + string(r.name))
}

// relocate updates the cache after the server refused r for a relocate-class error: a
// RegionMovedException that names the new server moves the cached region there (the region's name
// and range do not change in a move, and hbase:meta may still name the old server for a moment);
// anything else forgets r, so the next use looks it up again.
func (c *Client) relocate(r *region, err error) {
	c.relocations.Add(1)
	if r.addr != "" {
		c.serverStats(r.addr).relocations.Add(1)
	}
	var e *Error
	if errors.As(err, &e) && e.MovedTo != "" && r.table != metaTableName {
		moved := *r
		moved.addr = e.MovedTo
		c.regions.add(&moved)
		return
	}
	c.invalidate(r)
}

// forgetSems drops the in-flight semaphores whose key starts with prefix (a region that moved,
// split or was deleted), so the map does not grow with region churn. Requests holding a slot keep
// their reference and release into the old semaphore.
func (c *Client) forgetSems(prefix string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k := range c.sems {
		if strings.HasPrefix(k, prefix) {
			delete(c.sems, k)
		}
	}
}

// region is a cached region location.
type region struct {
	table string // TableName.String()
	name  []byte // full region name: the hbase:meta row key, used in RegionSpecifier
	start []byte
	end   []byte // empty: last region
	addr  string // host:port of the hosting region server
}

func (r *region) contains(key []byte) bool {
	return bytes.Compare(key, r.start) >= 0 && (len(r.end) == 0 || bytes.Compare(key, r.end) < 0)
}

// regionCache holds region locations per table, sorted by start key.
type regionCache struct {
	mu     sync.RWMutex
	tables map[string][]*region
}

func (rc *regionCache) lookup(table string, key []byte) *region {
	rc.mu.RLock()
	defer rc.mu.RUnlock()
	rs := rc.tables[table]
	i := sort.Search(len(rs), func(i int) bool { return bytes.Compare(rs[i].start, key) > 0 }) - 1
	if i >= 0 && rs[i].contains(key) {
		return rs[i]
	}
	return nil
}

// lookupBefore returns the cached region that ends where the region starting at start begins.
func (rc *regionCache) lookupBefore(table string, start []byte) *region {
	rc.mu.RLock()
	defer rc.mu.RUnlock()
	for _, r := range rc.tables[table] {
		if bytes.Equal(r.end, start) {
			return r
		}
	}
	return nil
}

// add caches r, evicting every cached region of its table that overlaps it (a split or merge
// happened since they were cached).
func (rc *regionCache) add(r *region) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.tables == nil {
		rc.tables = map[string][]*region{}
	}
	rs := rc.tables[r.table]
	out := rs[:0:0]
	for _, o := range rs {
		overlap := (len(r.end) == 0 || bytes.Compare(o.start, r.end) < 0) && (len(o.end) == 0 || bytes.Compare(r.start, o.end) < 0)
		if !overlap {
			out = append(out, o)
		}
	}
	out = append(out, r)
	sort.Slice(out, func(i, j int) bool { return bytes.Compare(out[i].start, out[j].start) < 0 })
	rc.tables[r.table] = out
}

// invalidate forgets r, after the server said it does not serve it any more.
func (rc *regionCache) invalidate(r *region) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rs := rc.tables[r.table]
	if len(rs) == 0 {
		return // nothing cached (a client that never looked a region up has no map at all)
	}
	out := rs[:0:0]
	for _, o := range rs {
		if !bytes.Equal(o.name, r.name) {
			out = append(out, o)
		}
	}
	rc.tables[r.table] = out
}

// dropServer forgets every region hosted on addr.
func (rc *regionCache) dropServer(addr string) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for t, rs := range rc.tables {
		out := rs[:0:0]
		for _, o := range rs {
			if o.addr != addr {
				out = append(out, o)
			}
		}
		rc.tables[t] = out
	}
}

// dropAll forgets every cached region (after the balancer moved an unknown set of them).
func (rc *regionCache) dropAll() {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.tables = nil
}

// dropTable forgets a table's regions (after it was deleted or recreated).
func (rc *regionCache) dropTable(table string) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	delete(rc.tables, table)
}

// metaServer returns the host:port of the region server hosting hbase:meta, asking ZooKeeper (or
// ClientMetaService) when it is unknown or refresh is set.
func (c *Client) metaServer(ctx context.Context, refresh bool) (string, error) {
	c.metaMu.Lock()
	defer c.metaMu.Unlock()
	if c.metaAddr != "" && !refresh {
		return c.metaAddr, nil
	}
	var addr string
	if len(c.cfg.Bootstrap) > 0 {
		locs, err := c.bootstrapMetaLocations(ctx)
		if err != nil {
			return "", err
		}
		addr = locs
	} else {
		zctx, cancel := c.zkContext(ctx)
		sn, state, err := ZooKeeperLocator{Quorum: c.quorum, Root: c.cfg.ZooKeeperRoot}.MetaRegionServer(zctx)
		cancel()
		if err != nil {
			return "", &Error{Op: "locate hbase:meta", Kind: KindBackoff, Err: err}
		}
		if state != RegionStateOpen {
			return "", &Error{Op: "locate hbase:meta", Server: sn.Addr(), Kind: KindBackoff,
				Message: fmt.Sprintf("hbase:meta in state %d, not open", state)}
		}
		addr = sn.Addr()
	}
	c.metaAddr = addr
	return addr, nil
}

// masterServer returns the host:port of the active master.
func (c *Client) masterServer(ctx context.Context) (string, error) {
	if len(c.cfg.Bootstrap) > 0 {
		var last error
		for _, b := range c.cfg.Bootstrap {
			resp, _, err := c.rpc(ctx, serviceClientMeta, b, "GetActiveMaster", emptyParam(), nil)
			if err != nil {
				last = err
				continue
			}
			var sn ServerName
			err = eachField(resp, func(num protowire.Number, typ protowire.Type, _ uint64, raw []byte) error {
				if num == 1 && typ == protowire.BytesType {
					var perr error
					sn, perr = parseServerName(raw)
					return perr
				}
				return nil
			})
			if err == nil && sn.Host != "" {
				return sn.Addr(), nil
			}
			last = &Error{Op: "GetActiveMaster", Server: b, Kind: KindBackoff, Message: "no active master", Err: err}
		}
		return "", last
	}
	zctx, cancel := c.zkContext(ctx)
	defer cancel()
	sn, err := ZooKeeperLocator{Quorum: c.quorum, Root: c.cfg.ZooKeeperRoot}.Master(zctx)
	if err != nil {
		return "", &Error{Op: "locate master", Kind: KindBackoff, Err: err}
	}
	return sn.Addr(), nil
}

func emptyParam() *[]byte { return getBuf() }

// locate returns the region of table holding key, from the cache or from hbase:meta.
func (c *Client) locate(ctx context.Context, table string, key []byte) (*region, error) {
	if table == metaTableName {
		addr, err := c.metaServer(ctx, false)
		if err != nil {
			return nil, err
		}
		return &region{table: metaTableName, name: metaRegionName, addr: addr}, nil
	}
	if r := c.regions.lookup(table, key); r != nil {
		return r, nil
	}
	// The region holding key has the greatest meta row <= "table,key,99999999999999".
	metaRow := make([]byte, 0, len(table)+len(key)+16)
	metaRow = append(metaRow, table...)
	metaRow = append(metaRow, ',')
	metaRow = append(metaRow, key...)
	metaRow = append(metaRow, ",99999999999999"...)
	return c.lookupMeta(ctx, table, metaRow, func(r *region) bool { return r.contains(key) })
}

// locateBefore returns the region that ends at start (the previous region, for reversed scans).
func (c *Client) locateBefore(ctx context.Context, table string, start []byte) (*region, error) {
	if r := c.regions.lookupBefore(table, start); r != nil {
		return r, nil
	}
	// Meta rows sort by table, then start key, then region id: "table,start," precedes every region
	// starting at start, so the first row at or before it is the previous region.
	metaRow := make([]byte, 0, len(table)+len(start)+2)
	metaRow = append(metaRow, table...)
	metaRow = append(metaRow, ',')
	metaRow = append(metaRow, start...)
	metaRow = append(metaRow, ',')
	return c.lookupMeta(ctx, table, metaRow, func(r *region) bool { return bytes.Equal(r.end, start) })
}

// lookupMeta runs a one-row reversed scan of hbase:meta from metaRow and caches the region found.
// It makes one attempt: every caller (Apply's rounds, Get's and the scanner's retry loops) already
// retries with backoff, and retrying here too would multiply the waits, once per uncached key.
func (c *Client) lookupMeta(ctx context.Context, table string, metaRow []byte, ok func(*region) bool) (*region, error) {
	op := "locate region of " + table
	c.lookups.Add(1)
	addr, err := c.metaServer(ctx, false)
	if err != nil {
		return nil, err
	}
	p := getBuf()
	*p = appendScanRequest(*p, metaRegionName, &Scan{
		StartRow: metaRow, StopRow: []byte(table + ",,"), Reversed: true, Columns: []Column{{Family: "info"}},
	}, scanParams{includeStop: true, rows: 1, close: true})
	resp, cb, err := c.rpc(ctx, serviceClient, addr, "Scan", p, nil)
	if err != nil {
		var e *Error
		if errors.As(err, &e) && e.Kind == KindRelocate {
			c.invalidate(&region{table: metaTableName}) // hbase:meta moved: ask ZooKeeper again
		}
		return nil, err
	}
	sr, err := parseScanResponse(resp, cb)
	if err != nil {
		return nil, &Error{Op: op, Server: addr, Kind: KindPermanent, Err: err}
	}
	if len(sr.results) == 0 {
		return nil, tableNotFound(table)
	}
	r, err := regionFromMeta(&sr.results[0])
	if err != nil {
		return nil, &Error{Op: op, Server: addr, Kind: KindPermanent, Err: err}
	}
	if r.table != table {
		return nil, tableNotFound(table)
	}
	if r.addr == "" {
		return nil, &Error{Op: op, Kind: KindBackoff, Message: fmt.Sprintf("region %q in transition", r.name),
			Err: &inTransition{r: r}}
	}
	if !ok(r) {
		// A hole in hbase:meta, as a split or merge leaves for a moment.
		return nil, &Error{Op: op, Kind: KindBackoff, Message: fmt.Sprintf("region %q does not cover the key: in transition", r.name)}
	}
	c.regions.add(r)
	return r, nil
}

// inTransition is the cause of a lookup that found its region closed, opening, or split and not
// yet replaced by its daughters in hbase:meta. It keeps the region's range, so that Apply does not
// look up every other key of that range in the same round.
type inTransition struct{ r *region }

func (e *inTransition) Error() string { return "region in transition" }

func tableNotFound(table string) *Error {
	return &Error{Op: "locate region", Class: "org.apache.hadoop.hbase.TableNotFoundException",
		Message: table, Kind: KindPermanent}
}

// locateLast returns the last region of table (the one with an empty end key), where a reversed
// scan without a start row begins.
func (c *Client) locateLast(ctx context.Context, table string) (*region, error) {
	if table == metaTableName {
		return c.locate(ctx, table, nil) // one region: first and last
	}
	if r := c.regions.lookupBefore(table, nil); r != nil {
		return r, nil
	}
	// No start key sorts after 64 0xFF bytes in practice; the reversed meta scan from there finds
	// the table's last region.
	metaRow := make([]byte, 0, len(table)+80)
	metaRow = append(metaRow, table...)
	metaRow = append(metaRow, ',')
	metaRow = append(metaRow, bytes.Repeat([]byte{0xff}, 64)...)
	metaRow = append(metaRow, ",99999999999999"...)
	return c.lookupMeta(ctx, table, metaRow, func(r *region) bool { return len(r.end) == 0 })
}
