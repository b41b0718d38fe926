package pki

import (
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
)

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(data)
	if block == nil {
		t.Fatalf("%s: not PEM", path)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

func TestCAIsCreatedOnceAndReused(t *testing.T) {
	dir := t.TempDir()
	ca1, err := EnsureCA(dir, "test-ca")
	if err != nil {
		t.Fatal(err)
	}
	if !ca1.Cert.IsCA || ca1.Cert.Subject.CommonName != "test-ca" {
		t.Fatalf("CA certificate: IsCA=%v CN=%q", ca1.Cert.IsCA, ca1.Cert.Subject.CommonName)
	}
	if fi, err := os.Stat(filepath.Join(dir, "ca.key")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("ca.key mode %v (%v), want 0600", fi.Mode().Perm(), err)
	}
	ca2, err := EnsureCA(dir, "other-name")
	if err != nil {
		t.Fatal(err)
	}
	if !ca1.Cert.Equal(ca2.Cert) {
		t.Fatal("a second EnsureCA made a new CA instead of loading the existing one")
	}
}

func TestLeafIsReissuedOnlyWhenItNoLongerFits(t *testing.T) {
	dir := t.TempDir()
	ca, err := EnsureCA(dir, "test-ca")
	if err != nil {
		t.Fatal(err)
	}
	req := LeafRequest{Name: "server", CommonName: "srv", Hosts: []string{"localhost", "127.0.0.1"}, Usage: ServerAuth}
	certPath, _, err := ca.EnsureLeaf(dir, req)
	if err != nil {
		t.Fatal(err)
	}
	first := readCert(t, certPath)
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	for _, host := range []string{"localhost", "127.0.0.1"} {
		if _, err := first.Verify(x509.VerifyOptions{DNSName: host, Roots: roots}); err != nil {
			t.Fatalf("verify for %s: %v", host, err)
		}
	}

	// Same hosts (or fewer): the certificate is kept.
	req.Hosts = []string{"localhost"}
	if _, _, err := ca.EnsureLeaf(dir, req); err != nil {
		t.Fatal(err)
	}
	if !readCert(t, certPath).Equal(first) {
		t.Fatal("certificate reissued although it covers every host")
	}
	// A new host: reissued, covering it.
	req.Hosts = []string{"localhost", "apiserver-1", "10.0.0.7"}
	if _, _, err := ca.EnsureLeaf(dir, req); err != nil {
		t.Fatal(err)
	}
	second := readCert(t, certPath)
	if second.Equal(first) {
		t.Fatal("certificate not reissued for a new host")
	}
	if _, err := second.Verify(x509.VerifyOptions{DNSName: "apiserver-1", Roots: roots}); err != nil {
		t.Fatalf("verify for the new host: %v", err)
	}
	// A client certificate is for client authentication.
	clientPath, _, err := ca.EnsureLeaf(dir, LeafRequest{Name: "client", CommonName: "c", Organization: []string{"g"}, Usage: ClientAuth})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := readCert(t, clientPath).Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Fatalf("client certificate: %v", err)
	}
}

func TestWriteKubeconfig(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "kubeconfig")
	if err := WriteKubeconfig(path, "https://127.0.0.1:6443", []byte("CA"), "admin", "secret"); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("kubeconfig mode %v (%v), want 0600", fi.Mode().Perm(), err)
	}
	cfg, err := clientcmd.LoadFromFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx := cfg.Contexts[cfg.CurrentContext]
	if ctx == nil || cfg.Clusters[ctx.Cluster].Server != "https://127.0.0.1:6443" ||
		string(cfg.Clusters[ctx.Cluster].CertificateAuthorityData) != "CA" || cfg.AuthInfos[ctx.AuthInfo].Token != "secret" {
		t.Fatalf("kubeconfig content: %+v", cfg)
	}
}
