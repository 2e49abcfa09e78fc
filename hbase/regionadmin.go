package hbase

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"

	"google.golang.org/protobuf/encoding/protowire"
)

// This file holds region administration: listing a table's regions as hbase:meta records them,
// their load on the region servers, and the master procedures that split, unassign, assign and
// move them. Operators and the failure tests use them; the write and read paths never do.

// serviceAdmin is the region servers' AdminService (GetRegionLoad, GetOnlineRegion, ...).
const serviceAdmin = "AdminService"

// RegionInfo is one region of a table as its hbase:meta row describes it.
type RegionInfo struct {
	Table       string // "table" or "ns:table"
	Name        []byte // full region name: the hbase:meta row key, "<table>,<start>,<id>.<encoded>."
	EncodedName string // the MD5 hex suffix of Name, which master RPCs such as MoveRegion take
	ID          uint64 // region id: its creation time in ms; a daughter's is newer than its parent's
	StartKey    []byte // inclusive; empty for the first region
	EndKey      []byte // exclusive; empty for the last region
	// Server is host:port of the server the region is open on, "" when meta names none.
	Server string
	// ServerStartCode is that server's start code (info:serverstartcode): with Server, the
	// ServerName a move to it names ("host:port,startcode").
	ServerStartCode uint64
	// State is meta's info:state (OPEN, OPENING, CLOSING, CLOSED, SPLITTING, SPLIT, MERGED, ...),
	// "" when the row has none.
	State string
	// Offline and Split mark a split parent: it serves nothing, its daughters do.
	Offline, Split bool
}

// Serving reports whether meta says the region is open on a server and is not a split parent.
func (r *RegionInfo) Serving() bool {
	return r.Server != "" && !r.Offline && !r.Split && (r.State == "" || r.State == "OPEN")
}

// Contains reports whether row belongs to the region's key range.
func (r *RegionInfo) Contains(row []byte) bool {
	return bytes.Compare(row, r.StartKey) >= 0 && (len(r.EndKey) == 0 || bytes.Compare(row, r.EndKey) < 0)
}

// encodedName returns the encoded name at the end of a region name "<table>,<start>,<id>.<enc>.",
// or "" for names without one.
func encodedName(name []byte) string {
	if len(name) < 2 || name[len(name)-1] != '.' {
		return ""
	}
	i := bytes.LastIndexByte(name[:len(name)-1], '.')
	if i < 0 {
		return ""
	}
	return string(name[i+1 : len(name)-1])
}

// Regions lists every region of table that hbase:meta holds, in start-key order, split parents
// and regions in transition included (see RegionInfo.Serving).
func (a *Admin) Regions(ctx context.Context, table string) ([]RegionInfo, error) {
	tn := ParseTableName(table).String()
	// hbase:meta compares rows by table, start key and id, not bytewise: its rows of a table run
	// from "<table>,," to before "<table> ,," (a space sorts before every character a table name
	// may continue with). A scan from "<table>," would miss the first region, whose start key is
	// empty.
	sc := a.c.Scan(Scan{Table: metaTableName, StartRow: []byte(tn + ",,"), StopRow: []byte(tn + " ,,"),
		Columns: []Column{{Family: "info"}}})
	defer sc.Close()
	var out []RegionInfo
	for {
		res, err := sc.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("hbase: regions of %s: %w", table, err)
		}
		ri, err := regionInfoFromMeta(res)
		if err != nil {
			return nil, &Error{Op: "regions of " + table, Kind: KindPermanent, Err: err}
		}
		if ri.Table == tn {
			out = append(out, ri)
		}
	}
	if len(out) == 0 {
		return nil, tableNotFound(table)
	}
	sort.SliceStable(out, func(i, j int) bool {
		if c := bytes.Compare(out[i].StartKey, out[j].StartKey); c != 0 {
			return c < 0
		}
		return out[i].ID < out[j].ID
	})
	return out, nil
}

// regionInfoFromMeta reads an hbase:meta row: info:regioninfo ("PBUF" + RegionInfo), info:server
// and info:state.
func regionInfoFromMeta(res *Result) (RegionInfo, error) {
	var out RegionInfo
	have := false
	for _, cell := range res.Cells {
		if string(cell.Family) != "info" {
			continue
		}
		switch string(cell.Qualifier) {
		case "regioninfo":
			v := cell.Value
			if len(v) < 4 || string(v[:4]) != "PBUF" {
				return out, fmt.Errorf("meta row %q: regioninfo without PBUF", cell.Row)
			}
			ri, err := parseRegionInfo(v[4:])
			if err != nil {
				return out, fmt.Errorf("meta row %q: %w", cell.Row, err)
			}
			have = true
			out.Table = ri.table.String()
			out.ID = ri.regionID
			out.StartKey, out.EndKey = bytes.Clone(ri.start), bytes.Clone(ri.end)
			out.Offline, out.Split = ri.offline, ri.split
			out.Name = bytes.Clone(cell.Row)
			out.EncodedName = encodedName(out.Name)
		case "server":
			out.Server = string(cell.Value)
		case "serverstartcode":
			if len(cell.Value) == 8 {
				out.ServerStartCode = binary.BigEndian.Uint64(cell.Value)
			}
		case "state":
			out.State = string(cell.Value)
		}
	}
	if !have {
		return out, fmt.Errorf("meta row %q without info:regioninfo", res.Row())
	}
	return out, nil
}

// RegionLoad is what a region server reports about one of its regions.
type RegionLoad struct {
	Name          []byte // full region name
	ReadRequests  uint64 // since the region opened on this server
	WriteRequests uint64 // since the region opened on this server
	StoreFiles    uint32
	MemStoreMB    uint32
}

// RegionLoads asks every server hosting a region of table for the load of the table's regions
// (AdminService.GetRegionLoad), keyed by full region name.
func (a *Admin) RegionLoads(ctx context.Context, table string) (map[string]RegionLoad, error) {
	regions, err := a.Regions(ctx, table)
	if err != nil {
		return nil, err
	}
	servers := map[string]bool{}
	for _, r := range regions {
		if r.Server != "" {
			servers[r.Server] = true
		}
	}
	out := map[string]RegionLoad{}
	for addr := range servers {
		p := getBuf()
		*p = appendTableName(*p, 1, ParseTableName(table))
		resp, _, err := a.c.rpc(ctx, serviceAdmin, addr, "GetRegionLoad", p, nil)
		if err != nil {
			return nil, fmt.Errorf("hbase: region load of %s on %s: %w", table, addr, err)
		}
		err = eachField(resp, func(num protowire.Number, typ protowire.Type, _ uint64, raw []byte) error {
			if num != 1 || typ != protowire.BytesType {
				return nil
			}
			l, err := parseRegionLoad(raw)
			if err == nil {
				out[string(l.Name)] = l
			}
			return err
		})
		if err != nil {
			return nil, &Error{Op: "region load of " + table, Server: addr, Kind: KindPermanent, Err: err}
		}
	}
	return out, nil
}

// parseRegionLoad decodes RegionLoad{region_specifier=1 RegionSpecifier{type=1, value=2},
// storefiles=3, mem_store_size_MB=6, read_requests_count=8, write_requests_count=9}.
func parseRegionLoad(b []byte) (RegionLoad, error) {
	var l RegionLoad
	err := eachField(b, func(num protowire.Number, typ protowire.Type, v uint64, raw []byte) error {
		switch {
		case num == 1 && typ == protowire.BytesType:
			return eachField(raw, func(num protowire.Number, typ protowire.Type, _ uint64, raw []byte) error {
				if num == 2 && typ == protowire.BytesType {
					l.Name = bytes.Clone(raw)
				}
				return nil
			})
		case num == 3 && typ == protowire.VarintType:
			l.StoreFiles = uint32(v)
		case num == 6 && typ == protowire.VarintType:
			l.MemStoreMB = uint32(v)
		case num == 8 && typ == protowire.VarintType:
			l.ReadRequests = v
		case num == 9 && typ == protowire.VarintType:
			l.WriteRequests = v
		}
		return nil
	})
	return l, err
}

// SplitRegion splits region r at splitRow (which must lie strictly inside it) and waits until the
// master's split procedure finished: the parent is offline and both daughters are open. Writers
// still holding the parent's location get NotServingRegionException and relocate.
func (a *Admin) SplitRegion(ctx context.Context, r RegionInfo, splitRow []byte) error {
	if len(splitRow) == 0 || !r.Contains(splitRow) || bytes.Equal(splitRow, r.StartKey) {
		return errInvalid("split region", "split row %q is not inside region %q", splitRow, r.Name)
	}
	p := getBuf()
	// SplitTableRegionRequest{region_info=1 RegionInfo{region_id=1, table_name=2, start_key=3,
	// end_key=4}, split_row=2}: the master finds the region by these.
	*p = appendMessage(*p, 1, func(b []byte) []byte {
		b = appendVarintField(b, 1, r.ID)
		b = appendTableName(b, 2, ParseTableName(r.Table))
		b = appendBytesField(b, 3, r.StartKey)
		return appendBytesField(b, 4, r.EndKey)
	})
	*p = appendBytesField(*p, 2, splitRow)
	err := a.procedure(ctx, fmt.Sprintf("split region %q", r.Name), "SplitRegion", p)
	a.c.invalidate(&region{table: r.Table, name: r.Name})
	return err
}

// UnassignRegion closes the region (given by its full name) on its server and leaves it closed
// until AssignRegion. The master answers once the close finished.
func (a *Admin) UnassignRegion(ctx context.Context, name []byte) error {
	p := getBuf()
	*p = appendRegionSpecifier(*p, 1, name)
	_, err := a.call(ctx, fmt.Sprintf("unassign region %q", name), "UnassignRegion", p)
	return err
}

// AssignRegion opens a closed region (given by its full name) on a server the master picks. The
// master answers once the open finished.
func (a *Admin) AssignRegion(ctx context.Context, name []byte) error {
	p := getBuf()
	*p = appendRegionSpecifier(*p, 1, name)
	_, err := a.call(ctx, fmt.Sprintf("assign region %q", name), "AssignRegion", p)
	return err
}

// MoveRegion moves the region (given by its full name) to dest ("host:port,startcode", as
// ServerName.String gives it), or to a server the master picks when dest is empty. The master
// answers once the move finished. On a single region server there is nowhere to move to.
func (a *Admin) MoveRegion(ctx context.Context, name []byte, dest string) error {
	enc := encodedName(name)
	if enc == "" {
		return errInvalid("move region", "region name %q has no encoded name", name)
	}
	p := getBuf()
	// MoveRegionRequest{region=1 RegionSpecifier{type=ENCODED_REGION_NAME(2)}, dest_server_name=2}.
	*p = appendMessage(*p, 1, func(b []byte) []byte {
		b = appendVarintField(b, 1, 2)
		return appendStringField(b, 2, enc)
	})
	if dest != "" {
		sn, err := parseServerNameString(dest)
		if err != nil {
			putBuf(p)
			return errInvalid("move region", "%v", err)
		}
		*p = appendMessage(*p, 2, func(b []byte) []byte {
			b = appendStringField(b, 1, sn.Host)
			b = appendVarintField(b, 2, uint64(sn.Port))
			return appendVarintField(b, 3, sn.StartCode)
		})
	}
	_, err := a.call(ctx, fmt.Sprintf("move region %q", name), "MoveRegion", p)
	a.c.invalidate(&region{table: regionTable(name), name: name})
	return err
}

// BalanceResult is what the master's balancer did.
type BalanceResult struct {
	Ran             bool // false when the master would not run it (regions in transition, balancer off)
	MovesCalculated int
	MovesExecuted   int
}

// Balance runs the master's balancer once and answers when its moves are done.
func (a *Admin) Balance(ctx context.Context) (BalanceResult, error) {
	resp, err := a.call(ctx, "balance", "Balance", getBuf()) // BalanceRequest{}: no dry run
	if err != nil {
		return BalanceResult{}, err
	}
	var out BalanceResult
	err = eachField(resp, func(num protowire.Number, typ protowire.Type, v uint64, _ []byte) error {
		if typ != protowire.VarintType {
			return nil
		}
		switch num {
		case 1:
			out.Ran = v != 0
		case 2:
			out.MovesCalculated = int(v)
		case 3:
			out.MovesExecuted = int(v)
		}
		return nil
	})
	if err != nil {
		return BalanceResult{}, &Error{Op: "balance response", Kind: KindPermanent, Err: err}
	}
	// Regions moved: cached locations are stale, and each would cost a failed request to learn.
	a.c.regions.dropAll()
	return out, nil
}

// SetBalancerRunning switches the master's periodic balancer on or off and returns whether it was
// on. Tests that move regions themselves switch it off first.
func (a *Admin) SetBalancerRunning(ctx context.Context, on bool) (bool, error) {
	p := getBuf()
	*p = appendBoolField(*p, 1, on)
	*p = appendBoolField(*p, 2, true) // synchronous: wait for a balance in progress
	resp, err := a.call(ctx, "set balancer running", "SetBalancerRunning", p)
	if err != nil {
		return false, err
	}
	prev := false
	err = eachField(resp, func(num protowire.Number, typ protowire.Type, v uint64, _ []byte) error {
		if num == 1 && typ == protowire.VarintType {
			prev = v != 0
		}
		return nil
	})
	return prev, err
}

// ServerName is the region's server as a move names it ("host:port,startcode"), "" when meta
// names none.
func (r RegionInfo) ServerName() string {
	if r.Server == "" {
		return ""
	}
	return r.Server + "," + strconv.FormatUint(r.ServerStartCode, 10)
}

// regionTable is the table part of a full region name.
func regionTable(name []byte) string {
	if i := bytes.IndexByte(name, ','); i >= 0 {
		return string(name[:i])
	}
	return string(name)
}

// parseServerNameString reads "host:port,startcode" (ServerName.String) or "host,port,startcode"
// (as hbase:meta's info:sn and the Java shell spell it).
func parseServerNameString(s string) (ServerName, error) {
	var host, port, code string
	if parts := strings.Split(s, ","); len(parts) == 3 {
		host, port, code = parts[0], parts[1], parts[2]
	} else if hp, c, ok := strings.Cut(s, ","); ok {
		i := strings.LastIndexByte(hp, ':')
		if i < 0 {
			return ServerName{}, fmt.Errorf("server name %q is not host:port,startcode", s)
		}
		host, port, code = hp[:i], hp[i+1:], c
	} else {
		return ServerName{}, fmt.Errorf("server name %q is not host:port,startcode", s)
	}
	p, err1 := strconv.ParseUint(port, 10, 16)
	sc, err2 := strconv.ParseUint(code, 10, 64)
	if err1 != nil || err2 != nil || host == "" {
		return ServerName{}, fmt.Errorf("server name %q is not host:port,startcode", s)
	}
	return ServerName{Host: host, Port: uint32(p), StartCode: sc}, nil
}

// SplitPoint returns a row to split region r at: the middle one of its first rows (at most
// 4,000 are read). It fails when the region holds fewer than two rows. HBase can choose a
// split point itself only from flushed store files; this works on rows still in the memstore too.
func (a *Admin) SplitPoint(ctx context.Context, r RegionInfo) ([]byte, error) {
	const maxRows = 4000
	sc := a.c.Scan(Scan{Table: r.Table, StartRow: r.StartKey, StopRow: r.EndKey, Caching: maxRows, MaxResultSize: 4 << 20})
	defer sc.Close()
	var rows [][]byte
	for len(rows) < maxRows {
		res, err := sc.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("hbase: split point of %q: %w", r.Name, err)
		}
		rows = append(rows, bytes.Clone(res.Row()))
	}
	if len(rows) < 2 {
		return nil, errInvalid("split point", "region %q holds %d rows: too few to split", r.Name, len(rows))
	}
	return rows[len(rows)/2], nil
}
