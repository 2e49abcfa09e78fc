package hbase

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
)

// readMultiResponse matches MultiResponse{regionActionResult=1 RegionActionResult{
// resultOrException=1 ResultOrException{index=1, result=2, exception=3 NameBytesPair}, exception=2}}
// to the request's actions. Region results come in request order; actions are matched by index.
func (c *Client) readMultiResponse(resp, _ []byte, req *multiRequest, errs []error) []int {
	mr := multiResults{c: c, req: req, errs: errs}
	for _, ra := range req.regions {
		mr.actions = append(mr.actions, ra.idx...)
	}
	mr.seen = make([]bool, len(mr.actions))
	ri, first := 0, 0
	err := eachField(resp, func(num protowire.Number, typ protowire.Type, _ uint64, raw []byte) error {
		if num != 1 || typ != protowire.BytesType {
			return nil
		}
		if ri >= len(req.regions) {
			return fmt.Errorf("more region results than regions (%d)", len(req.regions))
		}
		ra := req.regions[ri]
		ri++
		err := mr.region(ra, first, raw)
		first += len(ra.idx)
		return err
	})
	if err != nil {
		mr.failUnseen(&Error{Op: "multi response", Server: req.addr, Kind: KindPermanent, Err: err})
	}
	// What the server said nothing about is resent.
	mr.failUnseen(&Error{Op: "multi", Server: req.addr, Kind: KindBackoff, Message: "no result for action"})
	return mr.retry
}

// multiResults takes a Multi response's outcomes into the errs of an Apply. Action numbers are
// the request's (its regions' actions one after the other); each is answered at most once.
type multiResults struct {
	c       *Client
	req     *multiRequest
	errs    []error
	actions []int  // action number -> index into the Apply's mutations
	seen    []bool // by action number
	retry   []int  // indexes into the Apply's mutations
	noted   bool   // the server's stats hold an error of this response already
}

// region takes one RegionActionResult, of region ra, whose first action number is first.
func (mr *multiResults) region(ra regionActions, first int, raw []byte) error {
	relocated := false // one relocation per region, however many of its actions say it moved
	return eachField(raw, func(num protowire.Number, typ protowire.Type, _ uint64, raw []byte) error {
		switch {
		case num == 1 && typ == protowire.BytesType:
			idx, exc, err := parseResultOrException(raw, mr.req.addr)
			if err != nil {
				return err
			}
			if idx < first || idx >= first+len(ra.idx) || mr.seen[idx] {
				return fmt.Errorf("result for action %d outside region %q", idx, ra.r.name)
			}
			mr.seen[idx] = true
			if exc == nil {
				mr.errs[mr.actions[idx]] = nil
				return nil
			}
			if exc.Kind == KindRelocate && !relocated {
				relocated = true
				mr.c.relocate(ra.r, exc)
			}
			mr.fail(idx, exc)
		case num == 2 && typ == protowire.BytesType:
			// The whole region failed (e.g. NotServingRegion): every action of it.
			exc := parseNameBytesPair(raw, "multi", mr.req.addr)
			if exc.Kind == KindRelocate {
				mr.c.relocate(ra.r, exc)
			}
			for a := first; a < first+len(ra.idx); a++ {
				if !mr.seen[a] {
					mr.seen[a] = true
					mr.fail(a, exc)
				}
			}
		}
		return nil
	})
}

// fail records err for action a, and keeps a for the next round if err is worth retrying.
func (mr *multiResults) fail(a int, err *Error) {
	i := mr.actions[a]
	mr.errs[i] = err
	ss := mr.c.serverStats(mr.req.addr)
	ss.actionErrs.Add(1)
	if !mr.noted { // one error text per response is enough to tell what the server said
		mr.noted = true
		ss.failed(err)
	}
	if err.Retriable() {
		mr.retry = append(mr.retry, i)
	}
}

// failUnseen fails every action the response has not answered yet with err.
func (mr *multiResults) failUnseen(err *Error) {
	for a := range mr.actions {
		if !mr.seen[a] {
			mr.seen[a] = true
			mr.fail(a, err)
		}
	}
}

// parseResultOrException reads ResultOrException{index=1, result=2, exception=3 NameBytesPair}:
// the action number it answers, and the exception, nil when the action succeeded.
func parseResultOrException(b []byte, server string) (int, *Error, error) {
	idx := -1
	var exc *Error
	err := eachField(b, func(num protowire.Number, typ protowire.Type, v uint64, raw []byte) error {
		switch {
		case num == 1 && typ == protowire.VarintType:
			idx = int(v)
		case num == 3 && typ == protowire.BytesType:
			exc = parseNameBytesPair(raw, "multi", server)
		}
		return nil
	})
	return idx, exc, err
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
