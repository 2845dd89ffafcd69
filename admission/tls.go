package admission

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"sync"
	"time"
)

// Lifetimes of the self-signed bootstrap's certificates. The serving certificate is
// renewed (by whichever replica notices first) a month before it expires; the CA
// outlives many renewals so that the caBundle rarely changes.
const (
	caLifetime      = 10 * 365 * 24 * time.Hour
	servingLifetime = 365 * 24 * time.Hour
	renewBefore     = 30 * 24 * time.Hour
)

// KeyPair is a PEM certificate chain and key, with the CA that signed it: the contents
// of a kubernetes.io/tls Secret (tls.crt, tls.key, ca.crt).
type KeyPair struct {
	CertPEM, KeyPEM, CAPEM []byte
}

// IssueSelfSigned makes a new CA and a serving certificate it signs for hosts (DNS
// names or IP addresses).
func IssueSelfSigned(hosts []string, now time.Time) (*KeyPair, error) {
	if len(hosts) == 0 {
		return nil, errors.New("a serving certificate needs at least one host name")
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: "tessera-admission CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(caLifetime), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("sign the CA: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: hosts[0]},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(servingLifetime),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("sign the serving certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	return &KeyPair{
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
		CAPEM:   pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
	}, nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return big.NewInt(time.Now().UnixNano())
	}
	return n
}

// Usable reports why a key pair cannot serve hosts at now for at least renewBefore:
// nil when it can. It checks the key matches, the CA signed the certificate, every host
// is covered and the certificate is not about to expire.
func (kp *KeyPair) Usable(hosts []string, now time.Time) error {
	pair, err := tls.X509KeyPair(kp.CertPEM, kp.KeyPEM)
	if err != nil {
		return fmt.Errorf("tls.crt/tls.key: %w", err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return fmt.Errorf("tls.crt: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(kp.CAPEM) {
		return errors.New("ca.crt holds no PEM certificate")
	}
	for _, h := range hosts {
		if _, err := leaf.Verify(x509.VerifyOptions{DNSName: h, Roots: roots, CurrentTime: now,
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			return fmt.Errorf("tls.crt for %s: %w", h, err)
		}
	}
	if left := leaf.NotAfter.Sub(now); left < renewBefore {
		return fmt.Errorf("tls.crt expires at %s, in less than %s", leaf.NotAfter.Format(time.RFC3339), renewBefore)
	}
	return nil
}

// Certificate is the serving certificate the TLS listener presents; it can change
// while the server runs (a renewed Secret, a file cert-manager rotated).
type Certificate struct {
	mu   sync.RWMutex
	cert *tls.Certificate
	// Files the certificate reloads from when their modification time changes; empty
	// for a certificate set by the bootstrap.
	certFile, keyFile string
	modTime           time.Time
	checked           time.Time
}

// NewFileCertificate serves the key pair in the files, re-reading them (at most every
// ten seconds, at a handshake) when cert-manager or the kubelet replaces them.
func NewFileCertificate(certFile, keyFile string) (*Certificate, error) {
	c := &Certificate{certFile: certFile, keyFile: keyFile}
	if err := c.reload(time.Now()); err != nil {
		return nil, err
	}
	return c, nil
}

// Set replaces the served key pair.
func (c *Certificate) Set(kp *KeyPair) error {
	pair, err := tls.X509KeyPair(kp.CertPEM, kp.KeyPEM)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.cert = &pair
	c.mu.Unlock()
	return nil
}

// GetCertificate is tls.Config's hook.
func (c *Certificate) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	if c.certFile != "" {
		now := time.Now()
		c.mu.RLock()
		due := now.Sub(c.checked) > 10*time.Second
		c.mu.RUnlock()
		if due {
			if err := c.reload(now); err != nil {
				// Keep serving the last good pair: a half-written rotation fixes itself.
				return c.current(), nil
			}
		}
	}
	return c.current(), nil
}

func (c *Certificate) current() *tls.Certificate {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.cert
}

func (c *Certificate) reload(now time.Time) error {
	st, err := os.Stat(c.certFile)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.checked = now
	same := c.cert != nil && st.ModTime().Equal(c.modTime)
	c.mu.Unlock()
	if same {
		return nil
	}
	pair, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
	if err != nil {
		return fmt.Errorf("serving certificate %s, %s: %w", c.certFile, c.keyFile, err)
	}
	c.mu.Lock()
	c.cert, c.modTime = &pair, st.ModTime()
	c.mu.Unlock()
	return nil
}
