package kafkasec

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// DefaultCheckTimeout bounds Check when its context has no deadline.
const DefaultCheckTimeout = 10 * time.Second

// Check loads the Config and checks it against the brokers (see Settings.Check).
func (c Config) Check(ctx context.Context, brokers []string) error {
	s, err := c.Load()
	if err != nil {
		return err
	}
	return s.Check(ctx, brokers)
}

// Check connects to the seed brokers, one at a time, with these settings and asks one of them for
// metadata, so that a program fails at start with an error naming the setting at fault rather than
// retrying in the background for ever: a refused login names kafka.sasl.username and
// kafka.sasl.password and the mechanism; a broker certificate that the CA does not sign names
// kafka.tls.ca_file; TLS spoken to a plaintext port (or the reverse) says so. A broker that cannot
// be reached moves on to the next seed. Without a deadline on ctx, Check gives up after
// DefaultCheckTimeout; it never retries a refusal.
func (s *Settings) Check(ctx context.Context, brokers []string) error {
	if len(brokers) == 0 {
		return errors.New("kafkasec check: no brokers given")
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultCheckTimeout)
		defer cancel()
	}
	var errs []error
	for _, addr := range brokers {
		err := s.checkOne(ctx, addr)
		if err == nil {
			return nil
		}
		errs = append(errs, err)
		// A refusal says the settings are wrong, and the next broker would say the same; only an
		// unreachable broker is worth passing over.
		if !isUnreachable(err) || ctx.Err() != nil {
			break
		}
	}
	return errors.Join(errs...)
}

// checkOne sends one Metadata request (for no topics) to addr; the connection first does the TLS
// handshake, ApiVersions and the SASL exchange, which is what is being checked.
func (s *Settings) checkOne(ctx context.Context, addr string) error {
	opts := append(s.KgoOpts(),
		kgo.SeedBrokers(addr),
		kgo.DialTimeout(5*time.Second),
		kgo.RequestRetries(0),
		kgo.RetryTimeout(time.Second),
	)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("kafka broker %s: %w", addr, err)
	}
	defer cl.Close()
	seeds := cl.SeedBrokers()
	if len(seeds) == 0 {
		return fmt.Errorf("kafka broker %s: the client has no seed broker for it", addr)
	}
	req := kmsg.NewPtrMetadataRequest()
	req.Topics = []kmsg.MetadataRequestTopic{} // none: an empty list, not null (which means all)
	_, err = seeds[0].Request(ctx, req)
	if err == nil {
		return nil
	}
	return s.explain(addr, err)
}

// isUnreachable reports whether err says nothing about the settings: no route, no listener, no
// answer in time.
func isUnreachable(err error) bool {
	var ue *unreachableError
	return errors.As(err, &ue)
}

type unreachableError struct{ err error }

func (e *unreachableError) Error() string { return e.err.Error() }
func (e *unreachableError) Unwrap() error { return e.err }

// explain maps what the broker (or the TLS layer) answered to the setting at fault. The result
// wraps the original error, scrubbed of the password should any layer ever have echoed it.
func (s *Settings) explain(addr string, err error) error {
	p := s.prefix
	var (
		unknownCA  x509.UnknownAuthorityError
		hostname   x509.HostnameError
		invalid    x509.CertificateInvalidError
		alert      tls.AlertError
		recordHdr  tls.RecordHeaderError
		firstRead  *kgo.ErrFirstReadEOF
		certVerify *tls.CertificateVerificationError
	)
	var out error
	switch {
	case errors.Is(err, kerr.SaslAuthenticationFailed):
		out = fmt.Errorf("%s.sasl.username, %s.sasl.password: broker %s refused %s login of user %q (wrong user name or password, or no %s credentials for this user): %w",
			p, p, addr, s.mechanism, s.user, s.mechanism, err)
	case errors.Is(err, kerr.UnsupportedSaslMechanism):
		out = fmt.Errorf("%s.sasl.mechanism: broker %s does not enable %s on this listener: %w", p, addr, s.mechanism, err)
	case errors.Is(err, kerr.IllegalSaslState):
		out = fmt.Errorf("%s.sasl.mechanism: broker %s does not expect SASL on this listener (is it a PLAINTEXT or SSL port? remove %s.sasl, or use the SASL port): %w", p, addr, p, err)
	case errors.As(err, &unknownCA):
		out = fmt.Errorf("%s.tls.ca_file: the certificate of broker %s is not signed by %s: %w", p, addr, s.caSource(), err)
	case errors.As(err, &hostname):
		out = fmt.Errorf("%s.tls.server_name: the certificate of broker %s is not valid for %q: %w", p, addr, hostname.Host, err)
	case errors.As(err, &invalid):
		out = fmt.Errorf("%s.tls: the certificate of broker %s is not valid: %w", p, addr, err)
	case errors.As(err, &certVerify):
		out = fmt.Errorf("%s.tls.ca_file: the certificate of broker %s does not verify against %s: %w", p, addr, s.caSource(), err)
	case errors.As(err, &alert):
		out = fmt.Errorf("%s.tls: broker %s ended the TLS handshake (%v): if it requires a client certificate, set %s.tls.cert_file and key_file: %w", p, addr, alert, p, err)
	case errors.As(err, &recordHdr):
		out = fmt.Errorf("%s.tls.enabled: broker %s does not speak TLS on this port (its first bytes are not a TLS record): set %s.tls.enabled: false or use its TLS port: %w", p, addr, p, err)
	case s.tls != nil && isHandshakeEOF(err):
		out = fmt.Errorf("%s.tls.enabled: broker %s closed the connection during the TLS handshake: this port probably does not speak TLS (a PLAINTEXT or SASL_PLAINTEXT listener); set %s.tls.enabled: false or use its SSL/SASL_SSL port: %w", p, addr, p, err)
	case s.tls == nil && strings.Contains(err.Error(), "tls alert record"):
		out = fmt.Errorf("%s.tls.enabled: broker %s speaks TLS on this port: set %s.tls.enabled: true (and %s.tls.ca_file): %w", p, addr, p, p, err)
	case errors.As(err, &firstRead):
		switch {
		case s.tls == nil:
			out = fmt.Errorf("%s.tls.enabled, %s.sasl.mechanism: broker %s closed the connection at once: this listener probably needs TLS or SASL (or both): %w", p, p, addr, err)
		case s.mechanism == "":
			out = fmt.Errorf("%s.sasl.mechanism: broker %s closed the connection after the TLS handshake: this listener probably needs SASL: %w", p, addr, err)
		default:
			out = fmt.Errorf("kafka broker %s closed the connection: %w", addr, err)
		}
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH),
		errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return &unreachableError{fmt.Errorf("kafka broker %s: not reachable: %w", addr, err)}
	default:
		out = fmt.Errorf("kafka broker %s (%s): %w", addr, s.String(), err)
	}
	return scrub(out, s.password)
}

func (s *Settings) caSource() string {
	if s.tls != nil && s.tls.RootCAs != nil {
		return "a CA of " + s.prefix + ".tls.ca_file"
	}
	return "a CA the system trusts (set " + s.prefix + ".tls.ca_file)"
}

// isHandshakeEOF reports a connection closed or reset before the TLS handshake finished, which is
// what a Kafka plaintext listener does with a ClientHello (it reads it as an oversized request).
func isHandshakeEOF(err error) bool {
	if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, syscall.ECONNRESET) {
		return false
	}
	// franz-go's ErrFirstReadEOF does not export which step the EOF came at; its text does, and
	// TestCheckWrongPorts fails if that text changes.
	var firstRead *kgo.ErrFirstReadEOF
	return !errors.As(err, &firstRead) || strings.Contains(err.Error(), "after a dial")
}

// scrub keeps a password out of an error's text, should a lower layer ever put it there; the
// error chain (errors.Is/As) is kept.
func scrub(err error, pw Secret) error {
	if pw == "" || !strings.Contains(err.Error(), string(pw)) {
		return err
	}
	return &scrubbed{err: err, pw: string(pw)}
}

type scrubbed struct {
	err error
	pw  string
}

func (e *scrubbed) Error() string { return strings.ReplaceAll(e.err.Error(), e.pw, redacted) }
func (e *scrubbed) Unwrap() error { return e.err }

// IsUnreachable reports whether an error of Check says only that no broker could be reached (no
// route, no listener, no answer in time), and nothing about the settings: a long-running program
// may wait for its brokers then, while a refused login or certificate is worth stopping for.
// Check joins one error per broker tried: every one of them must say so.
func IsUnreachable(err error) bool {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs := j.Unwrap()
		for _, e := range errs {
			if !IsUnreachable(e) {
				return false
			}
		}
		return len(errs) > 0
	}
	return isUnreachable(err)
}
