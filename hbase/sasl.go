package hbase

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/jcmturner/gokrb5/v8/asn1tools"
	"github.com/jcmturner/gokrb5/v8/crypto"
	"github.com/jcmturner/gokrb5/v8/gssapi"
	"github.com/jcmturner/gokrb5/v8/iana/chksumtype"
	"github.com/jcmturner/gokrb5/v8/iana/flags"
	"github.com/jcmturner/gokrb5/v8/iana/keyusage"
	"github.com/jcmturner/gokrb5/v8/messages"
	"github.com/jcmturner/gokrb5/v8/types"
)

// This file holds the SASL GSSAPI handshake of an HBase connection (RFC 4752 over the framing of
// HBase's SASL RPC) and the GSS-API wrap tokens (RFC 4121) that carry the traffic afterwards when
// the server asks for integrity or privacy. The Kerberos messages themselves (tickets, AP-REQ,
// AP-REP, checksums, encryption) come from gokrb5.
//
// Exchange, each client token as int32 length + bytes, each server reply as int32 status (0 =
// success) + int32 length + bytes, or status 1 + two length-prefixed strings (exception class, message):
//
//	client: AP-REQ (GSS initial context token, mutual authentication requested)
//	server: AP-REP                              -> the client checks it: the server is who it claims
//	client: empty token
//	server: wrap(offered protections, max buffer size)
//	client: wrap(chosen protection, max buffer size) -> authenticated; no further reply on success
//
// Then the connection header and the calls follow as on a plain connection, each write wrapped as
// int32 length + wrap token when integrity or privacy was chosen.

// Connection preamble authentication codes (HBase's AuthMethod).
const (
	authCodeSimple   = 0x50
	authCodeKerberos = 0x51
)

// SASL reply statuses and the length that asks a client to fall back to simple authentication.
const (
	saslStatusSuccess       = 0
	saslStatusError         = 1
	saslSwitchToSimple      = -88
	maxSASLToken            = 1 << 20
	qopAuth            byte = 1
	qopIntegrity       byte = 2
	qopPrivacy         byte = 4
	// wrapRecvMax is the largest wrap token the client says it accepts; HBase does not split
	// responses to fit it, so it only has to be honest, not small.
	wrapRecvMax = 0xFFFFFF
)

// krb5OID is the DER encoding of the Kerberos V5 GSS-API mechanism, 1.2.840.113554.1.2.2.
var krb5OID = []byte{0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x12, 0x01, 0x02, 0x02}

// qopName names a protection bit as hbase.rpc.protection does.
func qopName(q byte) string {
	switch q {
	case qopAuth:
		return ProtectionAuthentication
	case qopIntegrity:
		return ProtectionIntegrity
	case qopPrivacy:
		return ProtectionPrivacy
	}
	return fmt.Sprintf("unknown(%d)", q)
}

func qopNames(mask byte) string {
	var s []string
	for _, q := range []byte{qopAuth, qopIntegrity, qopPrivacy} {
		if mask&q != 0 {
			s = append(s, qopName(q))
		}
	}
	if mask&^(qopAuth|qopIntegrity|qopPrivacy) != 0 {
		s = append(s, fmt.Sprintf("unknown bits %#x", mask&^(qopAuth|qopIntegrity|qopPrivacy)))
	}
	return strings.Join(s, ",")
}

// chooseQOP picks the weakest protection the server offers that is at least min ("" = any).
func chooseQOP(offered byte, min string) (byte, error) {
	floor := qopAuth
	switch min {
	case ProtectionIntegrity:
		floor = qopIntegrity
	case ProtectionPrivacy:
		floor = qopPrivacy
	}
	for _, q := range []byte{qopAuth, qopIntegrity, qopPrivacy} {
		if q >= floor && offered&q != 0 {
			return q, nil
		}
	}
	return 0, fmt.Errorf("the server offers protection %s, but Config.Kerberos.Protection asks for at least %s", qopNames(offered), min)
}

// gssContext is the security context a handshake established: the key and sequence numbers of
// the wrap tokens that follow.
type gssContext struct {
	key            types.EncryptionKey
	acceptorSubkey bool   // key is the acceptor's subkey: tokens carry flag 0x04
	sendSeq        uint64 // next sequence number of the client's tokens
	qop            byte
}

// saslHandshake authenticates conn (the preamble already sent) to the server named by spn, with
// a service ticket and its session key. It returns the context, whose qop says whether traffic
// must be wrapped. The exchange ends by ctx's deadline, or after timeout when ctx has none, so that
// a server that never answers cannot hang the dial.
//
// The exchange is GSSAPI over SASL (RFC 4752), in SASL tokens: our AP-REQ, the server's AP-REP,
// then the security layers the server offers and the one we take.
func saslHandshake(ctx context.Context, nc net.Conn, auth *kerberosAuth, tkt messages.Ticket, key types.EncryptionKey, spn string, timeout time.Duration) (*gssContext, error) {
	dl, ok := ctx.Deadline()
	if !ok {
		dl = time.Now().Add(timeout)
	}
	_ = nc.SetDeadline(dl)
	defer nc.SetDeadline(time.Time{})
	authn, err := sendAPReq(nc, auth, tkt, key)
	if err != nil {
		return nil, err
	}
	g, err := readAPRep(nc, key, authn, spn)
	if err != nil {
		return nil, err
	}
	if err := negotiateSecurityLayer(nc, g, auth.cfg.Protection); err != nil {
		return nil, err
	}
	return g, nil
}

// sendAPReq sends the AP-REQ, with an authenticator whose GSS checksum asks for mutual
// authentication, integrity and confidentiality (the last two only make them available; the
// server decides). It returns the authenticator, which the server's AP-REP must answer.
func sendAPReq(nc net.Conn, auth *kerberosAuth, tkt messages.Ticket, key types.EncryptionKey) (types.Authenticator, error) {
	authn, err := types.NewAuthenticator(auth.realm, auth.principal)
	if err != nil {
		return authn, fmt.Errorf("authenticator: %w", err)
	}
	authn.Cksum = types.Checksum{CksumType: chksumtype.GSSAPI, Checksum: gssChecksum(gssapi.ContextFlagMutual | gssapi.ContextFlagInteg | gssapi.ContextFlagConf)}
	apReq, err := messages.NewAPReq(tkt, key, authn)
	if err != nil {
		return authn, fmt.Errorf("AP-REQ: %w", err)
	}
	types.SetFlag(&apReq.APOptions, flags.APOptionMutualRequired)
	apBytes, err := apReq.Marshal()
	if err != nil {
		return authn, fmt.Errorf("AP-REQ: %w", err)
	}
	tok := append(binary.BigEndian.AppendUint16(append([]byte{}, krb5OID...), gssTokAPReq), apBytes...)
	return authn, writeSASLToken(nc, asn1tools.AddASNAppTag(tok, 0))
}

// readAPRep reads the server's AP-REP, in which it proves it holds the service key by returning
// our authenticator's time, and starts the security context on the key it names.
func readAPRep(nc net.Conn, key types.EncryptionKey, authn types.Authenticator, spn string) (*gssContext, error) {
	reply, err := readSASLReply(nc)
	if err != nil {
		return nil, err
	}
	tokID, msg, err := parseGSSToken(reply)
	if err != nil {
		return nil, fmt.Errorf("server's GSS reply: %w", err)
	}
	var apRep messages.APRep
	switch tokID {
	case gssTokKRBError:
		var ke messages.KRBError
		if err := ke.Unmarshal(msg); err != nil {
			return nil, fmt.Errorf("server's KRB-ERROR: %w", err)
		}
		return nil, fmt.Errorf("server refused the ticket for %s: %w", spn, ke)
	case gssTokAPRep:
		if err := apRep.Unmarshal(msg); err != nil {
			return nil, fmt.Errorf("server's AP-REP: %w", err)
		}
	default:
		return nil, fmt.Errorf("server's GSS reply has token id %#04x, neither AP-REP nor KRB-ERROR", tokID)
	}
	plain, err := crypto.DecryptEncPart(apRep.EncPart, key, keyusage.AP_REP_ENCPART)
	if err != nil {
		return nil, fmt.Errorf("AP-REP from %s does not decrypt with the session key (not the server the ticket is for): %w", spn, err)
	}
	var part messages.EncAPRepPart
	if err := part.Unmarshal(plain); err != nil {
		return nil, fmt.Errorf("AP-REP: %w", err)
	}
	if !part.CTime.Equal(authn.CTime.Truncate(time.Second)) || part.Cusec != authn.Cusec {
		return nil, fmt.Errorf("AP-REP from %s answers another authenticator (time %v.%06d, sent %v.%06d)", spn, part.CTime, part.Cusec, authn.CTime, authn.Cusec)
	}
	g := &gssContext{key: key, sendSeq: uint64(authn.SeqNumber)}
	if len(part.Subkey.KeyValue) > 0 {
		g.key, g.acceptorSubkey = part.Subkey, true
	}
	return g, nil
}

// negotiateSecurityLayer sends an empty token, unwraps the server's offer of protections, and
// answers with the least of them that protection (Config.Kerberos.Protection) allows, in g.qop.
func negotiateSecurityLayer(nc net.Conn, g *gssContext, protection string) error {
	if err := writeSASLToken(nc, nil); err != nil {
		return err
	}
	reply, err := readSASLReply(nc)
	if err != nil {
		return err
	}
	offer, err := g.unwrap(reply)
	if err != nil {
		return fmt.Errorf("security layer offer: %w", err)
	}
	if len(offer) != 4 {
		return fmt.Errorf("security layer offer of %d bytes, want 4", len(offer))
	}
	g.qop, err = chooseQOP(offer[0], protection)
	if err != nil {
		return err
	}
	answer := []byte{g.qop, 0, 0, 0}
	if g.qop != qopAuth {
		answer[1], answer[2], answer[3] = wrapRecvMax>>16&0xFF, wrapRecvMax>>8&0xFF, wrapRecvMax&0xFF
	}
	// No authorization id: the server then takes the authenticated principal.
	wrapped, err := g.wrap(answer, false)
	if err != nil {
		return fmt.Errorf("security layer answer: %w", err)
	}
	return writeSASLToken(nc, wrapped)
}

// GSS-API Kerberos token ids (RFC 4121 4.1).
const (
	gssTokAPReq    = 0x0100
	gssTokAPRep    = 0x0200
	gssTokKRBError = 0x0300
)

// parseGSSToken splits a GSS-API initial-context-style token (RFC 2743 3.1): tag 0x60, DER length,
// the Kerberos mechanism OID, a 2-byte token id, then the Kerberos message.
func parseGSSToken(b []byte) (tokID uint16, msg []byte, err error) {
	if len(b) < 2 || b[0] != 0x60 {
		return 0, nil, errors.New("not a GSS token")
	}
	n, rest := int(b[1]), b[2:]
	if n >= 0x80 {
		k := n & 0x7f
		if k == 0 || k > 3 || len(rest) < k {
			return 0, nil, errors.New("bad GSS token length")
		}
		n = 0
		for _, c := range rest[:k] {
			n = n<<8 | int(c)
		}
		rest = rest[k:]
	}
	if n != len(rest) {
		return 0, nil, fmt.Errorf("GSS token says %d bytes, has %d", n, len(rest))
	}
	if !bytes.HasPrefix(rest, krb5OID) || len(rest) < len(krb5OID)+2 {
		return 0, nil, errors.New("GSS token of another mechanism than Kerberos V5")
	}
	rest = rest[len(krb5OID):]
	return binary.BigEndian.Uint16(rest), rest[2:], nil
}

// gssChecksum is the authenticator checksum of a GSS initial token (RFC 4121 4.1.1): 16-byte
// zero channel bindings, then the context flags, little-endian.
func gssChecksum(fl int) []byte {
	b := make([]byte, 24)
	binary.LittleEndian.PutUint32(b[0:4], 16)
	binary.LittleEndian.PutUint32(b[20:24], uint32(fl))
	return b
}

func writeSASLToken(w io.Writer, tok []byte) error {
	b := binary.BigEndian.AppendUint32(make([]byte, 0, 4+len(tok)), uint32(len(tok)))
	if _, err := w.Write(append(b, tok...)); err != nil {
		return fmt.Errorf("write SASL token: %w", err)
	}
	return nil
}

// errSwitchToSimple is returned when a server without Kerberos asks the client to fall back.
var errSwitchToSimple = errors.New("the server does not use Kerberos and asked to fall back to simple authentication (set Config.Auth to simple)")

// saslError is an error the server sent during the handshake, with its Java exception class.
type saslError struct{ class, msg string }

func (e *saslError) Error() string { return e.class + ": " + e.msg }

// readSASLReply reads one server reply: its token, or the server's error.
func readSASLReply(r io.Reader) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, fmt.Errorf("read SASL reply: %w", err)
	}
	status := int32(binary.BigEndian.Uint32(hdr[:]))
	if status != saslStatusSuccess {
		return nil, readSASLError(r, status)
	}
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, fmt.Errorf("read SASL reply: %w", err)
	}
	n := int32(binary.BigEndian.Uint32(hdr[:]))
	if n == saslSwitchToSimple {
		return nil, errSwitchToSimple
	}
	if n < 0 || n > maxSASLToken {
		return nil, fmt.Errorf("SASL reply of %d bytes", n)
	}
	tok := make([]byte, n)
	if _, err := io.ReadFull(r, tok); err != nil {
		return nil, fmt.Errorf("read SASL reply: %w", err)
	}
	return tok, nil
}

// readSASLError reads the two strings (Hadoop WritableUtils: int32 length, UTF-8) that follow an
// error status.
func readSASLError(r io.Reader, status int32) error {
	var s [2]string
	for i := range s {
		var hdr [4]byte
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return fmt.Errorf("SASL status %d, then: %w", status, err)
		}
		n := int32(binary.BigEndian.Uint32(hdr[:]))
		if n < 0 {
			continue
		}
		if n > maxSASLToken {
			return fmt.Errorf("SASL status %d with a message of %d bytes", status, n)
		}
		b := make([]byte, n)
		if _, err := io.ReadFull(r, b); err != nil {
			return fmt.Errorf("SASL status %d, then: %w", status, err)
		}
		s[i] = string(b)
	}
	return &saslError{class: s[0], msg: s[1]}
}
