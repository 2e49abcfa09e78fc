package kafkasec_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/abacus-stream/abacus/internal/testenv"
	"github.com/abacus-stream/abacus/kafkasec"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

var mechanisms = []string{kafkasec.MechanismPlain, kafkasec.MechanismSCRAMSHA256, kafkasec.MechanismSCRAMSHA512}

// failFast is how long a refused configuration may take to report itself.
const failFast = 15 * time.Second

// secure returns the Config that logs in as the test user of mech over TLS.
func secure(k testenv.KafkaSASL, mech string) kafkasec.Config {
	u := k.Users[mech]
	return kafkasec.Config{
		TLS:  kafkasec.TLS{Enabled: true, CAFile: k.CAFile},
		SASL: kafkasec.SASL{Mechanism: mech, Username: u.Name, Password: kafkasec.Secret(u.Password)},
	}
}

// TestSASLProduceConsume proves that one Config gives both clients a working secure connection:
// for every mechanism, franz-go and sarama (the client under goka) each create a topic, produce a
// record and read it back through the real broker's SASL_SSL listener.
func TestSASLProduceConsume(t *testing.T) {
	k := testenv.KafkaSASLListener(t)
	for _, mech := range mechanisms {
		cfg := secure(k, mech)
		sec, err := cfg.Load()
		if err != nil {
			t.Fatal(err)
		}
		t.Run(mech+"/franz-go", func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			topic := fmt.Sprintf("kafkasec-kgo-%s-%d", strings.ToLower(mech), time.Now().UnixNano())
			cl, err := kgo.NewClient(append(sec.KgoOpts(), kgo.SeedBrokers(k.Brokers...),
				kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, nil, topic); err != nil {
				t.Fatalf("create %s over SASL_SSL: %v", topic, err)
			}
			want := "kgo " + mech + " " + topic
			if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte(want)}).FirstErr(); err != nil {
				t.Fatalf("produce over SASL_SSL: %v", err)
			}
			for {
				fs := cl.PollFetches(ctx)
				if err := ctx.Err(); err != nil {
					t.Fatalf("no record read back from %s: %v", topic, err)
				}
				if errs := fs.Errors(); len(errs) > 0 {
					t.Fatalf("fetch over SASL_SSL: %v", errs[0].Err)
				}
				if recs := fs.Records(); len(recs) > 0 {
					if got := string(recs[0].Value); got != want {
						t.Fatalf("read %q, produced %q", got, want)
					}
					return
				}
			}
		})
		t.Run(mech+"/sarama", func(t *testing.T) {
			sc := sarama.NewConfig()
			sc.Version = sarama.V2_8_0_0 // as goka uses it
			sc.Producer.Return.Successes = true
			sc.Producer.RequiredAcks = sarama.WaitForAll
			if err := sec.Sarama(sc); err != nil {
				t.Fatal(err)
			}
			if err := sc.Validate(); err != nil {
				t.Fatalf("sarama refuses the config kafkasec made: %v", err)
			}
			client, err := sarama.NewClient(k.Brokers, sc)
			if err != nil {
				t.Fatalf("sarama client over SASL_SSL: %v", err)
			}
			defer client.Close()
			topic := fmt.Sprintf("kafkasec-sarama-%s-%d", strings.ToLower(mech), time.Now().UnixNano())
			admin, err := sarama.NewClusterAdminFromClient(client)
			if err != nil {
				t.Fatal(err)
			}
			if err := admin.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: 1, ReplicationFactor: 1}, false); err != nil {
				t.Fatalf("sarama create %s over SASL_SSL: %v", topic, err)
			}
			prod, err := sarama.NewSyncProducerFromClient(client)
			if err != nil {
				t.Fatal(err)
			}
			defer prod.Close()
			want := "sarama " + mech + " " + topic
			var part int32
			var off int64
			deadline := time.Now().Add(30 * time.Second)
			for {
				// The new topic's leader may take a moment to be known.
				part, off, err = prod.SendMessage(&sarama.ProducerMessage{Topic: topic, Value: sarama.StringEncoder(want)})
				if err == nil || time.Now().After(deadline) || !errors.Is(err, sarama.ErrUnknownTopicOrPartition) {
					break
				}
				time.Sleep(200 * time.Millisecond)
			}
			if err != nil {
				t.Fatalf("sarama produce over SASL_SSL: %v", err)
			}
			cons, err := sarama.NewConsumerFromClient(client)
			if err != nil {
				t.Fatal(err)
			}
			defer cons.Close()
			pc, err := cons.ConsumePartition(topic, part, off)
			if err != nil {
				t.Fatalf("sarama consume over SASL_SSL: %v", err)
			}
			defer pc.Close()
			select {
			case m := <-pc.Messages():
				if string(m.Value) != want {
					t.Fatalf("read %q, produced %q", m.Value, want)
				}
			case err := <-pc.Errors():
				t.Fatalf("sarama consume over SASL_SSL: %v", err)
			case <-time.After(30 * time.Second):
				t.Fatalf("sarama read nothing back from %s in 30 s", topic)
			}
		})
	}
}

// checkFails runs Check and returns its error, failing the test if it succeeds or takes longer
// than failFast, or if the error shows the password.
func checkFails(t *testing.T, cfg kafkasec.Config, brokers []string) string {
	t.Helper()
	start := time.Now()
	err := cfg.Check(context.Background(), brokers)
	took := time.Since(start)
	if err == nil {
		t.Fatalf("Check passed; it should have failed")
	}
	if took > failFast {
		t.Fatalf("Check took %v to fail (limit %v): %v", took, failFast, err)
	}
	msg := err.Error()
	if pw := string(cfg.SASL.Password); pw != "" && strings.Contains(msg, pw) {
		t.Fatalf("the error shows the password: %s", msg)
	}
	t.Logf("failed in %v: %s", took.Round(time.Millisecond), msg)
	return msg
}

func wantAll(t *testing.T, msg string, parts ...string) {
	t.Helper()
	for _, p := range parts {
		if !strings.Contains(msg, p) {
			t.Errorf("error does not say %q:\n%s", p, msg)
		}
	}
}

// TestCheckGoodSettings: the settings that work pass Check, for every mechanism.
func TestCheckGoodSettings(t *testing.T) {
	k := testenv.KafkaSASLListener(t)
	for _, mech := range mechanisms {
		if err := secure(k, mech).Check(context.Background(), k.Brokers); err != nil {
			t.Errorf("%s: %v", mech, err)
		}
	}
}

// TestCheckWrongPassword: a wrong password (and a user of another mechanism) fails fast with an
// error naming the user name and password settings and the mechanism, and never the password.
func TestCheckWrongPassword(t *testing.T) {
	k := testenv.KafkaSASLListener(t)
	for _, mech := range mechanisms {
		t.Run(mech, func(t *testing.T) {
			cfg := secure(k, mech)
			cfg.SASL.Password = kafkasec.Secret(k.Users[mech].Password + "-wrong")
			msg := checkFails(t, cfg, k.Brokers)
			wantAll(t, msg, "kafka.sasl.username", "kafka.sasl.password", mech, k.Users[mech].Name)
		})
	}
	t.Run("SCRAM-SHA-256 user with SCRAM-SHA-512", func(t *testing.T) {
		cfg := secure(k, kafkasec.MechanismSCRAMSHA256)
		cfg.SASL.Mechanism = kafkasec.MechanismSCRAMSHA512
		wantAll(t, checkFails(t, cfg, k.Brokers), "kafka.sasl.username", "kafka.sasl.password", "SCRAM-SHA-512")
	})
	t.Run("sarama", func(t *testing.T) {
		// The same refusal through sarama, as goka would meet it: an error, quickly.
		cfg := secure(k, kafkasec.MechanismSCRAMSHA512)
		cfg.SASL.Password = "not-the-password"
		sc := sarama.NewConfig()
		sc.Version = sarama.V2_8_0_0
		sc.Metadata.Retry.Max = 0
		if err := cfg.Sarama(sc); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		client, err := sarama.NewClient(k.Brokers, sc)
		if err == nil {
			client.Close()
			t.Fatal("sarama connected with a wrong password")
		}
		if took := time.Since(start); took > failFast {
			t.Fatalf("sarama took %v to fail: %v", took, err)
		}
		if !errors.Is(err, sarama.ErrSASLAuthenticationFailed) && !strings.Contains(err.Error(), "SASL") {
			t.Errorf("sarama's error is not an authentication failure: %v", err)
		}
	})
}

// TestCheckUntrustedCA: a CA that did not sign the broker's certificate fails fast, naming the CA
// setting.
func TestCheckUntrustedCA(t *testing.T) {
	k := testenv.KafkaSASLListener(t)
	cfg := secure(k, kafkasec.MechanismSCRAMSHA256)
	cfg.TLS.CAFile = k.UntrustedCAFile
	wantAll(t, checkFails(t, cfg, k.Brokers), "kafka.tls.ca_file", "not signed by")

	// Without a CA file the system roots are used, which do not know the test CA either.
	cfg.TLS.CAFile = ""
	wantAll(t, checkFails(t, cfg, k.Brokers), "kafka.tls.ca_file", "system")
}

// TestCheckServerName: a server name the certificate does not carry names kafka.tls.server_name.
func TestCheckServerName(t *testing.T) {
	k := testenv.KafkaSASLListener(t)
	cfg := secure(k, kafkasec.MechanismPlain)
	cfg.TLS.ServerName = "kafka.invalid"
	wantAll(t, checkFails(t, cfg, k.Brokers), "kafka.tls.server_name", "kafka.invalid")
}

// TestCheckWrongPorts: TLS spoken to the plaintext port, plaintext spoken to the TLS port, and a
// missing SASL block each give a hint that names the setting.
func TestCheckWrongPorts(t *testing.T) {
	k := testenv.KafkaSASLListener(t)
	plaintext := testenv.Kafka(t)
	t.Run("TLS to the plaintext port", func(t *testing.T) {
		wantAll(t, checkFails(t, secure(k, kafkasec.MechanismPlain), plaintext), "kafka.tls.enabled", "does not speak TLS")
	})
	t.Run("plaintext to the TLS port", func(t *testing.T) {
		cfg := secure(k, kafkasec.MechanismPlain)
		cfg.TLS = kafkasec.TLS{}
		wantAll(t, checkFails(t, cfg, k.Brokers), "kafka.tls.enabled", "speaks TLS")
	})
	t.Run("no SASL on the SASL port", func(t *testing.T) {
		cfg := secure(k, kafkasec.MechanismPlain)
		cfg.SASL = kafkasec.SASL{}
		wantAll(t, checkFails(t, cfg, k.Brokers), "kafka.sasl.mechanism", "needs SASL")
	})
}
