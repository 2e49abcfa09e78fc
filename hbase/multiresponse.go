package hbase

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
)

// readMultiResponse matches MultiResponse{regionActionResult=1 RegionActionResult{
// resultOrException=1 ResultOrException{index=1, result=2, exception=3 NameBytesPair}, exception=2}}
// to the request's actions. Region results come in request order; actions are matched by index.
func (c *Client) readMultiResponse(resp, _ []byte, req *multiRequest, errs []error) []int {
	// Map the request's action numbers back to mutation indexes.
	var actions []int
	for _, ra := range req.regions {
		actions = append(actions, ra.idx...)
	}
	seen := make([]bool, len(actions))
	var retry []int
	relocated := map[int]bool{}
	ri := 0
	fail := func(a int, err *Error) {
		i := actions[a]
		errs[i] = err
		if err.Retriable() {
			retry = append(retry, i)
		}
	}
	err := eachField(resp, func(num protowire.Number, typ protowire.Type, _ uint64, raw []byte) error {
		if num != 1 || typ != protowire.BytesType {
			return nil
		}
		if ri >= len(req.regions) {
			return fmt.Errorf("more region results than regions (%d)", len(req.regions))
		}
		ra := req.regions[ri]
		first := 0
		for _, prev := range req.regions[:ri] {
			first += len(prev.idx)
		}
		ri++
		return eachField(raw, func(num protowire.Number, typ protowire.Type, _ uint64, raw []byte) error {
			switch {
			case num == 1 && typ == protowire.BytesType:
				idx := -1
				var exc *Error
				err := eachField(raw, func(num protowire.Number, typ protowire.Type, v uint64, raw []byte) error {
					switch {
					case num == 1 && typ == protowire.VarintType:
						idx = int(v)
					case num == 3 && typ == protowire.BytesType:
						exc = parseNameBytesPair(raw, "multi", req.addr)
					}
					return nil
				})
				if err != nil {
					return err
				}
				if idx < first || idx >= first+len(ra.idx) || seen[idx] {
					return fmt.Errorf("result for action %d outside region %q", idx, ra.r.name)
				}
				seen[idx] = true
				if exc != nil {
					if exc.Kind == KindRelocate && !relocated[ri] {
						relocated[ri] = true
						c.relocate(ra.r, exc)
					}
					fail(idx, exc)
				} else {
					errs[actions[idx]] = nil
				}
			case num == 2 && typ == protowire.BytesType:
				// The whole region failed (e.g. NotServingRegion): every action of it.
				exc := parseNameBytesPair(raw, "multi", req.addr)
				if exc.Kind == KindRelocate {
					c.relocate(ra.r, exc)
				}
				for a := first; a < first+len(ra.idx); a++ {
					if !seen[a] {
						seen[a] = true
						fail(a, exc)
					}
				}
			}
			return nil
		})
	})
	if err != nil {
		e := &Error{Op: "multi response", Server: req.addr, Kind: KindPermanent, Err: err}
		for a := range actions {
			if !seen[a] {
				seen[a] = true
				fail(a, e)
			}
		}
	}
	for a := range actions {
		if !seen[a] {
			// The server said nothing about this action: resend it.
			fail(a, &Error{Op: "multi", Server: req.addr, Kind: KindBackoff, Message: "no result for action"})
		}
	}
	return retry
}

// parseNameBytesPair turns NameBytesPair{name=1 exception class, value=2 message} into an *Error.
func parseNameBytesPair(b []byte, op, server string) *Error {
	var name, value string
	_ = eachField(b, func(num protowire.Number, typ protowire.Type, _ uint64, raw []byte) error {
		switch {
		case num == 1 && typ == protowire.BytesType:
			name = string(raw)
		case num == 2 && typ == protowire.BytesType:
			value = string(raw)
		}
		return nil
	})
	return remoteError(op, server, name, value, false)
}
