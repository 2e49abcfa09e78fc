package hbase

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
)

// ErrorKind says what a caller (or this package's retry loop) should do about an error.
type ErrorKind int

const (
	// KindPermanent errors never succeed on a resend: no such family, table missing, cell too
	// large, a server reply flagged do_not_retry, a malformed request. Sinks dead-letter them.
	KindPermanent ErrorKind = iota
	// KindRelocate errors mean the region is no longer where the cache said: look it up again.
	KindRelocate
	// KindBackoff errors mean the server is busy or the region is opening: wait, then resend.
	KindBackoff
	// KindReconnect errors mean the connection or the server process went away: redial.
	KindReconnect
)

// String names the kind, as errors print it.
func (k ErrorKind) String() string {
	switch k {
	case KindPermanent:
		return "permanent"
	case KindRelocate:
		return "relocate"
	case KindBackoff:
		return "backoff"
	case KindReconnect:
		return "reconnect"
	}
	return fmt.Sprintf("ErrorKind(%d)", int(k))
}

// Error is an error reported by HBase or met on the way to it. Kind says whether it is worth
// retrying; Class is the Java exception class the server named, when it named one.
type Error struct {
	Op      string    // what failed, e.g. "multi", "get", "locate region"
	Server  string    // host:port the request went to, when known
	Class   string    // Java exception class, e.g. org.apache.hadoop.hbase.NotServingRegionException
	Message string    // the server's message (first line of its stack trace) or a local description
	Kind    ErrorKind // what to do about it; Retriable() is Kind != KindPermanent
	Err     error     // underlying cause (network error, context error), if any
	// MovedTo is host:port of the server a RegionMovedException names as the region's new home,
	// "" for every other error. The client goes there at once, without asking hbase:meta, which
	// may still name the old server for a moment.
	MovedTo string
}

// Error says what failed, where, the server's exception, and the kind.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("hbase: ")
	b.WriteString(e.Op)
	if e.Server != "" {
		b.WriteString(" on ")
		b.WriteString(e.Server)
	}
	b.WriteString(": ")
	if e.Class != "" {
		b.WriteString(e.Class)
		if e.Message != "" {
			b.WriteString(": ")
		}
	}
	b.WriteString(e.Message)
	if e.Err != nil {
		if e.Class != "" || e.Message != "" {
			b.WriteString(": ")
		}
		b.WriteString(e.Err.Error())
	}
	b.WriteString(" (")
	b.WriteString(e.Kind.String())
	b.WriteString(")")
	return b.String()
}

// Unwrap returns the underlying cause.
func (e *Error) Unwrap() error { return e.Err }

// Retriable reports whether sending the same request again may succeed.
func (e *Error) Retriable() bool { return e.Kind != KindPermanent }

// IsRetriable reports whether err may succeed when retried: an *Error of a non-permanent kind, or a
// context deadline (the caller may try again with more time). Anything else is permanent.
func IsRetriable(err error) bool {
	var e *Error
	if errors.As(err, &e) {
		return e.Retriable()
	}
	return errors.Is(err, context.DeadlineExceeded)
}

// ErrAuthentication is wrapped by errors of connections the server did not authenticate or that could
// not authenticate (Kerberos login, service ticket, SASL handshake, a cluster that requires Kerberos
// from a client without it). Such errors are of KindReconnect, since fixing credentials or
// restarting a KDC makes a retry succeed and a mutation must not be dead-lettered for it; callers
// test errors.Is(err, ErrAuthentication) to report them as a configuration problem.
var ErrAuthentication = errors.New("hbase: authentication failed")

// authError marks err as an authentication failure (errors.Is(err, ErrAuthentication)) without
// changing its text.
type authError struct{ err error }

func (e *authError) Error() string        { return e.err.Error() }
func (e *authError) Unwrap() error        { return e.err }
func (e *authError) Is(target error) bool { return target == ErrAuthentication }

// retryHere reports whether the client's own retry loops should resend after err: a retriable
// error that is not an authentication failure. Credentials do not mend within one call, so an
// ErrAuthentication error goes back to the caller at once, still retriable for the caller's own
// (longer) retries: a sink pauses rather than spinning here for MaxRounds backoffs.
func retryHere(err error) bool { return IsRetriable(err) && !errors.Is(err, ErrAuthentication) }

// ErrClosed is returned by calls on a Client (or connection) after Close.
var ErrClosed = errors.New("hbase: client closed")

// errInvalid makes a permanent error for a request this package refuses to send.
func errInvalid(op, format string, args ...any) *Error {
	return &Error{Op: op, Message: fmt.Sprintf(format, args...), Kind: KindPermanent}
}

// classify maps a Java exception class name (and its message) to what the client should do.
// Unknown classes are retried with backoff, as the Java client does for any IOException that is not a
// DoNotRetryIOException; the retry loop's round limit bounds the cost of guessing wrong.
func classify(class, msg string, doNotRetry bool) ErrorKind {
	short := class
	if i := strings.LastIndexByte(class, '.'); i >= 0 {
		short = class[i+1:]
	}
	switch short {
	case "NotServingRegionException", "RegionMovedException", "WrongRegionException":
		return KindRelocate
	case "CallQueueTooBigException", "RegionOpeningException", "RpcThrottlingException",
		"RetryImmediatelyException", "RegionTooBusyException", "PleaseHoldException",
		"CallDroppedException", "MultiActionResultTooLarge", "CallTimeoutException":
		return KindBackoff
	case "RegionServerAbortedException", "RegionServerStoppedException", "MasterStoppedException",
		"ServerNotRunningYetException", "ConnectionClosingException", "StoppedRpcClientException":
		return KindReconnect
	case "NoSuchColumnFamilyException", "DoNotRetryIOException", "TableNotFoundException",
		"TableNotEnabledException", "TableNotDisabledException", "TableExistsException",
		"FailedSanityCheckException", "InvalidFamilyOperationException", "UnknownProtocolException",
		"AccessDeniedException", "NamespaceNotFoundException", "UnsupportedOperationException",
		"IllegalArgumentException", "UnknownRegionException", "CorruptHFileException",
		"FatalConnectionException", "UnsupportedCompressionCodecException":
		return KindPermanent
	case "IOException":
		if strings.Contains(msg, "Cannot append; log is closed") {
			return KindRelocate
		}
	}
	if doNotRetry {
		return KindPermanent
	}
	return KindBackoff
}

// remoteError builds an *Error from an exception the server named.
func remoteError(op, server, class, stack string, doNotRetry bool) *Error {
	msg := stack
	if i := strings.IndexByte(msg, '\n'); i >= 0 {
		msg = msg[:i]
	}
	// Java's Throwable.toString starts with the class name: drop the repetition.
	msg = strings.TrimPrefix(msg, class+": ")
	msg = strings.TrimPrefix(msg, class)
	e := &Error{Op: op, Server: server, Class: class, Message: msg, Kind: classify(class, stack, doNotRetry)}
	if strings.HasSuffix(class, ".RegionMovedException") {
		e.MovedTo = movedTo(msg)
	}
	return e
}

// movedTo reads the destination of a RegionMovedException from its message, "Region moved to:
// hostname=H port=P startCode=S. As of locationSeqNum=N.", as the server writes it when the
// exception comes without the ExceptionResponse's hostname and port (inside a Multi response).
// It returns "" when the message does not say.
func movedTo(msg string) string {
	_, rest, ok := strings.Cut(msg, "hostname=")
	if !ok {
		return ""
	}
	host, rest, ok := strings.Cut(rest, " ")
	if !ok || host == "" {
		return ""
	}
	_, rest, ok = strings.Cut(rest, "port=")
	if !ok {
		return ""
	}
	port := rest
	if i := strings.IndexFunc(rest, func(r rune) bool { return r < '0' || r > '9' }); i >= 0 {
		port = rest[:i]
	}
	if port == "" {
		return ""
	}
	return net.JoinHostPort(host, port)
}

// IsTableNotFound reports whether err is HBase's TableNotFoundException (by its Java class, in
// full or short), the one answer that says a table does not exist.
func IsTableNotFound(err error) bool {
	var he *Error
	if !errors.As(err, &he) {
		return false
	}
	short := he.Class
	if i := strings.LastIndexByte(short, '.'); i >= 0 {
		short = short[i+1:]
	}
	return short == "TableNotFoundException"
}
