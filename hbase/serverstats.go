package hbase

import (
	"errors"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// ServerStats are a Client's counters for one region server since the client first sent it a
// request. A sick server shows in them before its regions move: its errors and action errors
// climb, its requests stop being answered (InFlight stays at the per-server limit and Waiting
// grows) and the time in its requests rises against the other servers'.
type ServerStats struct {
	// Server is the region server's host:port.
	Server string
	// Requests counts RPCs the client began to this server (Multi, Get, Scan, admin calls), dial
	// attempts that failed included.
	Requests int64
	// Errors counts, of Requests, those that failed as a whole: refused or timed-out dials, a
	// dropped connection, no answer within Config.RPCTimeout, or an exception for the call.
	Errors int64
	// DialErrors counts, of Errors, failed attempts to connect (refused, timed out, failed
	// authentication).
	DialErrors int64
	// ActionsSent counts Multi actions sent to this server, first tries and resends.
	ActionsSent int64
	// ActionsResent counts, of ActionsSent, actions sent again after an earlier round failed them
	// (on this server or another).
	ActionsResent int64
	// ActionErrors counts actions that an answered Multi refused (region busy, server overloaded,
	// region moved or not served, a bad cell).
	ActionErrors int64
	// Relocations counts regions this server refused with a relocate-class error: the region
	// moved, split or closed, and the client looked it up again.
	Relocations int64
	// InFlight is the number of RPCs sent to this server and not answered yet.
	InFlight int64
	// Waiting is the number of Multi requests waiting for one of the server's
	// Config.MaxInFlightPerServer slots: requests to this server queue here while it is slow.
	Waiting int64
	// RequestTime is the time spent in requests to this server, answered or failed; divided by
	// Requests it is the mean latency.
	RequestTime time.Duration
	// LastError is the newest error of this server (a failed request or a refused action), empty
	// when there was none, and LastErrorAt when it happened.
	LastError   string
	LastErrorAt time.Time
}

// serverCounters are ServerStats as the client updates them.
type serverCounters struct {
	requests, errors, dialErrors           atomic.Int64
	actionsSent, actionsResent, actionErrs atomic.Int64
	relocations, inFlight, waiting, nanos  atomic.Int64
	lastMu                                 sync.Mutex
	lastErr                                string
	lastAt                                 time.Time
}

// serverStats returns the counters of addr, making them on first use. Servers are few (the
// cluster's region servers, a restarted one at the same address reusing its entry), so the map
// is never pruned.
func (c *Client) serverStats(addr string) *serverCounters {
	if s, ok := c.servers.Load(addr); ok {
		return s.(*serverCounters)
	}
	s, _ := c.servers.LoadOrStore(addr, &serverCounters{})
	return s.(*serverCounters)
}

// failed records err as the server's newest error.
func (s *serverCounters) failed(err error) {
	if err == nil {
		return
	}
	s.lastMu.Lock()
	s.lastErr, s.lastAt = err.Error(), time.Now()
	s.lastMu.Unlock()
}

// countRPC records one finished request to the server: its time and, if it failed, how. A call
// the caller gave up on (its context ended), or a closed client, is not the server's error.
func (s *serverCounters) countRPC(start time.Time, dialed, callerDone bool, err error) {
	s.requests.Add(1)
	s.nanos.Add(int64(time.Since(start)))
	if err == nil || callerDone || errors.Is(err, ErrClosed) {
		return
	}
	s.errors.Add(1)
	if !dialed {
		s.dialErrors.Add(1)
	}
	s.failed(err)
}

// ServerStats returns the client's counters for every region server it has sent a request to,
// ordered by address.
func (c *Client) ServerStats() []ServerStats {
	var out []ServerStats
	c.servers.Range(func(k, v any) bool {
		s := v.(*serverCounters)
		st := ServerStats{Server: k.(string), Requests: s.requests.Load(), Errors: s.errors.Load(),
			DialErrors: s.dialErrors.Load(), ActionsSent: s.actionsSent.Load(),
			ActionsResent: s.actionsResent.Load(), ActionErrors: s.actionErrs.Load(),
			Relocations: s.relocations.Load(), InFlight: s.inFlight.Load(), Waiting: s.waiting.Load(),
			RequestTime: time.Duration(s.nanos.Load())}
		s.lastMu.Lock()
		st.LastError, st.LastErrorAt = s.lastErr, s.lastAt
		s.lastMu.Unlock()
		out = append(out, st)
		return true
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Server < out[j].Server })
	return out
}
