package httpapi

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// ShutdownGrace is how long Serve waits for the requests in flight once its context ends.
const ShutdownGrace = 5 * time.Second

// Serve answers h on ln until ctx ends, then shuts down (waiting up to ShutdownGrace for requests in
// flight). It applies the Limits' timeouts and header size, answers a client too slow with its
// headers 408, and serves TLS when s.TLS is set. h is usually Secure(Handler()) with the
// dashboard mounted.
func (s *Server) Serve(ctx context.Context, ln net.Listener, h http.Handler) error {
	s.Limits.EnsureDefaults()
	if s.TLS != nil {
		// The limit connections wrap the TLS ones, so that a 408 goes out encrypted. net/http
		// then sees no *tls.Conn: it speaks HTTP/1.1 only (no h2 is offered) and r.TLS is nil.
		ln = tls.NewListener(ln, s.TLS.TLSConfig())
	}
	inner := &limitListener{Listener: ln, timeout: s.Limits.ReadHeaderTimeout, idle: s.Limits.IdleTimeout}
	hs := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: s.Limits.ReadHeaderTimeout,
		ReadTimeout:       s.Limits.ReadTimeout,
		WriteTimeout:      s.Limits.WriteTimeout,
		IdleTimeout:       s.Limits.IdleTimeout,
		MaxHeaderBytes:    s.Limits.MaxHeaderBytes,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			if lc, ok := c.(*limitConn); ok {
				return context.WithValue(ctx, connKey{}, lc)
			}
			return ctx
		},
		ErrorLog: slogErrorLog(s.logger()),
	}
	done := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
		case <-done:
			return
		}
		sctx, cancel := context.WithTimeout(context.Background(), ShutdownGrace)
		defer cancel()
		_ = hs.Shutdown(sctx)
	}()
	err := hs.Serve(inner)
	close(done)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

type connKey struct{}

// limitListener hands out limitConns.
type limitListener struct {
	net.Listener
	timeout, idle time.Duration
}

// Accept implements net.Listener.
func (l *limitListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &limitConn{Conn: c, timeout: l.timeout, idle: l.idle}, nil
}

// limitConn answers 408 when a read times out while no request is being handled, that is while
// net/http waits for a request's line and headers (ReadHeaderTimeout) or for the next request of
// a kept-alive connection (IdleTimeout; RFC 9110 allows a 408 there too, and Go's and curl's
// clients read it as a closed connection). net/http itself closes such connections without a
// word.
type limitConn struct {
	net.Conn
	timeout time.Duration // ReadHeaderTimeout
	idle    time.Duration // IdleTimeout
	busy    atomic.Int32  // requests being handled (0 or 1: HTTP/1.1 handles one at a time)
	// aborted says that the last read deadline was set in the past: net/http does that to stop
	// its background read when a response is done, and that timeout is no client's fault.
	aborted atomic.Bool
	once    sync.Once
}

// SetReadDeadline implements net.Conn.
func (c *limitConn) SetReadDeadline(t time.Time) error {
	c.aborted.Store(!t.IsZero() && t.Before(time.Now()))
	return c.Conn.SetReadDeadline(t)
}

// SetDeadline implements net.Conn.
func (c *limitConn) SetDeadline(t time.Time) error {
	c.aborted.Store(!t.IsZero() && t.Before(time.Now()))
	return c.Conn.SetDeadline(t)
}

// Read implements net.Conn.
func (c *limitConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	var ne net.Error
	if err != nil && errors.As(err, &ne) && ne.Timeout() && c.busy.Load() == 0 && !c.aborted.Load() {
		c.once.Do(func() {
			msg := fmt.Sprintf(`{"error":"no complete request in time (%s %s; between requests, %s %s)"}`,
				limitReadHeaderTimeout, c.timeout, limitIdleTimeout, c.idle)
			_ = c.Conn.SetWriteDeadline(time.Now().Add(time.Second))
			_, _ = fmt.Fprintf(c.Conn, "HTTP/1.1 408 Request Timeout\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s\n",
				len(msg)+1, msg)
		})
	}
	return n, err
}

// slogErrorLog sends net/http's own messages (TLS handshake errors of scanners, mostly) to slog
// at debug level rather than to stderr.
func slogErrorLog(l *slog.Logger) *log.Logger {
	return slog.NewLogLogger(l.Handler(), slog.LevelDebug)
}
