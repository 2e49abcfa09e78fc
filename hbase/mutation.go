package hbase

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"sync"

	"google.golang.org/protobuf/encoding/protowire"
)

// ServerTimestamp, passed as a cell timestamp, asks the region server to stamp the cell with its own
// clock (HBase's LATEST_TIMESTAMP). It exists so that server time is only ever used by name:
// abacus's write paths always state the timestamp.
const ServerTimestamp int64 = math.MaxInt64

// Durability says how a mutation is persisted. The zero value uses the table's setting, which is
// SYNC_WAL unless the table says otherwise.
type Durability int32

// Durability values, as MutationProto numbers them.
const (
	DurabilityTableDefault Durability = 0
	SkipWAL                Durability = 1
	AsyncWAL               Durability = 2
	SyncWAL                Durability = 3
	FsyncWAL               Durability = 4
)

type mutCell struct {
	family    string // a string: most callers pass a constant, and converting would allocate per cell
	qualifier []byte
	ts        int64
	typ       byte
	value     []byte
}

// Mutation is a Put or a Delete of one row. Build one with NewPut or NewDelete and add cells; a
// Mutation is not safe for concurrent modification, but may be applied again (e.g. after a failure).
type Mutation struct {
	Table      string     // "table" or "ns:table"
	Row        []byte     // row key, 1..32767 bytes
	Durability Durability // zero: the table's durability
	isDelete   bool
	cells      []mutCell
	inline     [1]mutCell // backs cells for the common one-cell mutation: one allocation, not two
	err        error      // the first invalid cell added, reported by Apply
}

// NewPut starts a Put of row in table ("table" or "ns:table").
func NewPut(table string, row []byte) *Mutation {
	m := &Mutation{Table: table, Row: row}
	m.cells = m.inline[:0]
	return m
}

// NewDelete starts a Delete of row in table.
func NewDelete(table string, row []byte) *Mutation {
	m := &Mutation{Table: table, Row: row, isDelete: true}
	m.cells = m.inline[:0]
	return m
}

func (m *Mutation) check(what string, ts int64) bool {
	if m.err != nil {
		return false
	}
	if ts < 0 {
		m.err = fmt.Errorf("%s: negative timestamp %d", what, ts)
		return false
	}
	return true
}

// Add adds a cell version with timestamp ts (milliseconds by HBase convention; ServerTimestamp for
// the server's clock). Writing the same (row, family, qualifier, ts) again replaces the value and
// keeps one version.
func (m *Mutation) Add(family string, qualifier []byte, ts int64, value []byte) *Mutation {
	if m.isDelete {
		m.err = errors.New("add: cell values on a delete")
		return m
	}
	if m.check("add", ts) {
		if value == nil {
			value = []byte{} // a Put always carries a value, if only an empty one
		}
		m.cells = append(m.cells, mutCell{family, qualifier, ts, typePut, value})
	}
	return m
}

// DeleteVersion deletes exactly the version of family:qualifier at timestamp ts.
func (m *Mutation) DeleteVersion(family string, qualifier []byte, ts int64) *Mutation {
	return m.addDelete("delete version", family, qualifier, ts, typeDelete)
}

// DeleteColumn deletes every version of family:qualifier with a timestamp <= ts.
func (m *Mutation) DeleteColumn(family string, qualifier []byte, ts int64) *Mutation {
	return m.addDelete("delete column", family, qualifier, ts, typeDeleteColumn)
}

// DeleteFamily deletes every cell of family with a timestamp <= ts.
func (m *Mutation) DeleteFamily(family string, ts int64) *Mutation {
	return m.addDelete("delete family", family, nil, ts, typeDeleteFamily)
}

func (m *Mutation) addDelete(what, family string, qualifier []byte, ts int64, typ byte) *Mutation {
	if !m.isDelete {
		m.err = fmt.Errorf("%s on a put", what)
		return m
	}
	if m.check(what, ts) {
		m.cells = append(m.cells, mutCell{family, qualifier, ts, typ, nil})
	}
	return m
}

// validate reports why m cannot be sent, or nil.
func (m *Mutation) validate() error {
	switch {
	case m == nil:
		return errInvalid("apply", "nil mutation")
	case m.err != nil:
		return errInvalid("apply", "row %q: %v", m.Row, m.err)
	case m.Table == "":
		return errInvalid("apply", "row %q: no table", m.Row)
	case len(m.Row) == 0 || len(m.Row) > math.MaxInt16:
		return errInvalid("apply", "row of %d bytes", len(m.Row))
	case len(m.cells) == 0:
		return errInvalid("apply", "row %q: no cells", m.Row)
	}
	for _, c := range m.cells {
		if len(c.family) == 0 || len(c.family) > math.MaxInt8 {
			return errInvalid("apply", "row %q: family of %d bytes", m.Row, len(c.family))
		}
	}
	return nil
}

// size is the number of bytes m adds to a Multi request (cell block plus protobuf).
func (m *Mutation) size() int {
	n := 32 + len(m.Row)
	for _, c := range m.cells {
		n += keyValueSize(len(m.Row), len(c.family), len(c.qualifier), len(c.value))
	}
	return n
}

// BatchError reports the mutations of an Apply that did not land. Errs has one entry per mutation
// given to Apply, nil for those that were written.
type BatchError struct {
	Errs   []error // one per mutation, in Apply's order; nil when it landed
	Failed int     // number of non-nil Errs
}

// Error counts the failures and shows the first.
func (e *BatchError) Error() string {
	var first error
	for _, err := range e.Errs {
		if err != nil {
			first = err
			break
		}
	}
	return fmt.Sprintf("hbase: %d of %d mutations failed, first: %v", e.Failed, len(e.Errs), first)
}

// Unwrap returns the per-mutation errors, so errors.Is/As look into them.
func (e *BatchError) Unwrap() []error {
	var out []error
	for _, err := range e.Errs {
		if err != nil {
			out = append(out, err)
		}
	}
	return out
}

// Apply writes the mutations in Multi requests grouped by region server, and returns nil when every
// one landed, else a *BatchError with each mutation's outcome. Failed actions are retried by their
// error class (relocate, back off, reconnect) for up to Config.MaxRounds rounds; permanent failures
// (missing family, too-large cell, missing table, do_not_retry) are reported at once and never
// resent. The context's deadline bounds the whole operation. Mutations of one Apply may be applied in
// any order: a batch must not carry two values for the same cell.
func (c *Client) Apply(ctx context.Context, ms []*Mutation) error {
	errs := make([]error, len(ms))
	sent := make([]bool, len(ms)) // put on the wire in an earlier round: a resend now
	todo := make([]int, 0, len(ms))
	for i, m := range ms {
		if err := m.validate(); err != nil {
			errs[i] = err
			continue
		}
		todo = append(todo, i)
	}
	for round := 0; len(todo) > 0; round++ {
		if round > 0 {
			if err := c.backoff(ctx, round-1); err != nil {
				for _, i := range todo {
					errs[i] = &Error{Op: "apply", Kind: KindBackoff, Err: errors.Join(err, errs[i])}
				}
				break
			}
		}
		todo = c.applyRound(ctx, ms, todo, errs, sent)
		if round+1 >= c.cfg.MaxRounds {
			break // todo keeps its last (retriable) errors
		}
	}
	failed := 0
	for _, err := range errs {
		if err != nil {
			failed++
		}
	}
	if failed == 0 {
		return nil
	}
	return &BatchError{Errs: errs, Failed: failed}
}

// regionActions are the actions of one request that go to one region.
type regionActions struct {
	r   *region
	idx []int // indexes into the Apply's mutations
}

// multiRequest is one Multi RPC to one server.
type multiRequest struct {
	addr    string
	regions []regionActions
}

// applyRound sends every action in todo once and returns those to retry; errs gets every outcome,
// sent marks the actions put on the wire.
func (c *Client) applyRound(ctx context.Context, ms []*Mutation, todo []int, errs []error, sent []bool) []int {
	// Group by server, then region, in input order within a region.
	type serverGroup struct {
		regions map[string]*regionActions
		order   []string
	}
	servers := map[string]*serverGroup{}
	var retry []int
	var retryMu sync.Mutex
	// A table whose lookup failed in this round is not looked up again for its other keys until
	// the next round: a missing table or an unreachable hbase:meta would otherwise cost one RPC per
	// mutation. A lookup that found its region in transition (closed, opening, split) holds back
	// only the keys of that region's range; the table's other regions are looked up and written.
	lookupFailed := map[string]error{}
	type transit struct {
		r   *region
		err error
	}
	var transits []transit
	for _, i := range todo {
		m := ms[i]
		r := c.regions.lookup(m.Table, m.Row)
		if r == nil {
			err := lookupFailed[m.Table]
			for _, tr := range transits {
				if err == nil && tr.r.table == m.Table && tr.r.contains(m.Row) {
					err = tr.err
				}
			}
			if err == nil {
				r, err = c.locate(ctx, m.Table, m.Row)
				var it *inTransition
				if errors.As(err, &it) {
					transits = append(transits, transit{it.r, err})
				} else if err != nil {
					lookupFailed[m.Table] = err
				}
			}
			if err != nil {
				errs[i] = err
				if retryHere(err) {
					retry = append(retry, i)
				}
				continue
			}
		}
		sg := servers[r.addr]
		if sg == nil {
			sg = &serverGroup{regions: map[string]*regionActions{}}
			servers[r.addr] = sg
		}
		ra := sg.regions[string(r.name)]
		if ra == nil {
			ra = &regionActions{r: r}
			sg.regions[string(r.name)] = ra
			sg.order = append(sg.order, string(r.name))
		}
		ra.idx = append(ra.idx, i)
	}
	// Cut each server's actions into requests under the action and byte caps, packing regions in
	// sorted order: one request carries actions for as many regions as fit.
	var wg sync.WaitGroup
	for addr, sg := range servers {
		sort.Strings(sg.order) // a fixed region order lets requests take region slots without deadlock
		var reqs []*multiRequest
		cur := &multiRequest{addr: addr}
		n, size := 0, 0
		for _, name := range sg.order {
			ra := sg.regions[name]
			start := 0
			for k, i := range ra.idx {
				sz := ms[i].size()
				if n > 0 && (n+1 > c.cfg.MaxBatchActions || size+sz > c.cfg.MaxBatchBytes) {
					if k > start {
						cur.regions = append(cur.regions, regionActions{r: ra.r, idx: ra.idx[start:k]})
					}
					reqs = append(reqs, cur)
					cur = &multiRequest{addr: addr}
					n, size, start = 0, 0, k
				}
				n++
				size += sz
			}
			if start < len(ra.idx) {
				cur.regions = append(cur.regions, regionActions{r: ra.r, idx: ra.idx[start:]})
			}
		}
		if n > 0 {
			reqs = append(reqs, cur)
		}
		// At most MaxInFlightPerServer workers per server; the client-wide semaphores also bound
		// concurrent Apply calls together.
		next := make(chan *multiRequest, len(reqs))
		for _, r := range reqs {
			next <- r
		}
		close(next)
		for range min(len(reqs), c.cfg.MaxInFlightPerServer) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for req := range next {
					again := c.sendMulti(ctx, ms, req, errs, sent)
					if len(again) > 0 {
						retryMu.Lock()
						retry = append(retry, again...)
						retryMu.Unlock()
					}
				}
			}()
		}
	}
	wg.Wait()
	return retry
}

// sendMulti sends one Multi request and records each action's outcome; it returns the indexes to
// retry. Each index is written by exactly one request, so errs and sent need no lock.
func (c *Client) sendMulti(ctx context.Context, ms []*Mutation, req *multiRequest, errs []error, sent []bool) []int {
	ssem := c.sem("s:"+req.addr, c.cfg.MaxInFlightPerServer)
	select {
	case ssem <- struct{}{}:
	case <-ctx.Done():
		return c.failRequest(req, errs, &Error{Op: "multi", Server: req.addr, Kind: KindBackoff, Err: ctx.Err()})
	}
	defer func() { <-ssem }()
	var held []chan struct{}
	defer func() {
		for _, s := range held {
			<-s
		}
	}()
	for _, ra := range req.regions {
		rsem := c.sem("r:"+string(ra.r.name), c.cfg.MaxInFlightPerRegion)
		select {
		case rsem <- struct{}{}:
			held = append(held, rsem)
		case <-ctx.Done():
			return c.failRequest(req, errs, &Error{Op: "multi", Server: req.addr, Kind: KindBackoff, Err: ctx.Err()})
		}
	}

	resent := 0
	for _, ra := range req.regions {
		c.actionsSent.Add(int64(len(ra.idx)))
		for _, i := range ra.idx {
			if sent[i] {
				resent++
			}
			sent[i] = true
		}
	}
	c.actionsResent.Add(int64(resent))
	param, cells := getBuf(), getBuf()
	*param, *cells = appendMultiRequest(*param, *cells, ms, req)
	resp, cb, err := c.rpc(ctx, serviceClient, req.addr, "Multi", param, cells)
	if err != nil {
		if e, ok := err.(*Error); ok && e.Kind == KindRelocate {
			for _, ra := range req.regions {
				c.relocate(ra.r, err)
			}
		}
		return c.failRequest(req, errs, err)
	}
	return c.readMultiResponse(resp, cb, req, errs)
}

func (c *Client) failRequest(req *multiRequest, errs []error, err error) []int {
	var retry []int
	for _, ra := range req.regions {
		for _, i := range ra.idx {
			errs[i] = err
			if retryHere(err) {
				retry = append(retry, i)
			}
		}
	}
	return retry
}

// appendMultiRequest appends MultiRequest{regionAction=1 RegionAction{region=1, action=3
// Action{index=1, mutation=2}}} to b and the mutations' cells to the cell block. Each MutationProto
// carries row, type, durability and associated_cell_count; its cells follow in the cell block in
// the same order, which is how the server pairs them.
func appendMultiRequest(b, cells []byte, ms []*Mutation, req *multiRequest) ([]byte, []byte) {
	action := 0
	for _, ra := range req.regions {
		b = appendMessage(b, 1, func(b []byte) []byte {
			b = appendRegionSpecifier(b, 1, ra.r.name)
			for _, i := range ra.idx {
				m := ms[i]
				b = appendMessage(b, 3, func(b []byte) []byte {
					b = appendVarintField(b, 1, uint64(action))
					return appendMessage(b, 2, func(b []byte) []byte {
						b = appendBytesField(b, 1, m.Row)
						mt := uint64(2) // PUT
						if m.isDelete {
							mt = 3 // DELETE
						}
						b = appendVarintField(b, 2, mt)
						if m.Durability != DurabilityTableDefault {
							b = appendVarintField(b, 6, uint64(m.Durability))
						}
						return appendVarintField(b, 8, uint64(len(m.cells)))
					})
				})
				for _, cl := range m.cells {
					cells = appendKeyValue(cells, m.Row, cl.family, cl.qualifier, cl.ts, cl.typ, cl.value)
				}
				action++
			}
			return b
		})
	}
	return b, cells
}

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
	for round := range c.cfg.MaxRounds {
		if round > 0 {
			if err := c.backoff(ctx, round-1); err != nil {
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
