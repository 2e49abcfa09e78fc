package app

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/abacus-stream/abacus/hbase"
	"github.com/abacus-stream/abacus/kafkasec"
	"github.com/abacus-stream/abacus/store"
)

// Start steps of long-running roles are tried again while a server they need does not answer:
// an orchestrator starts the sinks, the processor, Kafka and HBase in any order, and a role
// that exited because HBase was still starting would only be restarted into the same race.
const (
	startRetryFirst = 500 * time.Millisecond
	startRetryMax   = 10 * time.Second
	// startAttempt bounds one attempt of a long-running role's step, so that a server that
	// accepts connections and never answers is reported and tried again rather than waited on.
	startAttempt = 30 * time.Second
	// oneShotAttempt bounds the single attempt of a command that runs to its end (admin, query,
	// status): it fails with the error instead of waiting.
	oneShotAttempt = 2 * time.Minute
)

// waiter runs the start steps of a process's long-running roles: a step that fails because a
// server cannot be reached is tried again, with a warning in the log and on /readyz, until it
// succeeds or the process is stopped. A nil waiter tries each step once.
type waiter struct {
	log *slog.Logger
	// report tells /readyz what the process is waiting for ("" once started).
	report func(string)
}

// do runs step, each attempt bounded by a timeout, and tries it again while it fails for want
// of a server (waitable). Any other error, and the last one when ctx ends, is returned.
func (w *waiter) do(ctx context.Context, what string, step func(context.Context) error) error {
	attempt := oneShotAttempt
	if w != nil {
		attempt = startAttempt
	}
	backoff := startRetryFirst
	for tries := 1; ; tries++ {
		actx, cancel := context.WithTimeout(ctx, attempt)
		err := step(actx)
		cancel()
		if err == nil {
			if w != nil && tries > 1 {
				w.log.Info("reached "+what, "tries", tries)
				w.report("")
			}
			return nil
		}
		if w == nil || ctx.Err() != nil || !waitable(err) {
			return err
		}
		w.log.Warn("cannot reach "+what+"; waiting for it", "err", err, "retry_in", backoff, "tries", tries)
		w.report("waiting for " + what + ": " + err.Error())
		select {
		case <-ctx.Done():
			return err
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, startRetryMax)
	}
}

// waitable reports whether err says only that a server did not answer (or answered "not yet"):
// worth waiting for. Refused credentials, certificates and wrong settings are not.
func waitable(err error) bool {
	var op *net.OpError
	switch {
	case errors.Is(err, hbase.ErrAuthentication), errors.Is(err, hbase.ErrClosed):
		return false
	case kafkasec.IsUnreachable(err), hbase.IsRetriable(err), kerr.IsRetriable(err),
		errors.As(err, &op), errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, store.ErrNoSuchTable): // a table admin create has still to make
		return true
	}
	return false
}
