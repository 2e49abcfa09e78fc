package httpsec

import (
	"crypto/tls"
	"fmt"
	"sync"
)

// CertReloader serves the TLS certificate and key of two PEM files, read again when they change
// (Watch) or on Reload (SIGHUP), so that a renewed certificate is served without a restart. A
// renewed pair that does not load (a half-written file, a key that does not match) leaves the
// pair in use in place.
type CertReloader struct {
	certFile, keyFile string
	prefix            string
	mu                sync.RWMutex
	cert              *tls.Certificate
	watched           fileStamp
}

// NewCertReloader loads the pair; errors name the field (prefix.cert_file; prefix defaults to
// query.tls).
func NewCertReloader(certFile, keyFile, prefix string) (*CertReloader, error) {
	if prefix == "" {
		prefix = "query.tls"
	}
	c := &CertReloader{certFile: certFile, keyFile: keyFile, prefix: prefix}
	switch {
	case certFile == "":
		return nil, fmt.Errorf("%s.cert_file: required with %s.key_file", prefix, prefix)
	case keyFile == "":
		return nil, fmt.Errorf("%s.key_file: required with %s.cert_file", prefix, prefix)
	}
	if err := c.Reload(); err != nil {
		return nil, err
	}
	return c, nil
}

// Files are the certificate and key files.
func (c *CertReloader) Files() []string { return []string{c.certFile, c.keyFile} }

// Reload reads the pair again; on error the pair in use stays.
func (c *CertReloader) Reload() error {
	stamp := stampFiles(c.Files())
	certPEM, err := readSmallFile(c.certFile)
	if err != nil {
		return fmt.Errorf("%s.cert_file: %w", c.prefix, err)
	}
	keyPEM, err := readSmallFile(c.keyFile)
	if err != nil {
		return fmt.Errorf("%s.key_file: %w", c.prefix, err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return fmt.Errorf("%s.cert_file, %s.key_file: %s and %s: %w", c.prefix, c.prefix, c.certFile, c.keyFile, err)
	}
	c.mu.Lock()
	c.cert, c.watched = &pair, stamp
	c.mu.Unlock()
	return nil
}

// GetCertificate serves the pair in use (tls.Config.GetCertificate).
func (c *CertReloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.cert, nil
}

// TLSConfig is the server's TLS configuration: TLS 1.2 or later, the pair in use, HTTP/1.1.
func (c *CertReloader) TLSConfig() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: c.GetCertificate, NextProtos: []string{"http/1.1"}}
}
