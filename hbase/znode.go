package hbase

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strconv"

	"google.golang.org/protobuf/encoding/protowire"
)

// ServerName identifies an HBase server process: where it listens and when it started.
type ServerName struct {
	Host      string
	Port      uint32
	StartCode uint64 // start time of the process: a restarted server has a new one
}

// Addr is the host:port to dial.
func (s ServerName) Addr() string { return net.JoinHostPort(s.Host, strconv.Itoa(int(s.Port))) }

// String gives host:port,startcode.
func (s ServerName) String() string {
	return fmt.Sprintf("%s,%d", s.Addr(), s.StartCode)
}

// RegionState is the state of a region as ZooKeeper records it for hbase:meta.
type RegionState int32

// RegionStateOpen is the only state in which a region serves requests.
const RegionStateOpen RegionState = 3

var errBadZnode = errors.New("hbase: malformed znode")

// parseZnode strips the znode envelope: 0xFF, a 4-byte id length, the id, then "PBUF" and protobuf.
func parseZnode(b []byte) ([]byte, error) {
	if len(b) < 5 || b[0] != 0xFF {
		return nil, fmt.Errorf("%w: no 0xFF magic", errBadZnode)
	}
	n := binary.BigEndian.Uint32(b[1:5])
	if n < 1 || n > 65000 || int(n)+5 > len(b) {
		return nil, fmt.Errorf("%w: id length %d", errBadZnode, n)
	}
	b = b[5+n:]
	if len(b) < 4 || string(b[:4]) != "PBUF" {
		return nil, fmt.Errorf("%w: no PBUF magic", errBadZnode)
	}
	return b[4:], nil
}

// parseServerName decodes a ServerName message {host_name=1, port=2, start_code=3}.
func parseServerName(b []byte) (ServerName, error) {
	var s ServerName
	err := eachField(b, func(num protowire.Number, typ protowire.Type, v uint64, raw []byte) error {
		switch {
		case num == 1 && typ == protowire.BytesType:
			s.Host = string(raw)
		case num == 2 && typ == protowire.VarintType:
			s.Port = uint32(v)
		case num == 3 && typ == protowire.VarintType:
			s.StartCode = v
		}
		return nil
	})
	if err == nil && s.Host == "" {
		err = errors.New("hbase: server name without host")
	}
	return s, err
}

// parseMetaRegionServer decodes the /hbase/meta-region-server znode:
// MetaRegionServer{server=1 ServerName, rpc_version=2, state=3}.
func parseMetaRegionServer(znode []byte) (ServerName, RegionState, error) {
	b, err := parseZnode(znode)
	if err != nil {
		return ServerName{}, 0, err
	}
	var (
		sn    ServerName
		state RegionState = RegionStateOpen // absent means open, as the server reads it
		found bool
	)
	err = eachField(b, func(num protowire.Number, typ protowire.Type, v uint64, raw []byte) error {
		switch {
		case num == 1 && typ == protowire.BytesType:
			var perr error
			sn, perr = parseServerName(raw)
			found = perr == nil
			return perr
		case num == 3 && typ == protowire.VarintType:
			state = RegionState(v)
		}
		return nil
	})
	if err == nil && !found {
		err = fmt.Errorf("%w: meta-region-server without a server", errBadZnode)
	}
	return sn, state, err
}

// parseMaster decodes the /hbase/master znode: Master{master=1 ServerName, rpc_version=2, info_port=3}.
func parseMaster(znode []byte) (ServerName, error) {
	b, err := parseZnode(znode)
	if err != nil {
		return ServerName{}, err
	}
	var sn ServerName
	found := false
	err = eachField(b, func(num protowire.Number, typ protowire.Type, v uint64, raw []byte) error {
		if num == 1 && typ == protowire.BytesType {
			var perr error
			sn, perr = parseServerName(raw)
			found = perr == nil
			return perr
		}
		return nil
	})
	if err == nil && !found {
		err = fmt.Errorf("%w: master without a server", errBadZnode)
	}
	return sn, err
}

// eachField walks the top-level fields of a protobuf message. For varint and fixed fields v holds the
// value; for length-delimited fields raw holds the bytes (aliasing b).
func eachField(b []byte, fn func(num protowire.Number, typ protowire.Type, v uint64, raw []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("hbase: bad protobuf tag: %w", protowire.ParseError(n))
		}
		b = b[n:]
		var (
			v   uint64
			raw []byte
		)
		switch typ {
		case protowire.VarintType:
			v, n = protowire.ConsumeVarint(b)
		case protowire.Fixed32Type:
			var x uint32
			x, n = protowire.ConsumeFixed32(b)
			v = uint64(x)
		case protowire.Fixed64Type:
			v, n = protowire.ConsumeFixed64(b)
		case protowire.BytesType:
			raw, n = protowire.ConsumeBytes(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return fmt.Errorf("hbase: bad protobuf field %d: %w", num, protowire.ParseError(n))
		}
		b = b[n:]
		if err := fn(num, typ, v, raw); err != nil {
			return err
		}
	}
	return nil
}
