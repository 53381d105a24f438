package k8s

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// pki writes the cluster's certificates into dir: a CA, the apiserver's
// serving cert, client certs for every component and the admin, the kubelet's
// serving cert and the service-account signing key pair.
type pki struct {
	dir    string
	caCert *x509.Certificate
	caKey  *ecdsa.PrivateKey
	serial int64
}

func newPKI(dir string) (*pki, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "hostlease-e2e-k8s-ca"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(48 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, _ := x509.ParseCertificate(der)
	p := &pki{dir: dir, caCert: cert, caKey: key, serial: 1}
	if err := writePEM(p.path("ca.crt"), "CERTIFICATE", der); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *pki) path(name string) string { return filepath.Join(p.dir, name) }

// issue writes <name>.crt and <name>.key signed by the CA.
func (p *pki) issue(name, cn string, orgs []string, server bool, dns []string, ips []net.IP) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	p.serial++
	usage := []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	if server {
		usage = append(usage, x509.ExtKeyUsageServerAuth)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(p.serial),
		Subject:      pkix.Name{CommonName: cn, Organization: orgs},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(48 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  usage,
		DNSNames:     dns,
		IPAddresses:  ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.caCert, &key.PublicKey, p.caKey)
	if err != nil {
		return err
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	if err := writePEM(p.path(name+".crt"), "CERTIFICATE", der); err != nil {
		return err
	}
	return writePEM(p.path(name+".key"), "EC PRIVATE KEY", kb)
}

// serviceAccountKeys writes sa.key / sa.pub (RSA, as every SA token consumer
// accepts).
func (p *pki) serviceAccountKeys() error {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	if err := writePEM(p.path("sa.key"), "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(key)); err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	return writePEM(p.path("sa.pub"), "PUBLIC KEY", pub)
}

// kubeconfig writes a kubeconfig for the client cert <name>.crt/.key.
func (p *pki) kubeconfig(name, server string) (string, error) {
	out := p.path(name + ".kubeconfig")
	s := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: %s
  user:
    client-certificate: %s
    client-key: %s
contexts:
- name: e2e
  context: {cluster: e2e, user: %s}
current-context: e2e
`, server, p.path("ca.crt"), name, p.path(name+".crt"), p.path(name+".key"), name)
	return out, os.WriteFile(out, []byte(s), 0o600)
}

func writePEM(path, typ string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}
