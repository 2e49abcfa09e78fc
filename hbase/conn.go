package hbase

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jcmturner/gokrb5/v8/messages"
	"github.com/jcmturner/gokrb5/v8/types"
	"google.golang.org/protobuf/encoding/protowire"
)

// Service names a connection speaks, as the ConnectionHeader states them.
const (
	serviceClient     = "ClientService"
	serviceMaster     = "MasterService"
	serviceClientMeta = "ClientMetaService"
)

// keyValueCodec is the cell block codec the client asks for: the server then returns cells in cell
// blocks instead of protobuf, and reads our Put cells from one, as the Java client does.
const keyValueCodec = "org.apache.hadoop.hbase.codec.KeyValueCodec"

// connectionCallID is the call id (-1 as uint32) of errors about the connection as a whole, such as
// a Kerberos server's "Authentication is required" answer to a client that did not authenticate.
const connectionCallID = 0xFFFFFFFF

// maxResponse bounds one response frame, so that a corrupt length cannot make the reader allocate
// gigabytes. The server's own default max is far below.
const maxResponse = 512 << 20

// call is one request on a connection and, once done is closed, its answer.
type call struct {
	id      uint32
	method  string
	param   *[]byte // pooled; the writer releases it after writing
	cells   *[]byte // pooled cell block, may be nil; released with param
	timeout time.Duration

	resp      []byte // response message
	cellBlock []byte // response cell block
	err       error
	done      chan struct{}
}

// conn is one TCP connection to one server for one service. A writer goroutine sends queued calls
// (coalescing writes when many are queued) and a reader goroutine matches responses to calls by
// call id, so any number of calls are in flight at once.
type conn struct {
	addr    string
	service string
	nc      net.Conn

	sendq chan *call
	dead  chan struct{} // closed when the connection failed or was closed

	mu      sync.Mutex
	pending map[uint32]*call
	nextID  uint32
	err     error // why the connection died; set once, under mu

	wg sync.WaitGroup
}

// dial opens a connection and sends the preamble and ConnectionHeader. With auth (Kerberos) it first
// gets a service ticket for the server and runs the SASL GSSAPI handshake, then sends the header
// (wrapped when the negotiated protection asks for it). The server does not answer the header on
// success; a rejected header shows up as an error on the first call.
func dial(ctx context.Context, addr, service, user string, timeout time.Duration, auth *kerberosAuth) (*conn, error) {
	var (
		tkt messages.Ticket
		key types.EncryptionKey
		spn string
	)
	if auth != nil {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			host = addr
		}
		// Before the TCP connect, so that a KDC problem never holds a socket to the server.
		tkt, key, spn, err = auth.serviceTicket(ctx, host)
		if err != nil {
			return nil, &Error{Op: "authenticate " + service, Server: addr, Kind: KindReconnect, Err: &authError{err}}
		}
		user = auth.principalString()
	}
	d := net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}
	tcp, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, &Error{Op: "dial " + service, Server: addr, Kind: KindReconnect, Err: err}
	}
	if tc, ok := tcp.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	nc := tcp
	hdr := appendMessage(nil, 1, func(b []byte) []byte { return appendStringField(b, 1, user) })
	hdr = appendStringField(hdr, 2, service)
	hdr = appendStringField(hdr, 3, keyValueCodec)
	pre := make([]byte, 0, 10+len(hdr))
	pre = append(pre, "HBas"...)
	if dl, ok := ctx.Deadline(); ok {
		_ = nc.SetWriteDeadline(dl)
	}
	if auth != nil {
		if _, err := nc.Write(append(pre, 0, authCodeKerberos)); err != nil {
			nc.Close()
			return nil, &Error{Op: "connection preamble " + service, Server: addr, Kind: KindReconnect, Err: err}
		}
		g, err := saslHandshake(ctx, nc, auth, tkt, key, spn, timeout)
		if err != nil {
			nc.Close()
			return nil, &Error{Op: "authenticate " + service, Server: addr, Kind: KindReconnect,
				Err: &authError{auth.explainServer(spn, err)}}
		}
		nc = newSASLConn(nc, g)
		pre = pre[:0]
	} else {
		pre = append(pre, 0, authCodeSimple) // RPC version 0, SIMPLE authentication
	}
	pre = binary.BigEndian.AppendUint32(pre, uint32(len(hdr)))
	pre = append(pre, hdr...)
	if _, err := nc.Write(pre); err != nil {
		nc.Close()
		return nil, &Error{Op: "connection header " + service, Server: addr, Kind: KindReconnect, Err: err}
	}
	_ = tcp.SetWriteDeadline(time.Time{})
	c := &conn{
		addr:    addr,
		service: service,
		nc:      nc,
		sendq:   make(chan *call, 256),
		dead:    make(chan struct{}),
		pending: make(map[uint32]*call),
	}
	c.wg.Add(2)
	go c.writeLoop()
	go c.readLoop()
	return c, nil
}

// alive reports whether the connection can still take calls.
func (c *conn) alive() bool {
	select {
	case <-c.dead:
		return false
	default:
		return true
	}
}

// fail marks the connection dead, closes the socket and fails every pending call with a reconnect
// error. Only the first reason is kept.
func (c *conn) fail(err error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = err
	pending := c.pending
	c.pending = nil
	close(c.dead)
	c.mu.Unlock()
	c.nc.Close()
	for _, cl := range pending {
		cl.err = c.deadError()
		close(cl.done)
	}
}

func (c *conn) deadError() error {
	if errors.Is(c.err, ErrClosed) {
		return c.err
	}
	return &Error{Op: c.service + " connection", Server: c.addr, Kind: KindReconnect, Err: c.err}
}

// close shuts the connection for good, as Client.Close does, and waits for its goroutines.
func (c *conn) close() { c.closeWith(ErrClosed) }

// closeWith shuts the connection, failing the calls still pending on it with err (wrapped as a
// reconnect error unless it is ErrClosed), and waits for its goroutines.
func (c *conn) closeWith(err error) {
	c.fail(err)
	c.wg.Wait()
}

// errDropped is why calls fail on a connection the client dropped after another call on it met a
// reconnect-class error: they are as retriable as that error was.
var errDropped = errors.New("connection dropped after a reconnect-class error on it")

// call sends one request and waits for its answer. param and cells are pooled buffers that the
// connection takes over (cells may be nil). The returned slices belong to the caller.
func (c *conn) call(ctx context.Context, method string, param, cells *[]byte) (resp, cellBlock []byte, err error) {
	cl := &call{method: method, param: param, cells: cells, done: make(chan struct{})}
	if dl, ok := ctx.Deadline(); ok {
		cl.timeout = time.Until(dl)
		if cl.timeout <= 0 {
			putBuf(param)
			putBuf(cells)
			return nil, nil, &Error{Op: method, Server: c.addr, Kind: KindBackoff, Err: ctx.Err()}
		}
	}
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		putBuf(param)
		putBuf(cells)
		return nil, nil, c.deadErrorLocked()
	}
	c.nextID++
	cl.id = c.nextID & 0x7fffffff
	c.pending[cl.id] = cl
	c.mu.Unlock()

	select {
	case c.sendq <- cl:
	case <-c.dead:
		// fail() completes cl since it was pending.
	case <-ctx.Done():
		c.forget(cl.id)
		putBuf(param)
		putBuf(cells)
		return nil, nil, &Error{Op: method, Server: c.addr, Kind: KindBackoff, Err: ctx.Err()}
	}
	select {
	case <-cl.done:
		return cl.resp, cl.cellBlock, cl.err
	case <-ctx.Done():
		// The writer still owns the buffers; the late response, if any, is dropped by the reader.
		c.forget(cl.id)
		return nil, nil, &Error{Op: method, Server: c.addr, Kind: KindBackoff, Err: ctx.Err()}
	}
}

func (c *conn) deadErrorLocked() error {
	if errors.Is(c.err, ErrClosed) {
		return c.err
	}
	return &Error{Op: c.service + " connection", Server: c.addr, Kind: KindReconnect, Err: c.err}
}

func (c *conn) forget(id uint32) {
	c.mu.Lock()
	if c.pending != nil {
		delete(c.pending, id)
	}
	c.mu.Unlock()
}

func (c *conn) writeLoop() {
	defer c.wg.Done()
	w := bufio.NewWriterSize(c.nc, 64<<10)
	var hdr []byte
	for {
		var cl *call
		select {
		case cl = <-c.sendq:
		case <-c.dead:
			c.drainSendq()
			return
		}
		for cl != nil {
			hdr = c.appendRequestHeader(hdr[:0], cl)
			err := writeFrame(w, hdr, *cl.param, cl.cells)
			putBuf(cl.param)
			putBuf(cl.cells)
			if err != nil {
				c.fail(fmt.Errorf("write: %w", err))
				c.drainSendq()
				return
			}
			// Coalesce: keep writing while more calls are queued, flush when the queue is empty.
			select {
			case cl = <-c.sendq:
			default:
				cl = nil
			}
		}
		if err := w.Flush(); err != nil {
			c.fail(fmt.Errorf("write: %w", err))
			c.drainSendq()
			return
		}
	}
}

// drainSendq releases the buffers of calls that were queued but will never be written.
func (c *conn) drainSendq() {
	for {
		select {
		case cl := <-c.sendq:
			putBuf(cl.param)
			putBuf(cl.cells)
		default:
			return
		}
	}
}

// appendRequestHeader appends RequestHeader{call_id=1, method_name=3, request_param=4,
// cell_block_meta=5, timeout=7}.
func (c *conn) appendRequestHeader(b []byte, cl *call) []byte {
	b = appendVarintField(b, 1, uint64(cl.id))
	b = appendStringField(b, 3, cl.method)
	b = appendBoolField(b, 4, true)
	if cl.cells != nil && len(*cl.cells) > 0 {
		b = appendMessage(b, 5, func(b []byte) []byte { return appendVarintField(b, 1, uint64(len(*cl.cells))) })
	}
	if cl.timeout > 0 {
		ms := cl.timeout.Milliseconds()
		if ms < 1 {
			ms = 1
		}
		if ms > 1<<31-1 {
			ms = 1<<31 - 1
		}
		b = appendVarintField(b, 7, uint64(ms))
	}
	return b
}

func writeFrame(w *bufio.Writer, hdr, param []byte, cells *[]byte) error {
	n := protowire.SizeVarint(uint64(len(hdr))) + len(hdr) + protowire.SizeVarint(uint64(len(param))) + len(param)
	if cells != nil {
		n += len(*cells)
	}
	var tmp [24]byte
	b := binary.BigEndian.AppendUint32(tmp[:0], uint32(n))
	b = protowire.AppendVarint(b, uint64(len(hdr)))
	w.Write(b)
	w.Write(hdr)
	b = protowire.AppendVarint(tmp[:0], uint64(len(param)))
	w.Write(b)
	w.Write(param)
	if cells != nil {
		w.Write(*cells)
	}
	// bufio.Writer keeps the first error: one check covers all writes above.
	_, err := w.Write(nil)
	return err
}

func (c *conn) readLoop() {
	defer c.wg.Done()
	r := bufio.NewReaderSize(c.nc, 64<<10)
	var lenBuf [4]byte
	for {
		if _, err := io.ReadFull(r, lenBuf[:]); err != nil {
			c.fail(fmt.Errorf("read: %w", err))
			return
		}
		n := binary.BigEndian.Uint32(lenBuf[:])
		if n > maxResponse {
			c.fail(fmt.Errorf("response frame of %d bytes", n))
			return
		}
		frame := make([]byte, n)
		if _, err := io.ReadFull(r, frame); err != nil {
			c.fail(fmt.Errorf("read: %w", err))
			return
		}
		f, err := parseResponseFrame(frame)
		if err != nil {
			c.fail(err)
			return
		}
		if f.exc != nil && (f.callID == nil || *f.callID == connectionCallID) {
			// A connection-level failure (e.g. a rejected header): every call on it is lost.
			e := remoteError("connection", c.addr, f.exc.class, f.exc.stack, f.exc.doNotRetry)
			if strings.Contains(e.Message, "Authentication is required") {
				// The connection is what failed, not a request: no Kind of its own.
				c.fail(&authError{fmt.Errorf("%s: %s (the cluster uses Kerberos: set Config.Auth to kerberos, with Config.Kerberos)", e.Class, e.Message)})
				return
			}
			c.fail(e)
			return
		}
		c.mu.Lock()
		var cl *call
		if c.pending != nil && f.callID != nil {
			cl = c.pending[*f.callID]
			delete(c.pending, *f.callID)
		}
		c.mu.Unlock()
		if cl == nil {
			continue // the caller gave up on it
		}
		if f.exc != nil {
			e := remoteError(cl.method, c.addr, f.exc.class, f.exc.stack, f.exc.doNotRetry)
			if f.exc.host != "" {
				e.MovedTo = net.JoinHostPort(f.exc.host, strconv.Itoa(int(f.exc.port)))
				e.Message += " (moved to " + e.MovedTo + ")"
			}
			cl.err = e
		} else {
			cl.resp, cl.cellBlock = f.param, f.cells
		}
		close(cl.done)
	}
}

type exceptionResponse struct {
	class, stack string
	host         string
	port         uint32
	doNotRetry   bool
}

type responseFrame struct {
	callID *uint32
	exc    *exceptionResponse
	param  []byte
	cells  []byte
}

// parseResponseFrame splits a response (without its length prefix): varint-delimited ResponseHeader,
// varint-delimited response message unless the header carries an exception, then the cell block,
// whose length the header gives.
func parseResponseFrame(b []byte) (responseFrame, error) {
	var f responseFrame
	hdr, n := protowire.ConsumeBytes(b)
	if n < 0 {
		return f, fmt.Errorf("hbase: response header: %w", protowire.ParseError(n))
	}
	rest := b[n:]
	cellLen := -1
	err := eachField(hdr, func(num protowire.Number, typ protowire.Type, v uint64, raw []byte) error {
		switch {
		case num == 1 && typ == protowire.VarintType:
			id := uint32(v)
			f.callID = &id
		case num == 2 && typ == protowire.BytesType:
			e, err := parseExceptionResponse(raw)
			if err != nil {
				return err
			}
			f.exc = &e
		case num == 3 && typ == protowire.BytesType:
			return eachField(raw, func(num protowire.Number, typ protowire.Type, v uint64, _ []byte) error {
				if num == 1 && typ == protowire.VarintType {
					cellLen = int(min(v, uint64(len(b))+1))
				}
				return nil
			})
		}
		return nil
	})
	if err != nil {
		return f, fmt.Errorf("hbase: response header: %w", err)
	}
	if f.exc != nil {
		return f, nil
	}
	if cellLen > len(rest) {
		return f, fmt.Errorf("hbase: response cell block of %d bytes in a frame of %d", cellLen, len(rest))
	}
	if cellLen > 0 {
		f.cells = rest[len(rest)-cellLen:]
		rest = rest[:len(rest)-cellLen]
	}
	if len(rest) > 0 {
		p, n := protowire.ConsumeBytes(rest)
		if n < 0 {
			return f, fmt.Errorf("hbase: response message: %w", protowire.ParseError(n))
		}
		f.param = p
	}
	return f, nil
}

func parseExceptionResponse(b []byte) (exceptionResponse, error) {
	var e exceptionResponse
	err := eachField(b, func(num protowire.Number, typ protowire.Type, v uint64, raw []byte) error {
		switch {
		case num == 1 && typ == protowire.BytesType:
			e.class = string(raw)
		case num == 2 && typ == protowire.BytesType:
			e.stack = string(raw)
		case num == 3 && typ == protowire.BytesType:
			e.host = string(raw)
		case num == 4 && typ == protowire.VarintType:
			e.port = uint32(v)
		case num == 5 && typ == protowire.VarintType:
			e.doNotRetry = v != 0
		}
		return nil
	})
	return e, err
}
