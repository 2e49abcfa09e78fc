package hbase

import (
	"bufio"
	"bytes"
	"crypto/hmac"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"

	"github.com/jcmturner/gokrb5/v8/crypto"
	"github.com/jcmturner/gokrb5/v8/iana/keyusage"
)

// Wrap token flags (RFC 4121 4.2.2).
const (
	wrapSentByAcceptor = 0x01
	wrapSealed         = 0x02
	wrapAcceptorSubkey = 0x04
	wrapHeaderLen      = 16
)

// wrap makes a wrap token of the client (initiator) for payload: signed, and encrypted when seal.
func (g *gssContext) wrap(payload []byte, seal bool) ([]byte, error) {
	et, err := crypto.GetEtype(g.key.KeyType)
	if err != nil {
		return nil, err
	}
	hdr := make([]byte, wrapHeaderLen)
	hdr[0], hdr[1], hdr[3] = 0x05, 0x04, 0xFF
	if g.acceptorSubkey {
		hdr[2] |= wrapAcceptorSubkey
	}
	binary.BigEndian.PutUint64(hdr[8:], g.sendSeq)
	g.sendSeq++
	if seal {
		hdr[2] |= wrapSealed
		// EC = 0 filler bytes (the AES and CTS based types need none); RRC = 0 (no rotation).
		plain := make([]byte, 0, len(payload)+wrapHeaderLen)
		plain = append(append(plain, payload...), hdr...)
		_, ct, err := et.EncryptMessage(g.key.KeyValue, plain, keyusage.GSSAPI_INITIATOR_SEAL)
		if err != nil {
			return nil, fmt.Errorf("encrypt wrap token: %w", err)
		}
		return append(hdr, ct...), nil
	}
	// Signed only: the checksum covers payload | header with EC and RRC zero; then EC = its length.
	sum, err := et.GetChecksumHash(g.key.KeyValue, append(append(make([]byte, 0, len(payload)+wrapHeaderLen), payload...), hdr...), keyusage.GSSAPI_INITIATOR_SEAL)
	if err != nil {
		return nil, fmt.Errorf("sign wrap token: %w", err)
	}
	binary.BigEndian.PutUint16(hdr[4:], uint16(len(sum)))
	out := make([]byte, 0, wrapHeaderLen+len(payload)+len(sum))
	return append(append(append(out, hdr...), payload...), sum...), nil
}

// unwrap checks a wrap token of the server (acceptor) and returns its payload.
func (g *gssContext) unwrap(tok []byte) ([]byte, error) {
	if len(tok) < wrapHeaderLen || tok[0] != 0x05 || tok[1] != 0x04 || tok[3] != 0xFF {
		return nil, fmt.Errorf("not a wrap token (%d bytes)", len(tok))
	}
	fl := tok[2]
	if fl&wrapSentByAcceptor == 0 {
		return nil, errors.New("wrap token not sent by the server (reflected?)")
	}
	key := g.key
	if fl&wrapAcceptorSubkey != 0 != g.acceptorSubkey {
		return nil, fmt.Errorf("wrap token flags %#x do not match the context's key", fl)
	}
	et, err := crypto.GetEtype(key.KeyType)
	if err != nil {
		return nil, err
	}
	ec := int(binary.BigEndian.Uint16(tok[4:]))
	rrc := int(binary.BigEndian.Uint16(tok[6:]))
	hdr := tok[:wrapHeaderLen]
	body := tok[wrapHeaderLen:]
	if rrc != 0 && len(body) > 0 {
		// The sender rotated the body right by RRC bytes: rotate it back.
		r := rrc % len(body)
		body = append(append(make([]byte, 0, len(body)), body[r:]...), body[:r]...)
	}
	if fl&wrapSealed != 0 {
		if len(body) < et.GetConfounderByteSize()+et.GetHMACBitLength()/8 {
			return nil, errors.New("sealed wrap token too short")
		}
		plain, err := et.DecryptMessage(key.KeyValue, body, keyusage.GSSAPI_ACCEPTOR_SEAL)
		if err != nil {
			return nil, fmt.Errorf("decrypt wrap token: %w", err)
		}
		if len(plain) < ec+wrapHeaderLen {
			return nil, errors.New("sealed wrap token too short")
		}
		inner := plain[len(plain)-wrapHeaderLen:]
		want := append([]byte{}, hdr...)
		want[6], want[7] = 0, 0 // the encrypted copy has RRC zero
		if !bytes.Equal(inner, want) {
			return nil, errors.New("sealed wrap token: header does not match its encrypted copy")
		}
		return plain[:len(plain)-wrapHeaderLen-ec], nil
	}
	if ec > len(body) {
		return nil, fmt.Errorf("wrap token checksum of %d bytes in %d", ec, len(body))
	}
	payload, sum := body[:len(body)-ec], body[len(body)-ec:]
	zh := append([]byte{}, hdr...)
	zh[4], zh[5], zh[6], zh[7] = 0, 0, 0, 0
	want, err := et.GetChecksumHash(key.KeyValue, append(append(make([]byte, 0, len(payload)+wrapHeaderLen), payload...), zh...), keyusage.GSSAPI_ACCEPTOR_SEAL)
	if err != nil {
		return nil, fmt.Errorf("verify wrap token: %w", err)
	}
	if !hmac.Equal(want, sum) {
		return nil, errors.New("wrap token checksum does not verify: the message was altered")
	}
	return payload, nil
}

// saslConn is a connection after a SASL handshake. It recognises an error the server sends instead
// of the first response (the handshake's last step failed on its side), and, when the negotiated
// protection is integrity or privacy, wraps every write as one token (int32 length + wrap token)
// and unwraps what it reads. Read and Write may run at once (the connection's reader and writer
// goroutines); each direction has its own state.
type saslConn struct {
	net.Conn
	g    *gssContext
	wrap bool
	seal bool

	r       io.Reader // the raw stream (buffered)
	first   bool      // no byte read yet
	pending []byte    // unwrapped bytes not yet returned

	wmu sync.Mutex
}

func newSASLConn(nc net.Conn, g *gssContext) *saslConn {
	c := &saslConn{
		Conn:  nc,
		g:     g,
		wrap:  g.qop != qopAuth,
		seal:  g.qop == qopPrivacy,
		r:     nc,
		first: true,
	}
	if c.wrap {
		// Token headers are read 4 bytes at a time: buffer them. (Unwrapped traffic is buffered by
		// the connection's reader.)
		c.r = bufio.NewReaderSize(nc, 64<<10)
	}
	return c
}

// Read returns plain bytes of the response stream.
func (c *saslConn) Read(p []byte) (int, error) {
	if c.first {
		c.first = false
		// A response frame (or a wrap token) is never 1 byte long: 1 here is the status of a
		// SASL error reply to the handshake's last token.
		var hdr [4]byte
		if _, err := io.ReadFull(c.r, hdr[:]); err != nil {
			return 0, err
		}
		if int32(binary.BigEndian.Uint32(hdr[:])) == saslStatusError {
			return 0, fmt.Errorf("authentication failed: %w", readSASLError(c.r, saslStatusError))
		}
		c.r = io.MultiReader(bytes.NewReader(hdr[:]), c.r)
	}
	if !c.wrap {
		return c.r.Read(p)
	}
	for len(c.pending) == 0 {
		var hdr [4]byte
		if _, err := io.ReadFull(c.r, hdr[:]); err != nil {
			return 0, err
		}
		n := binary.BigEndian.Uint32(hdr[:])
		if n > maxResponse {
			return 0, fmt.Errorf("wrap token of %d bytes", n)
		}
		tok := make([]byte, n)
		if _, err := io.ReadFull(c.r, tok); err != nil {
			return 0, err
		}
		plain, err := c.g.unwrapServer(tok)
		if err != nil {
			return 0, err
		}
		c.pending = plain
	}
	n := copy(p, c.pending)
	c.pending = c.pending[n:]
	return n, nil
}

// Write sends p, as one wrap token when the protection asks for it.
func (c *saslConn) Write(p []byte) (int, error) {
	if !c.wrap {
		return c.Conn.Write(p)
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	tok, err := c.g.wrap(p, c.seal)
	if err != nil {
		return 0, err
	}
	b := binary.BigEndian.AppendUint32(make([]byte, 0, 4+len(tok)), uint32(len(tok)))
	if _, err := c.Conn.Write(append(b, tok...)); err != nil {
		return 0, err
	}
	return len(p), nil
}

// unwrapServer unwraps a token of the traffic; the server must keep the protection it agreed to.
func (g *gssContext) unwrapServer(tok []byte) ([]byte, error) {
	if g.qop == qopPrivacy && (len(tok) < 3 || tok[2]&wrapSealed == 0) {
		return nil, errors.New("the server sent an unencrypted message on a connection that negotiated privacy")
	}
	return g.unwrap(tok)
}
