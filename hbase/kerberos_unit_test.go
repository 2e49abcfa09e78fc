package hbase

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/jcmturner/gokrb5/v8/crypto"
	"github.com/jcmturner/gokrb5/v8/iana/etypeID"
	"github.com/jcmturner/gokrb5/v8/iana/keyusage"
	"github.com/jcmturner/gokrb5/v8/types"
)

// TestKerberosConfigValidation: each mistake in Auth and Kerberos is refused before anything is
// dialled, with the field named.
func TestKerberosConfigValidation(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string // "" = valid
	}{
		{Config{}, ""},
		{Config{Auth: AuthSimple}, ""},
		{Config{Auth: AuthKerberos}, ""}, // ticket cache from the environment
		{Config{Auth: "Kerberos"}, "Auth: unknown authentication"},
		{Config{Kerberos: KerberosConfig{Keytab: "/k"}}, "Config.Kerberos settings are given but Config.Auth is"},
		{Config{Auth: AuthKerberos, Kerberos: KerberosConfig{Keytab: "/k"}}, "Config.Kerberos.Principal: required with Config.Kerberos.Keytab"},
		{Config{Auth: AuthKerberos, Kerberos: KerberosConfig{Keytab: "/k", Principal: "a@R", TicketCache: "/c"}}, "Config.Kerberos.Keytab and Config.Kerberos.TicketCache"},
		{Config{Auth: AuthKerberos, Kerberos: KerberosConfig{Principal: "a@R@S"}}, "Config.Kerberos.Principal"},
		{Config{Auth: AuthKerberos, Kerberos: KerberosConfig{ServerPrincipal: "@R"}}, "Config.Kerberos.ServerPrincipal"},
		{Config{Auth: AuthKerberos, Kerberos: KerberosConfig{ServerPrincipal: "a/b/c@R"}}, "Config.Kerberos.ServerPrincipal"},
		{Config{Auth: AuthKerberos, Kerberos: KerberosConfig{ServerPrincipal: "hbase/_HOST@R"}}, ""},
		{Config{Auth: AuthKerberos, Kerberos: KerberosConfig{Protection: "auth-conf"}}, "Config.Kerberos.Protection: unknown protection"},
		{Config{Auth: AuthKerberos, Kerberos: KerberosConfig{Protection: ProtectionPrivacy}}, ""},
	} {
		err := tc.cfg.validateAuth()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%+v: %v, want valid", tc.cfg, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%+v: %v, want an error saying %q", tc.cfg, err, tc.want)
		}
	}
}

// TestServerPrincipalPattern: _HOST becomes the server's host name in lower case; the realm
// defaults to the client's.
func TestServerPrincipalPattern(t *testing.T) {
	for _, tc := range []struct{ pattern, host, spn, realm string }{
		{"", "RS1.Example.COM", "hbase/rs1.example.com", "CLIENT.REALM"},
		{"hbase/_HOST@EXAMPLE.COM", "rs1.example.com", "hbase/rs1.example.com", "EXAMPLE.COM"},
		{"hbase/_HOST", "10.0.0.7", "hbase/10.0.0.7", "CLIENT.REALM"},
		{"hbase/fixed.example.com@X", "rs2", "hbase/fixed.example.com", "X"},
	} {
		a := &kerberosAuth{cfg: KerberosConfig{ServerPrincipal: tc.pattern}, realm: "CLIENT.REALM"}
		spn, realm := a.serverPrincipal(tc.host)
		if spn != tc.spn || realm != tc.realm {
			t.Errorf("%q on %q: %s@%s, want %s@%s", tc.pattern, tc.host, spn, realm, tc.spn, tc.realm)
		}
	}
}

// TestChooseQOP: the weakest protection offered that meets the floor, or an error naming both.
func TestChooseQOP(t *testing.T) {
	for _, tc := range []struct {
		offered byte
		min     string
		want    byte
		err     string
	}{
		{qopAuth | qopIntegrity | qopPrivacy, "", qopAuth, ""},
		{qopPrivacy, "", qopPrivacy, ""},
		{qopIntegrity | qopPrivacy, "", qopIntegrity, ""},
		{qopAuth | qopPrivacy, ProtectionIntegrity, qopPrivacy, ""},
		{qopAuth | qopIntegrity | qopPrivacy, ProtectionPrivacy, qopPrivacy, ""},
		{qopAuth, ProtectionIntegrity, 0, "the server offers protection authentication, but Config.Kerberos.Protection asks for at least integrity"},
		{0, "", 0, "the server offers protection"},
	} {
		got, err := chooseQOP(tc.offered, tc.min)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("offered %#x min %q: %v, want error %q", tc.offered, tc.min, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("offered %#x min %q: %s %v, want %s", tc.offered, tc.min, qopName(got), err, qopName(tc.want))
		}
	}
}

// TestExplainKerberosErrors: KDC and server failures are turned into errors that say what to fix.
func TestExplainKerberosErrors(t *testing.T) {
	a := &kerberosAuth{cfg: KerberosConfig{Keytab: "/etc/app.keytab", Krb5Conf: "/etc/krb5.conf"}, realm: "R"}
	a.principal.NameString = []string{"app"}
	for _, tc := range []struct{ in, want string }{
		{"KRB Error: (37) KRB_AP_ERR_SKEW Clock skew too great", "clocks of this host and the KDC differ"},
		{"KRBMessage_Handling_Error: AS Exchange Error: AS_REP is not valid < clock skew with KDC too large. Greater than 300 seconds", "clocks of this host and the KDC differ"},
		{"KRB Error: (24) KDC_ERR_PREAUTH_FAILED", "not the current keys of app@R"},
		{"KRB Error: (6) KDC_ERR_C_PRINCIPAL_UNKNOWN", "does not know the client principal app@R (Config.Kerberos.Principal)"},
		{"KRB Error: (7) KDC_ERR_S_PRINCIPAL_UNKNOWN", "Config.Kerberos.ServerPrincipal"},
		{"sending over TCP failed: dial tcp 127.0.0.1:88: connect: connection refused", "KDC of realm R cannot be reached (its address comes from Config.Kerberos.Krb5Conf /etc/krb5.conf)"},
	} {
		got := a.explain("log in", errors.New(tc.in)).Error()
		if !strings.Contains(got, tc.want) || !strings.Contains(got, tc.in) {
			t.Errorf("%q explained as %q, want it to say %q and keep the cause", tc.in, got, tc.want)
		}
	}
	skew := &saslError{class: "javax.security.sasl.SaslException", msg: "GSS initiate failed [Caused by GSSException: Failure unspecified at GSS-API level (Mechanism level: Clock skew too great (37))]"}
	if got := a.explainServer("hbase/rs1", skew).Error(); !strings.Contains(got, "clocks of this host and the server differ") {
		t.Errorf("server clock skew explained as %q", got)
	}
	key := &saslError{class: "javax.security.sasl.SaslException", msg: "GSS initiate failed [Caused by GSSException: Failure unspecified at GSS-API level (Mechanism level: Checksum failed)]"}
	if got := a.explainServer("hbase/rs1", key).Error(); !strings.Contains(got, "its keytab does not hold the KDC's current key") {
		t.Errorf("server key mismatch explained as %q", got)
	}
}

// TestParseGSSToken: the GSS framing of the server's AP-REP is split, and other mechanisms and
// bad lengths are refused.
func TestParseGSSToken(t *testing.T) {
	body := append(append(append([]byte{}, krb5OID...), 0x02, 0x00), bytes.Repeat([]byte{7}, 200)...)
	tok := append([]byte{0x60, 0x81, byte(len(body))}, body...)
	id, msg, err := parseGSSToken(tok)
	if err != nil || id != gssTokAPRep || len(msg) != 200 {
		t.Fatalf("parse: %#x %d %v", id, len(msg), err)
	}
	if _, _, err := parseGSSToken(tok[:len(tok)-1]); err == nil {
		t.Error("truncated token accepted")
	}
	other := append([]byte{}, tok...)
	other[5] ^= 1 // inside the OID
	if _, _, err := parseGSSToken(other); err == nil {
		t.Error("token of another mechanism accepted")
	}
}

// acceptorWrap makes a wrap token as the server does, so the client's unwrap can be tested
// alone (the real server is the authority: TestKerberosProtection).
func acceptorWrap(t *testing.T, key types.EncryptionKey, seq uint64, payload []byte, seal bool, rrc int) []byte {
	t.Helper()
	et, err := crypto.GetEtype(key.KeyType)
	if err != nil {
		t.Fatal(err)
	}
	hdr := []byte{0x05, 0x04, wrapSentByAcceptor, 0xFF, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	binary.BigEndian.PutUint64(hdr[8:], seq)
	var body []byte
	if seal {
		hdr[2] |= wrapSealed
		_, body, err = et.EncryptMessage(key.KeyValue, append(append([]byte{}, payload...), hdr...), keyusage.GSSAPI_ACCEPTOR_SEAL)
	} else {
		var sum []byte
		sum, err = et.GetChecksumHash(key.KeyValue, append(append([]byte{}, payload...), hdr...), keyusage.GSSAPI_ACCEPTOR_SEAL)
		binary.BigEndian.PutUint16(hdr[4:], uint16(len(sum)))
		body = append(append([]byte{}, payload...), sum...)
	}
	if err != nil {
		t.Fatal(err)
	}
	if rrc > 0 {
		binary.BigEndian.PutUint16(hdr[6:], uint16(rrc))
		r := len(body) - rrc%len(body)
		body = append(append([]byte{}, body[r:]...), body[:r]...)
	}
	return append(hdr, body...)
}

// TestWrapTokens: signed and sealed tokens of the server unwrap (also rotated), altered ones and
// the client's own are refused, and a privacy connection refuses unsealed traffic.
func TestWrapTokens(t *testing.T) {
	key := types.EncryptionKey{KeyType: etypeID.AES256_CTS_HMAC_SHA1_96, KeyValue: bytes.Repeat([]byte{0x42}, 32)}
	g := &gssContext{key: key, qop: qopIntegrity}
	payload := []byte("\x00\x00\x00\x05hello, region server")
	for _, seal := range []bool{false, true} {
		for _, rrc := range []int{0, 12, 28} {
			tok := acceptorWrap(t, key, 9, payload, seal, rrc)
			got, err := g.unwrap(tok)
			if err != nil || !bytes.Equal(got, payload) {
				t.Errorf("seal=%v rrc=%d: %q %v", seal, rrc, got, err)
			}
			bad := append([]byte{}, tok...)
			bad[len(bad)-3] ^= 0x80
			if _, err := g.unwrap(bad); err == nil {
				t.Errorf("seal=%v rrc=%d: altered token accepted", seal, rrc)
			}
		}
	}
	own, err := g.wrap(payload, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.unwrap(own); err == nil {
		t.Error("a token the client sent itself (reflected) was accepted")
	}
	priv := &gssContext{key: key, qop: qopPrivacy}
	if _, err := priv.unwrapServer(acceptorWrap(t, key, 1, payload, false, 0)); err == nil {
		t.Error("an unsealed token was accepted on a privacy connection")
	}
	if got, err := priv.unwrapServer(acceptorWrap(t, key, 1, payload, true, 0)); err != nil || !bytes.Equal(got, payload) {
		t.Errorf("sealed token on a privacy connection: %q %v", got, err)
	}
}
