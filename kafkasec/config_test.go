package kafkasec_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/abacus-stream/abacus/kafkasec"
	"github.com/goccy/go-yaml"
	"github.com/twmb/franz-go/pkg/kgo"
)

const password = "pw-7f3a-do-not-show"

// writePEMs writes a self-signed certificate and its key into dir and returns their paths.
func writePEMs(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kafkasec test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	write(t, certFile, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})))
	write(t, keyFile, string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})))
	return certFile, keyFile
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestValidate: every mistake is reported, each on its own line naming its field as the YAML
// spells it; good configurations pass.
func TestValidate(t *testing.T) {
	dir := t.TempDir()
	cert, key := writePEMs(t, dir)
	pwFile := filepath.Join(dir, "pw")
	write(t, pwFile, password+"\n")
	emptyFile := filepath.Join(dir, "empty")
	write(t, emptyFile, "\n")
	notPEM := filepath.Join(dir, "not.pem")
	write(t, notPEM, "hello")
	missing := filepath.Join(dir, "missing")

	scram := func(s kafkasec.SASL) kafkasec.SASL {
		if s.Mechanism == "" {
			s.Mechanism = "SCRAM-SHA-512"
		}
		return s
	}
	for _, tc := range []struct {
		name string
		cfg  kafkasec.Config
		want []string // lines of the error, in order; none: valid
	}{
		{name: "zero is plaintext", cfg: kafkasec.Config{}},
		{name: "tls with system roots", cfg: kafkasec.Config{TLS: kafkasec.TLS{Enabled: true}}},
		{name: "tls with everything", cfg: kafkasec.Config{TLS: kafkasec.TLS{Enabled: true, CAFile: cert, CertFile: cert, KeyFile: key, ServerName: "b1"}}},
		{name: "password file", cfg: kafkasec.Config{SASL: kafkasec.SASL{Mechanism: "scram-sha-256", Username: "u", PasswordFile: pwFile}}},
		{name: "plain", cfg: kafkasec.Config{SASL: kafkasec.SASL{Mechanism: "PLAIN", Username: "u", Password: password}}},
		{
			name: "unknown mechanism",
			cfg:  kafkasec.Config{SASL: kafkasec.SASL{Mechanism: "FOO", Username: "u", Password: password}},
			want: []string{`kafka.sasl.mechanism: "FOO" is not PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512`},
		},
		{
			name: "missing password file",
			cfg:  kafkasec.Config{SASL: scram(kafkasec.SASL{Username: "u", PasswordFile: missing})},
			want: []string{"kafka.sasl.password_file: open " + missing + ": no such file or directory"},
		},
		{
			name: "empty password file",
			cfg:  kafkasec.Config{SASL: scram(kafkasec.SASL{Username: "u", PasswordFile: emptyFile})},
			want: []string{"kafka.sasl.password_file: " + emptyFile + " is empty"},
		},
		{
			name: "no user, no password",
			cfg:  kafkasec.Config{SASL: scram(kafkasec.SASL{})},
			want: []string{"kafka.sasl.username: required for SCRAM-SHA-512",
				"kafka.sasl.password: required for SCRAM-SHA-512 (or kafka.sasl.password_file)"},
		},
		{
			name: "password twice",
			cfg:  kafkasec.Config{SASL: scram(kafkasec.SASL{Username: "u", Password: password, PasswordFile: pwFile})},
			want: []string{"kafka.sasl.password_file: is set together with kafka.sasl.password: choose one"},
		},
		{
			name: "sasl fields without a mechanism",
			cfg:  kafkasec.Config{SASL: kafkasec.SASL{Username: "u", Password: password}},
			want: []string{"kafka.sasl.username: is set but kafka.sasl.mechanism is empty: say PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512",
				"kafka.sasl.password: is set but kafka.sasl.mechanism is empty: say PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512"},
		},
		{
			name: "tls fields while tls is off",
			cfg:  kafkasec.Config{TLS: kafkasec.TLS{CAFile: cert, InsecureSkipVerify: true}},
			want: []string{"kafka.tls.ca_file: is set but kafka.tls.enabled is false: set enabled: true, or remove it",
				"kafka.tls.insecure_skip_verify: is set but kafka.tls.enabled is false: set enabled: true, or remove it"},
		},
		{
			name: "bad files",
			cfg:  kafkasec.Config{TLS: kafkasec.TLS{Enabled: true, CAFile: notPEM, CertFile: cert, KeyFile: notPEM}},
			want: []string{"kafka.tls.ca_file: " + notPEM + " holds no PEM certificate",
				"kafka.tls.cert_file: with key_file " + notPEM + ": tls: failed to find any PEM data in key input"},
		},
		{
			name: "missing CA, half a client pair",
			cfg:  kafkasec.Config{TLS: kafkasec.TLS{Enabled: true, CAFile: missing, CertFile: cert}},
			want: []string{"kafka.tls.ca_file: open " + missing + ": no such file or directory",
				"kafka.tls.key_file: required with kafka.tls.cert_file"},
		},
		{
			name: "endless or folder files",
			cfg: kafkasec.Config{TLS: kafkasec.TLS{Enabled: true, CAFile: dir},
				SASL: scram(kafkasec.SASL{Username: "u", PasswordFile: "/dev/zero"})},
			want: []string{"kafka.tls.ca_file: " + dir + " is a folder, not a file",
				"kafka.sasl.password_file: /dev/zero is over 4194304 bytes (kafkasec.MaxFileBytes): not a PEM or password file"},
		},
		{
			name: "skip verify beside a CA",
			cfg:  kafkasec.Config{TLS: kafkasec.TLS{Enabled: true, CAFile: cert, InsecureSkipVerify: true}},
			want: []string{"kafka.tls.insecure_skip_verify: is set together with kafka.tls.ca_file, which it would ignore: choose one"},
		},
		{
			name: "prefix",
			cfg:  kafkasec.Config{Prefix: "sinks.kafka", SASL: kafkasec.SASL{Mechanism: "PLAIN", Password: password}},
			want: []string{"sinks.kafka.sasl.username: required for PLAIN"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("valid config refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted; want %q", tc.want)
			}
			if got := strings.Split(err.Error(), "\n"); strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Fatalf("error lines\n%s\nwant\n%s", err, strings.Join(tc.want, "\n"))
			}
			if strings.Contains(err.Error(), password) {
				t.Fatalf("the error shows the password: %v", err)
			}
		})
	}
}

// TestSecretNeverShows formats, marshals and logs a Config every way we know and checks that the
// password never appears, while everything else does.
func TestSecretNeverShows(t *testing.T) {
	cfg := kafkasec.Config{
		TLS:  kafkasec.TLS{Enabled: true},
		SASL: kafkasec.SASL{Mechanism: "SCRAM-SHA-256", Username: "alice", Password: password},
	}
	sec, err := cfg.Load()
	if err != nil {
		t.Fatal(err)
	}
	var outs []string
	for _, v := range []any{cfg, &cfg, cfg.SASL, &cfg.SASL, cfg.SASL.Password, []kafkasec.Secret{cfg.SASL.Password},
		map[string]kafkasec.Secret{"pw": cfg.SASL.Password}, sec, *sec} {
		for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d", "%10.3s", "%T"} {
			outs = append(outs, fmt.Sprintf(verb, v))
		}
		outs = append(outs, fmt.Sprint(v), fmt.Sprintln(v))
	}
	outs = append(outs, cfg.SASL.Password.String(), cfg.SASL.Password.GoString(), sec.String())

	for _, m := range []func(any) ([]byte, error){json.Marshal, yaml.Marshal} {
		for _, v := range []any{cfg, &cfg, cfg.SASL.Password} {
			b, err := m(v)
			if err != nil {
				t.Fatal(err)
			}
			outs = append(outs, string(b))
		}
	}
	txt, err := cfg.SASL.Password.MarshalText()
	if err != nil {
		t.Fatal(err)
	}
	outs = append(outs, string(txt))

	var logs bytes.Buffer
	for _, h := range []slog.Handler{slog.NewTextHandler(&logs, nil), slog.NewJSONHandler(&logs, nil)} {
		l := slog.New(h)
		l.Info("config", "kafka", cfg, "ptr", &cfg, "password", cfg.SASL.Password, "settings", sec)
		l.Info("group", slog.Group("g", slog.Any("sasl", cfg.SASL)))
	}
	outs = append(outs, logs.String())

	all := strings.Join(outs, "\n")
	if strings.Contains(all, password) {
		for _, o := range outs {
			if strings.Contains(o, password) {
				t.Errorf("password shown in: %s", o)
			}
		}
	}
	// The redaction must not hide the rest: the user and the marker show.
	for _, want := range []string{"alice", "[redacted]", "SCRAM-SHA-256"} {
		if !strings.Contains(all, want) {
			t.Errorf("no %q anywhere in the output", want)
		}
	}
	if y, _ := yaml.Marshal(cfg); !strings.Contains(string(y), "password: '[redacted]'") && !strings.Contains(string(y), `password: "[redacted]"`) {
		t.Errorf("YAML does not show the redacted password:\n%s", y)
	}
	// An unset password stays visibly unset.
	if got := fmt.Sprint(kafkasec.Secret("")); got != "" {
		t.Errorf("empty secret prints %q", got)
	}
}

// TestSecretReadsFromYAML: redaction is for output only; a file's password is read as written.
func TestSecretReadsFromYAML(t *testing.T) {
	var cfg kafkasec.Config
	src := "tls:\n  enabled: true\nsasl:\n  mechanism: PLAIN\n  username: bob\n  password: " + password + "\n"
	if err := yaml.Unmarshal([]byte(src), &cfg); err != nil {
		t.Fatal(err)
	}
	if string(cfg.SASL.Password) != password || cfg.SASL.Username != "bob" || !cfg.TLS.Enabled {
		t.Fatalf("read %+v", cfg)
	}
	var fromJSON kafkasec.Config
	if err := json.Unmarshal([]byte(`{"sasl":{"mechanism":"PLAIN","username":"bob","password":"`+password+`"}}`), &fromJSON); err != nil {
		t.Fatal(err)
	}
	if string(fromJSON.SASL.Password) != password {
		t.Fatalf("JSON password read as %q", string(fromJSON.SASL.Password))
	}
}

// TestSaramaSettings: the sarama config carries exactly the security of the Config and passes
// sarama's own validation; the zero Config switches off what an earlier caller switched on.
func TestSaramaSettings(t *testing.T) {
	for _, mech := range []string{"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"} {
		cfg := kafkasec.Config{TLS: kafkasec.TLS{Enabled: true, ServerName: "b1"},
			SASL: kafkasec.SASL{Mechanism: mech, Username: "u", Password: password}}
		sc := sarama.NewConfig()
		if err := cfg.Sarama(sc); err != nil {
			t.Fatal(err)
		}
		if err := sc.Validate(); err != nil {
			t.Fatalf("%s: sarama refuses it: %v", mech, err)
		}
		n := sc.Net
		if !n.TLS.Enable || n.TLS.Config == nil || n.TLS.Config.ServerName != "b1" || !n.SASL.Enable ||
			string(n.SASL.Mechanism) != mech || n.SASL.User != "u" || n.SASL.Password != password ||
			n.SASL.Version != sarama.SASLHandshakeV1 || (mech != "PLAIN") != (n.SASL.SCRAMClientGeneratorFunc != nil) {
			t.Fatalf("%s: sarama Net = %+v", mech, n)
		}
		if err := (kafkasec.Config{}).Sarama(sc); err != nil {
			t.Fatal(err)
		}
		if sc.Net.TLS.Enable || sc.Net.TLS.Config != nil || sc.Net.SASL.Enable || sc.Net.SASL.Password != "" {
			t.Fatalf("zero Config left security on: %+v", sc.Net)
		}
	}
	old := sarama.NewConfig()
	old.Version = sarama.V0_11_0_0
	err := kafkasec.Config{SASL: kafkasec.SASL{Mechanism: "PLAIN", Username: "u", Password: password}}.Sarama(old)
	if err == nil || !strings.Contains(err.Error(), "older than 1.0.0") {
		t.Fatalf("sarama version 0.11 with SASL: %v", err)
	}
}

// TestKgoOpts: franz-go takes the options; the zero Config adds none.
func TestKgoOpts(t *testing.T) {
	opts, err := kafkasec.Config{}.KgoOpts()
	if err != nil || len(opts) != 0 {
		t.Fatalf("zero config: %d options, %v", len(opts), err)
	}
	opts, err = kafkasec.Config{TLS: kafkasec.TLS{Enabled: true},
		SASL: kafkasec.SASL{Mechanism: "SCRAM-SHA-512", Username: "u", Password: password}}.KgoOpts()
	if err != nil || len(opts) != 2 {
		t.Fatalf("tls+sasl: %d options, %v", len(opts), err)
	}
	cl, err := kgo.NewClient(append(opts, kgo.SeedBrokers("127.0.0.1:1"))...)
	if err != nil {
		t.Fatalf("franz-go refuses the options: %v", err)
	}
	cl.Close()
	if _, err := (kafkasec.Config{SASL: kafkasec.SASL{Mechanism: "FOO"}}).KgoOpts(); err == nil {
		t.Fatal("invalid config gave options")
	}
}

// TestCheckNeverHangs: a broker address where nothing listens, and one that accepts connections
// but never answers, both return within the context's deadline as "not reachable".
func TestCheckNeverHangs(t *testing.T) {
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := closed.Addr().String()
	closed.Close()

	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	go func() {
		var held []net.Conn // accepted, never answered
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	cfg := kafkasec.Config{SASL: kafkasec.SASL{Mechanism: "PLAIN", Username: "u", Password: password}}
	for _, brokers := range [][]string{{refused}, {silent.Addr().String()}, {refused, silent.Addr().String()}} {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		start := time.Now()
		err := cfg.Check(ctx, brokers)
		cancel()
		took := time.Since(start)
		if err == nil {
			t.Fatalf("%v: Check passed", brokers)
		}
		if took > 4*time.Second {
			t.Fatalf("%v: Check took %v with a 2 s deadline", brokers, took)
		}
		if !strings.Contains(err.Error(), "not reachable") || strings.Contains(err.Error(), password) {
			t.Fatalf("%v: %v", brokers, err)
		}
		if !kafkasec.IsUnreachable(err) {
			t.Fatalf("%v: IsUnreachable false for %v", brokers, err)
		}
	}
	// One refusal among unreachable brokers says something about the settings.
	if kafkasec.IsUnreachable(errors.Join(errors.New("kafka.sasl.password: refused"))) {
		t.Fatal("IsUnreachable true for a refusal")
	}
	if err := cfg.Check(context.Background(), nil); err == nil || !strings.Contains(err.Error(), "no brokers") {
		t.Fatalf("no brokers: %v", err)
	}
}
