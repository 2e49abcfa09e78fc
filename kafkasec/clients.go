package kafkasec

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// Settings is a loaded Config: certificates and password read, ready to configure clients of
// both kinds. It is safe for concurrent use, and never prints or logs its password.
type Settings struct {
	prefix    string
	tls       *tls.Config // nil: plaintext
	mechanism string      // "": no SASL
	user      string
	password  Secret
}

// TLSEnabled reports whether clients dial with TLS.
func (s *Settings) TLSEnabled() bool { return s.tls != nil }

// Mechanism returns the SASL mechanism, or "" without SASL.
func (s *Settings) Mechanism() string { return s.mechanism }

// String describes the settings without the password: "TLS, SASL SCRAM-SHA-256 as abacus".
func (s Settings) String() string {
	out := "plaintext"
	if s.tls != nil {
		out = "TLS"
		if s.tls.InsecureSkipVerify {
			out += " (broker certificate not verified)"
		}
	}
	if s.mechanism == "" {
		return out + ", no SASL"
	}
	return fmt.Sprintf("%s, SASL %s as %q", out, s.mechanism, s.user)
}

// Format prints String for every verb: fmt would otherwise print the unexported password field
// by reflection.
func (s Settings) Format(f fmt.State, _ rune) { io.WriteString(f, s.String()) }

// LogValue logs the description, never the password.
func (s Settings) LogValue() slog.Value { return slog.StringValue(s.String()) }

// Config shortcuts: each loads the Config anew (see Load for sharing one load among clients).

// Sarama loads the Config and applies it to sc (see Settings.Sarama).
func (c Config) Sarama(sc *sarama.Config) error {
	s, err := c.Load()
	if err != nil {
		return err
	}
	return s.Sarama(sc)
}

// KgoOpts loads the Config and returns the franz-go options (see Settings.KgoOpts).
func (c Config) KgoOpts() ([]kgo.Opt, error) {
	s, err := c.Load()
	if err != nil {
		return nil, err
	}
	return s.KgoOpts(), nil
}

// Sarama sets sc's TLS and SASL from the settings, switching off whatever the settings do not
// have, so that sc carries exactly this security and nothing a previous caller left. The other
// fields of sc are left alone.
func (s *Settings) Sarama(sc *sarama.Config) error {
	if sc == nil {
		return errors.New("kafkasec: nil sarama.Config")
	}
	sc.Net.TLS.Enable = s.tls != nil
	sc.Net.TLS.Config = nil
	if s.tls != nil {
		sc.Net.TLS.Config = s.tls.Clone() // sarama's tls.Dialer fills ServerName from the address when empty
	}
	sc.Net.SASL.Enable = s.mechanism != ""
	sc.Net.SASL.Mechanism = ""
	sc.Net.SASL.User, sc.Net.SASL.Password = "", ""
	sc.Net.SASL.SCRAMClientGeneratorFunc = nil
	if s.mechanism == "" {
		return nil
	}
	if !sc.Version.IsAtLeast(sarama.V1_0_0_0) {
		// SaslHandshake v1 + SaslAuthenticate (KIP-152) need 1.0; v0 would need ApiVersionsRequest off.
		return fmt.Errorf("kafkasec: sarama.Config.Version %s is older than 1.0.0, which SASL needs here", sc.Version)
	}
	sc.Net.SASL.Mechanism = sarama.SASLMechanism(s.mechanism)
	sc.Net.SASL.User = s.user
	sc.Net.SASL.Password = string(s.password)
	sc.Net.SASL.Handshake = true
	sc.Net.SASL.Version = sarama.SASLHandshakeV1
	if s.mechanism != MechanismPlain {
		mech := s.mechanism
		sc.Net.SASL.SCRAMClientGeneratorFunc = func() sarama.SCRAMClient { return &saramaSCRAM{mechanism: mech} }
	}
	return nil
}

// KgoOpts returns the franz-go options for the settings: kgo.DialTLSConfig (a clone of the loaded
// config; franz-go fills ServerName per broker when empty) and kgo.SASL. Do not combine them with
// kgo.Dialer, which franz-go refuses beside DialTLSConfig. The zero settings return no options.
func (s *Settings) KgoOpts() []kgo.Opt {
	var opts []kgo.Opt
	if s.tls != nil {
		opts = append(opts, kgo.DialTLSConfig(s.tls.Clone()))
	}
	if m := s.kgoMechanism(); m != nil {
		opts = append(opts, kgo.SASL(m))
	}
	return opts
}

func (s *Settings) kgoMechanism() sasl.Mechanism {
	pw := string(s.password)
	switch s.mechanism {
	case MechanismPlain:
		return plain.Auth{User: s.user, Pass: pw}.AsMechanism()
	case MechanismSCRAMSHA256:
		return scram.Auth{User: s.user, Pass: pw}.AsSha256Mechanism()
	case MechanismSCRAMSHA512:
		return scram.Auth{User: s.user, Pass: pw}.AsSha512Mechanism()
	}
	return nil
}

// saramaSCRAM drives franz-go's SCRAM session through sarama's SCRAMClient interface. sarama calls
// Begin, then Step("") for the client-first message, then Step with each server message until Done.
type saramaSCRAM struct {
	mechanism string
	session   sasl.Session
	first     []byte // client-first message, returned by the first Step
	done      bool
}

// Begin starts a SCRAM exchange.
func (c *saramaSCRAM) Begin(user, password, authzID string) error {
	a := scram.Auth{Zid: authzID, User: user, Pass: password}
	m := a.AsSha256Mechanism()
	if c.mechanism == MechanismSCRAMSHA512 {
		m = a.AsSha512Mechanism()
	}
	sess, first, err := m.Authenticate(context.Background(), "")
	if err != nil {
		return fmt.Errorf("%s: %w", c.mechanism, err)
	}
	c.session, c.first, c.done = sess, first, false
	return nil
}

// Step answers the server's last message (nothing, the first time).
func (c *saramaSCRAM) Step(challenge string) (string, error) {
	if c.session == nil {
		return "", errors.New(c.mechanism + ": Step before Begin")
	}
	if c.first != nil {
		msg := c.first
		c.first = nil
		return string(msg), nil
	}
	done, resp, err := c.session.Challenge([]byte(challenge))
	if err != nil {
		return "", fmt.Errorf("%s: %w", c.mechanism, err)
	}
	c.done = done
	return string(resp), nil
}

// Done reports whether the server's final message was verified.
func (c *saramaSCRAM) Done() bool { return c.done }
