package hbase

import (
	"context"
	"errors"
	"sort"
	"sync"
)

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
	var causes []error
	rt := retries{c: c}
	for round := 0; len(todo) > 0; round++ {
		if round > 0 {
			causes = causes[:0]
			for _, i := range todo {
				causes = append(causes, errs[i])
			}
			if err := rt.wait(ctx, causes...); err != nil {
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
	servers, retry := c.groupByServer(ctx, ms, todo, errs)
	var (
		wg      sync.WaitGroup
		retryMu sync.Mutex
	)
	for addr, sa := range servers {
		reqs := c.cutRequests(addr, sa, ms)
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

// serverActions are one round's actions for one region server, by region, in input order within
// a region.
type serverActions struct {
	regions map[string]*regionActions
	order   []string // region names
}

func (sa *serverActions) add(r *region, i int) {
	ra := sa.regions[string(r.name)]
	if ra == nil {
		ra = &regionActions{r: r}
		sa.regions[string(r.name)] = ra
		sa.order = append(sa.order, string(r.name))
	}
	ra.idx = append(ra.idx, i)
}

// groupByServer finds each action's region and groups the actions by server. Actions whose region
// cannot be found get their error in errs; it returns those of them to retry.
func (c *Client) groupByServer(ctx context.Context, ms []*Mutation, todo []int, errs []error) (map[string]*serverActions, []int) {
	servers := map[string]*serverActions{}
	var retry []int
	lookups := roundLookups{failed: map[string]error{}}
	for _, i := range todo {
		r, err := c.regionOf(ctx, &lookups, ms[i])
		if err != nil {
			errs[i] = err
			if retryHere(err) {
				retry = append(retry, i)
			}
			continue
		}
		sa := servers[r.addr]
		if sa == nil {
			sa = &serverActions{regions: map[string]*regionActions{}}
			servers[r.addr] = sa
		}
		sa.add(r, i)
	}
	return servers, retry
}

// roundLookups are the region lookups that failed in one round. A table whose lookup failed is
// not looked up again for its other keys until the next round: a missing table or an unreachable
// hbase:meta would otherwise cost one RPC per mutation. A lookup that found its region in
// transition (closed, opening, split) holds back only the keys of that region's range; the
// table's other regions are looked up and written.
type roundLookups struct {
	failed   map[string]error // by table
	transits []transit
}

type transit struct {
	r   *region
	err error
}

// regionOf is the region m goes to: the cached one, else located, unless a lookup that failed in
// this round covers m already.
func (c *Client) regionOf(ctx context.Context, l *roundLookups, m *Mutation) (*region, error) {
	if r := c.regions.lookup(m.Table, m.Row); r != nil {
		return r, nil
	}
	err := l.failed[m.Table]
	for _, tr := range l.transits {
		if err == nil && tr.r.table == m.Table && tr.r.contains(m.Row) {
			err = tr.err
		}
	}
	if err != nil {
		return nil, err
	}
	r, err := c.locate(ctx, m.Table, m.Row)
	var it *inTransition
	if errors.As(err, &it) {
		l.transits = append(l.transits, transit{it.r, err})
	} else if err != nil {
		l.failed[m.Table] = err
	}
	return r, err
}

// cutRequests cuts one server's actions into requests under the action and byte caps, packing
// regions in sorted order: one request carries actions for as many regions as fit.
func (c *Client) cutRequests(addr string, sa *serverActions, ms []*Mutation) []*multiRequest {
	sort.Strings(sa.order) // a fixed region order lets requests take region slots without deadlock
	var reqs []*multiRequest
	cur := &multiRequest{addr: addr}
	n, size := 0, 0
	for _, name := range sa.order {
		ra := sa.regions[name]
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
	return reqs
}

// sendMulti sends one Multi request and records each action's outcome; it returns the indexes to
// retry. Each index is written by exactly one request, so errs and sent need no lock.
func (c *Client) sendMulti(ctx context.Context, ms []*Mutation, req *multiRequest, errs []error, sent []bool) []int {
	ss := c.serverStats(req.addr)
	ssem := c.sem("s:"+req.addr, c.cfg.MaxInFlightPerServer)
	ss.waiting.Add(1)
	select {
	case ssem <- struct{}{}:
		ss.waiting.Add(-1)
	case <-ctx.Done():
		ss.waiting.Add(-1)
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

	resent, actions := 0, 0
	for _, ra := range req.regions {
		actions += len(ra.idx)
		for _, i := range ra.idx {
			if sent[i] {
				resent++
			}
			sent[i] = true
		}
	}
	c.actionsSent.Add(int64(actions))
	c.actionsResent.Add(int64(resent))
	ss.actionsSent.Add(int64(actions))
	ss.actionsResent.Add(int64(resent))
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
