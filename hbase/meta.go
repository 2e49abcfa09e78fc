package hbase

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
)

// bootstrapMetaLocations asks ClientMetaService on the bootstrap servers where hbase:meta is.
func (c *Client) bootstrapMetaLocations(ctx context.Context) (string, error) {
	var last error
	for _, b := range c.cfg.Bootstrap {
		resp, _, err := c.rpc(ctx, serviceClientMeta, b, "GetMetaRegionLocations", emptyParam(), nil)
		if err != nil {
			last = err
			continue
		}
		addr, err := parseMetaLocations(resp)
		if err == nil {
			return addr, nil
		}
		last = &Error{Op: "GetMetaRegionLocations", Server: b, Kind: KindBackoff, Err: err}
	}
	return "", last
}

// parseMetaLocations decodes GetMetaRegionLocationsResponse{meta_locations=1 RegionLocation{
// region_info=1, server_name=2, seq_num=3}} and returns the primary replica's server.
func parseMetaLocations(b []byte) (string, error) {
	var addr string
	err := eachField(b, func(num protowire.Number, typ protowire.Type, _ uint64, raw []byte) error {
		if num != 1 || typ != protowire.BytesType {
			return nil
		}
		var sn ServerName
		var ri regionInfo
		err := eachField(raw, func(num protowire.Number, typ protowire.Type, _ uint64, raw []byte) error {
			var err error
			switch {
			case num == 1 && typ == protowire.BytesType:
				ri, err = parseRegionInfo(raw)
			case num == 2 && typ == protowire.BytesType:
				sn, err = parseServerName(raw)
			}
			return err
		})
		if err != nil {
			return err
		}
		if ri.replicaID == 0 && sn.Host != "" && addr == "" {
			addr = sn.Addr()
		}
		return nil
	})
	if err == nil && addr == "" {
		err = errors.New("no primary meta location")
	}
	return addr, err
}

type regionInfo struct {
	regionID   uint64
	table      TableName
	start, end []byte
	offline    bool
	split      bool
	replicaID  int32
}

// parseRegionInfo decodes RegionInfo{region_id=1, table_name=2, start_key=3, end_key=4, offline=5,
// split=6, replica_id=7}.
func parseRegionInfo(b []byte) (regionInfo, error) {
	var ri regionInfo
	err := eachField(b, func(num protowire.Number, typ protowire.Type, v uint64, raw []byte) error {
		switch {
		case num == 1 && typ == protowire.VarintType:
			ri.regionID = v
		case num == 2 && typ == protowire.BytesType:
			t, err := parseTableName(raw)
			ri.table = t
			return err
		case num == 3 && typ == protowire.BytesType:
			ri.start = raw
		case num == 4 && typ == protowire.BytesType:
			ri.end = raw
		case num == 5 && typ == protowire.VarintType:
			ri.offline = v != 0
		case num == 6 && typ == protowire.VarintType:
			ri.split = v != 0
		case num == 7 && typ == protowire.VarintType:
			ri.replicaID = int32(v)
		}
		return nil
	})
	return ri, err
}

func parseTableName(b []byte) (TableName, error) {
	var t TableName
	err := eachField(b, func(num protowire.Number, typ protowire.Type, _ uint64, raw []byte) error {
		switch {
		case num == 1 && typ == protowire.BytesType:
			t.Namespace = string(raw)
		case num == 2 && typ == protowire.BytesType:
			t.Qualifier = string(raw)
		}
		return nil
	})
	return t, err
}

// regionFromMeta builds a region from an hbase:meta row: info:regioninfo ("PBUF" + RegionInfo),
// info:server (host:port, empty while unassigned) and info:state (OPEN, or the transition it is
// in; rows written before HBase 2 have none).
func regionFromMeta(res *Result) (*region, error) {
	r := &region{}
	var haveInfo bool
	var ri regionInfo
	var state string
	for _, cell := range res.Cells {
		if string(cell.Family) != "info" {
			continue
		}
		switch string(cell.Qualifier) {
		case "regioninfo":
			v := cell.Value
			if len(v) < 4 || string(v[:4]) != "PBUF" {
				return nil, fmt.Errorf("meta row %q: regioninfo without PBUF", cell.Row)
			}
			var err error
			if ri, err = parseRegionInfo(v[4:]); err != nil {
				return nil, fmt.Errorf("meta row %q: %w", cell.Row, err)
			}
			haveInfo = true
			r.name = bytes.Clone(cell.Row)
		case "server":
			r.addr = string(cell.Value)
		case "state":
			state = string(cell.Value)
		}
	}
	if !haveInfo {
		return nil, fmt.Errorf("meta row %q without info:regioninfo", res.Row())
	}
	r.table = ri.table.String()
	r.start, r.end = bytes.Clone(ri.start), bytes.Clone(ri.end)
	if ri.offline || ri.split {
		r.addr = "" // a split parent or offline region serves nothing: treat as in transition
	}
	if state != "" && state != "OPEN" {
		// info:server keeps the last server of a closed region (unassigned, being moved or split):
		// sending there would only earn a NotServingRegionException. Wait for it to open.
		r.addr = ""
	}
	return r, nil
}
