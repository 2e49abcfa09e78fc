package testenv

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/abacus-stream/abacus/internal/testenv/gate"
)

// Environment variables of the single test broker's SASL_SSL listener; testenv/services.sh env
// prints them.
const (
	EnvKafkaSASL       = "ABACUS_KAFKA_SASL_BROKERS"      // SASL_SSL host:port list
	EnvKafkaCA         = "ABACUS_KAFKA_CA_FILE"           // PEM CA that signs the listener's certificate
	EnvKafkaUntrusted  = "ABACUS_KAFKA_UNTRUSTED_CA_FILE" // PEM CA that signed nothing the broker has
	envSASLUserFmt     = "ABACUS_KAFKA_SASL_%s_USER"
	envSASLPasswordFmt = "ABACUS_KAFKA_SASL_%s_PASSWORD"
)

// SASLUser is one login of the SASL_SSL listener.
type SASLUser struct {
	Name, Password string
}

// KafkaSASL is the test broker's SASL_SSL listener: where it is, the CA that signs its
// certificate, a CA that does not, and one user per mechanism (PLAIN users live in the broker's
// JAAS configuration, SCRAM users in its metadata log).
type KafkaSASL struct {
	Brokers         []string
	CAFile          string
	UntrustedCAFile string
	Users           map[string]SASLUser // by mechanism: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512
}

// KafkaSASLListener returns the SASL_SSL listener of the real test broker, or ends the test through
// gate.Unavailable when the environment does not name one or it does not answer.
func KafkaSASLListener(t testing.TB) KafkaSASL {
	t.Helper()
	if os.Getenv(EnvKafkaSASL) == "" {
		msg := EnvKafkaSASL + " is unset: no SASL_SSL listener to test against; " + gate.StartHint +
			" and eval \"$(testenv/services.sh env)\""
		gate.Unavailable(t, msg)
	}
	k := KafkaSASL{
		Brokers:         strings.Split(gate.Find(t, "Kafka SASL_SSL listener", EnvKafkaSASL, ""), ","),
		CAFile:          os.Getenv(EnvKafkaCA),
		UntrustedCAFile: os.Getenv(EnvKafkaUntrusted),
		Users:           map[string]SASLUser{},
	}
	for mech, env := range map[string]string{"PLAIN": "PLAIN", "SCRAM-SHA-256": "SCRAM256", "SCRAM-SHA-512": "SCRAM512"} {
		u := SASLUser{Name: os.Getenv(fmt.Sprintf(envSASLUserFmt, env)), Password: os.Getenv(fmt.Sprintf(envSASLPasswordFmt, env))}
		if u.Name == "" || u.Password == "" {
			t.Fatalf("%s is set but %s or %s is not: eval \"$(testenv/services.sh env)\" sets them all",
				EnvKafkaSASL, fmt.Sprintf(envSASLUserFmt, env), fmt.Sprintf(envSASLPasswordFmt, env))
		}
		k.Users[mech] = u
	}
	for env, f := range map[string]string{EnvKafkaCA: k.CAFile, EnvKafkaUntrusted: k.UntrustedCAFile} {
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("%s: %v (testenv/services.sh makes it when it starts the broker)", env, err)
		}
	}
	return k
}
