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
