// Package kafkasec turns one Kafka security configuration (TLS and SASL) into settings for both
// Kafka clients abacus uses: sarama (under goka, for processors and views) and franz-go (sinks,
// admin, tools). Every role of a deployment is meant to build its client from the same Config, so
// they all reach the brokers with identical security; a setting that works for one role and not
// for another cannot happen.
//
// It must never import another abacus package (it is a leaf that app, processors and sinks build
// on) and it must never put a password in a string: passwords are Secret values, which print,
// marshal and log as "[redacted]", and no error of this package contains one.
//
// How callers use it:
//
//	var cfg kafkasec.Config              // the `kafka:` block of the YAML file holds tls: and sasl:
//	cfg.Prefix = "kafka"                 // how errors name fields; "kafka" when empty
//	sec, err := cfg.Load()               // validate once and read the certificate files once
//	if err != nil { ... }                // every mistake, each naming its field: kafka.sasl.password_file: ...
//	if err := sec.Check(ctx, brokers); err != nil { ... } // fail fast: one connection, error names the setting at fault
//
//	// franz-go (sinks, admin):
//	cl, err := kgo.NewClient(append(sec.KgoOpts(), kgo.SeedBrokers(brokers...))...)
//
//	// sarama and goka (processors, views): apply to the sarama config handed to goka's builders
//	sc := goka.DefaultConfig()
//	if err := sec.Sarama(sc); err != nil { ... }
//	goka.WithConsumerGroupBuilder(goka.ConsumerGroupBuilderWithConfig(sc))
//	goka.WithProducerBuilder(goka.ProducerBuilderWithConfig(sc))
//	goka.WithTopicManagerBuilder(goka.TopicManagerBuilderWithConfig(sc, tmc))
//	goka.WithConsumerSaramaBuilder(goka.SaramaConsumerBuilderWithConfig(sc))
//	// (or goka.ReplaceGlobalConfig(sc) when one process has one cluster)
//
// The zero Config is plaintext without SASL, and applying it switches TLS and SASL off in a sarama
// config, so a role cannot keep security settings that the configuration does not have.
// Config.Sarama, Config.KgoOpts and Config.Check are shortcuts that Load on every call; a program
// with several roles should Load once and share the Settings, so that every client uses the same
// loaded certificates.
//
// SCRAM for sarama uses franz-go's SCRAM implementation (pkg/sasl/scram) through sarama's
// SCRAMClient interface: one implementation for both clients, and no extra module.
package kafkasec

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/abacus-stream/abacus/internal/smallfile"
)

// SASL mechanisms this package configures; Kafka spells them this way.
const (
	MechanismPlain       = "PLAIN"
	MechanismSCRAMSHA256 = "SCRAM-SHA-256"
	MechanismSCRAMSHA512 = "SCRAM-SHA-512"
)

// DefaultPrefix is how errors name the Config block when Config.Prefix is empty.
const DefaultPrefix = "kafka"

// Config is how a deployment reaches its brokers securely. It is meant to sit in the `kafka:`
// block of a YAML file beside the broker list:
//
//	kafka:
//	  brokers: [broker1:9094]
//	  tls: {enabled: true, ca_file: /etc/abacus/ca.pem}
//	  sasl: {mechanism: SCRAM-SHA-512, username: abacus, password_file: /run/secrets/kafka}
type Config struct {
	TLS  TLS  `yaml:"tls" json:"tls"`
	SASL SASL `yaml:"sasl" json:"sasl"`

	// Prefix is the YAML path of this block in the caller's file; errors name fields under it
	// (kafka.sasl.password_file). Empty means DefaultPrefix. It is not part of the file.
	Prefix string `yaml:"-" json:"-"`
}

// TLS configures encryption and broker verification. Nothing but Enabled is needed against brokers
// whose certificates the system trusts.
type TLS struct {
	// Enabled switches TLS on; the other fields are refused while it is off, so that a
	// half-written TLS block never silently means plaintext.
	Enabled bool `yaml:"enabled" json:"enabled"`
	// CAFile is a PEM file of the CAs that sign the brokers' certificates; empty means the
	// system's roots.
	CAFile string `yaml:"ca_file" json:"ca_file"`
	// CertFile and KeyFile are a PEM client certificate and its key, for brokers that require
	// client authentication (ssl.client.auth=required). Both or neither.
	CertFile string `yaml:"cert_file" json:"cert_file"`
	KeyFile  string `yaml:"key_file" json:"key_file"`
	// ServerName is the name to verify the brokers' certificates against; empty means the host
	// of each broker address as dialed.
	ServerName string `yaml:"server_name" json:"server_name"`
	// InsecureSkipVerify accepts any broker certificate: encryption without authentication of
	// the broker. For experiments only; refused together with CAFile, which it would ignore.
	InsecureSkipVerify bool `yaml:"insecure_skip_verify" json:"insecure_skip_verify"`
}

// SASL configures authentication. An empty Mechanism means no SASL.
type SASL struct {
	// Mechanism is PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (any letter case).
	Mechanism string `yaml:"mechanism" json:"mechanism"`
	Username  string `yaml:"username" json:"username"`
	// Password, or PasswordFile: a file whose content (one trailing newline removed) is the
	// password, as secrets are mounted in containers. Exactly one of them.
	Password     Secret `yaml:"password" json:"password"`
	PasswordFile string `yaml:"password_file" json:"password_file"`
}

// Secret is a string that never shows itself: formatted with any verb, marshalled to YAML, JSON
// or text, or logged through slog, it reads "[redacted]". string(s) is the only way to its value.
// Unmarshalling is untouched, so a Secret reads from a file like any string; a marshalled Config
// therefore does not round-trip its password, on purpose.
type Secret string

const redacted = "[redacted]"

// String returns "[redacted]" unless the secret is empty, so that a missing password still shows.
func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return redacted
}

// GoString is what %#v shows.
func (s Secret) GoString() string { return fmt.Sprintf("kafkasec.Secret(%q)", s.String()) }

// Format makes every fmt verb print the redacted form. Without it a bad verb (%d) would print the
// raw string: fmt turns off Stringer while it reports a bad verb.
func (s Secret) Format(f fmt.State, verb rune) {
	if verb == 'v' && f.Flag('#') {
		fmt.Fprint(f, s.GoString())
		return
	}
	fmt.Fprint(f, s.String())
}

// MarshalYAML writes the redacted form (goccy/go-yaml and yaml.v3 both call it).
func (s Secret) MarshalYAML() (any, error) { return s.String(), nil }

// MarshalJSON writes the redacted form.
func (s Secret) MarshalJSON() ([]byte, error) { return []byte(`"` + s.String() + `"`), nil }

// MarshalText writes the redacted form, for every encoder that takes text (TOML, XML, map keys).
func (s Secret) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// LogValue makes slog log the redacted form.
func (s Secret) LogValue() slog.Value { return slog.StringValue(s.String()) }

func (c Config) prefix() string {
	if c.Prefix == "" {
		return DefaultPrefix
	}
	return c.Prefix
}

// Validate checks the configuration and reads the files it names; it returns every mistake, each
// naming its field as the YAML spells it (kafka.sasl.mechanism: "FOO" is not PLAIN, SCRAM-SHA-256
// or SCRAM-SHA-512).
func (c Config) Validate() error {
	_, err := c.Load()
	return err
}

// Load validates the configuration and reads its files once: the CA, the client certificate and
// key, the password file. The Settings it returns configure any number of clients of both kinds.
// The error joins every mistake found, each naming its field.
func (c Config) Load() (*Settings, error) {
	p := c.prefix()
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s.%s: %s", p, field, fmt.Sprintf(format, args...)))
	}
	badErr := func(field string, err error) { errs = append(errs, fmt.Errorf("%s.%s: %w", p, field, err)) }

	s := &Settings{prefix: p}
	t := c.TLS
	if !t.Enabled {
		for _, f := range []struct {
			name string
			set  bool
		}{
			{"ca_file", t.CAFile != ""}, {"cert_file", t.CertFile != ""}, {"key_file", t.KeyFile != ""},
			{"server_name", t.ServerName != ""}, {"insecure_skip_verify", t.InsecureSkipVerify},
		} {
			if f.set {
				bad("tls."+f.name, "is set but %s.tls.enabled is false: set enabled: true, or remove it", p)
			}
		}
	} else {
		tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName, InsecureSkipVerify: t.InsecureSkipVerify}
		if t.InsecureSkipVerify && t.CAFile != "" {
			bad("tls.insecure_skip_verify", "is set together with %s.tls.ca_file, which it would ignore: choose one", p)
		}
		if t.CAFile != "" {
			pem, err := readFile(t.CAFile, MaxFileBytes)
			if err != nil {
				badErr("tls.ca_file", err)
			} else {
				pool := x509.NewCertPool()
				if !pool.AppendCertsFromPEM(pem) {
					bad("tls.ca_file", "%s holds no PEM certificate", t.CAFile)
				}
				tc.RootCAs = pool
			}
		}
		switch {
		case t.CertFile != "" && t.KeyFile == "":
			bad("tls.key_file", "required with %s.tls.cert_file", p)
		case t.CertFile == "" && t.KeyFile != "":
			bad("tls.cert_file", "required with %s.tls.key_file", p)
		case t.CertFile != "":
			pair, err := loadKeyPair(t.CertFile, t.KeyFile)
			if err != nil {
				badErr("tls.cert_file", fmt.Errorf("with key_file %s: %w", t.KeyFile, err))
			} else {
				tc.Certificates = []tls.Certificate{pair}
			}
		}
		s.tls = tc
	}

	a := c.SASL
	mech := strings.ToUpper(strings.TrimSpace(a.Mechanism))
	switch mech {
	case "":
		for _, f := range []struct {
			name string
			set  bool
		}{{"username", a.Username != ""}, {"password", a.Password != ""}, {"password_file", a.PasswordFile != ""}} {
			if f.set {
				bad("sasl."+f.name, "is set but %s.sasl.mechanism is empty: say PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", p)
			}
		}
	case MechanismPlain, MechanismSCRAMSHA256, MechanismSCRAMSHA512:
		s.mechanism = mech
		s.user = a.Username
		if a.Username == "" {
			bad("sasl.username", "required for %s", mech)
		}
		switch {
		case a.Password != "" && a.PasswordFile != "":
			bad("sasl.password_file", "is set together with %s.sasl.password: choose one", p)
		case a.Password != "":
			s.password = a.Password
		case a.PasswordFile != "":
			pw, err := readPasswordFile(a.PasswordFile)
			if err != nil {
				badErr("sasl.password_file", err)
			}
			s.password = pw
		default:
			bad("sasl.password", "required for %s (or %s.sasl.password_file)", mech, p)
		}
	default:
		bad("sasl.mechanism", "%q is not PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", a.Mechanism)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return s, nil
}

// MaxFileBytes bounds every file this package reads (CA, certificate, key, password): a path that
// names /dev/zero, a FIFO or a log by mistake fails with an error naming the field instead of
// filling memory. Real certificate bundles are a few hundred KiB at most.
const MaxFileBytes = 4 << 20

// readFile reads at most limit bytes of path; a longer file is an error, never cut silently.
func readFile(path string, limit int64) ([]byte, error) {
	b, err := smallfile.Read(path, limit)
	if tl := (*smallfile.TooLargeError)(nil); errors.As(err, &tl) {
		return nil, fmt.Errorf("%w (kafkasec.MaxFileBytes): not a PEM or password file", err)
	}
	return b, err
}

// loadKeyPair is tls.LoadX509KeyPair with the files read through readFile.
func loadKeyPair(certFile, keyFile string) (tls.Certificate, error) {
	cert, err := readFile(certFile, MaxFileBytes)
	if err != nil {
		return tls.Certificate{}, err
	}
	key, err := readFile(keyFile, MaxFileBytes)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.X509KeyPair(cert, key)
}

// readPasswordFile returns the file's content without one trailing newline (files written by
// editors and `echo` end with one; Kafka passwords never do).
func readPasswordFile(path string) (Secret, error) {
	b, err := readFile(path, MaxFileBytes)
	if err != nil {
		return "", err
	}
	pw := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
	if pw == "" {
		return "", fmt.Errorf("%s is empty", path)
	}
	return Secret(pw), nil
}
