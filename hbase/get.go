package hbase

import (
	"context"
	"errors"

	"google.golang.org/protobuf/encoding/protowire"
)

// Get describes a single-row read.
type Get struct {
	Table       string    // "table" or "ns:table"
	Row         []byte    // row key
	Columns     []Column  // families or columns to read; none means all
	TimeRange   TimeRange // versions to consider; zero means all time
	MaxVersions int       // 0 means 1, AllVersions means all
}

// Get reads one row. A row with no (matching) cells gives a Result with no cells.
func (c *Client) Get(ctx context.Context, g Get) (*Result, error) {
	if g.Table == "" || len(g.Row) == 0 {
		return nil, errInvalid("get", "table %q row %q", g.Table, g.Row)
	}
	var last error
	rt := retries{c: c}
	for round := range c.cfg.MaxRounds {
		if round > 0 {
			if err := rt.wait(ctx, last); err != nil {
				return nil, &Error{Op: "get", Kind: KindBackoff, Err: errors.Join(err, last)}
			}
		}
		r, err := c.locate(ctx, g.Table, g.Row)
		if err != nil {
			if retryHere(err) {
				last = err
				continue
			}
			return nil, err
		}
		p := getBuf()
		*p = appendGetRequest(*p, r.name, &g)
		resp, cb, err := c.rpc(ctx, serviceClient, r.addr, "Get", p, nil)
		if err != nil {
			var e *Error
			if errors.As(err, &e) && e.Kind == KindRelocate {
				c.relocate(r, err)
			}
			if retryHere(err) {
				last = err
				continue
			}
			return nil, err
		}
		var res Result
		cr := cellReader{b: cb}
		err = eachField(resp, func(num protowire.Number, typ protowire.Type, _ uint64, raw []byte) error {
			if num == 1 && typ == protowire.BytesType {
				var err error
				res, err = parseResult(raw, &cr)
				return err
			}
			return nil
		})
		if err != nil {
			return nil, &Error{Op: "get response", Server: r.addr, Kind: KindPermanent, Err: err}
		}
		return &res, nil
	}
	return nil, last
}

// appendGetRequest appends GetRequest{region=1, get=2 Get{row=1, column=2, time_range=5,
// max_versions=6}}.
func appendGetRequest(b []byte, regionName []byte, g *Get) []byte {
	b = appendRegionSpecifier(b, 1, regionName)
	return appendMessage(b, 2, func(b []byte) []byte {
		b = appendBytesField(b, 1, g.Row)
		b = appendColumns(b, 2, g.Columns)
		b = appendTimeRange(b, 5, g.TimeRange)
		if g.MaxVersions > 1 {
			b = appendVarintField(b, 6, uint64(g.MaxVersions))
		}
		return b
	})
}
