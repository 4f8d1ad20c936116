//go:build linux

package leaseapi

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/klocklabs/klock/enforcer/lease"
)

func writeTokens(t *testing.T, content string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
	return p
}

const tokensFile = "# tenants of the lease API\norch-a aaaaaaaaaaaaaaaaaaaaaaaa\norch-b bbbbbbbbbbbbbbbbbbbbbbbb\nops  cccccccccccccccccccccccc admin\n"

func TestParseTokens(t *testing.T) {
	tk, err := ParseTokens([]byte(tokensFile))
	if err != nil {
		t.Fatal(err)
	}
	for tok, want := range map[string]string{"aaaaaaaaaaaaaaaaaaaaaaaa": "orch-a", "cccccccccccccccccccccccc": "ops"} {
		if e, ok := tk.lookup(tok); !ok || e.tenant != want {
			t.Errorf("%s: %+v %v", tok, e, ok)
		}
	}
	if e, _ := tk.lookup("cccccccccccccccccccccccc"); !e.admin {
		t.Error("ops is not admin")
	}
	for _, tok := range []string{"", "aaaaaaaaaaaaaaaaaaaaaaa", "aaaaaaaaaaaaaaaaaaaaaaaaa", "orch-a"} {
		if _, ok := tk.lookup(tok); ok {
			t.Errorf("token %q accepted", tok)
		}
	}
	for _, bad := range []string{"", "# only comments\n", "a short\n", "a aaaaaaaaaaaaaaaaaa root\n", "onefield\n",
		"a aaaaaaaaaaaaaaaaaaaa\nb aaaaaaaaaaaaaaaaaaaa\n"} {
		if _, err := ParseTokens([]byte(bad)); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
}

func TestListenTCPRefuses(t *testing.T) {
	good := writeTokens(t, tokensFile, 0o600)
	for name, o := range map[string]TCPOptions{
		"no tokens":           {Addr: "127.0.0.1:0"},
		"readable tokens":     {Addr: "127.0.0.1:0", TokensFile: writeTokens(t, tokensFile, 0o644)},
		"cert without key":    {Addr: "127.0.0.1:0", TokensFile: good, CertFile: "/x.pem"},
		"all interfaces":      {Addr: ":0", TokensFile: good},
		"non-loopback":        {Addr: "192.0.2.1:3100", TokensFile: good},
		"non-loopback name":   {Addr: "example.com:3100", TokensFile: good},
		"missing tokens file": {Addr: "127.0.0.1:0", TokensFile: "/nonexistent/tokens"},
	} {
		ln, _, err := ListenTCP(o)
		if err == nil {
			ln.Close()
			t.Errorf("%s: listening", name)
			continue
		}
		if !errors.Is(err, ErrConfig) {
			t.Errorf("%s: %v, want ErrConfig", name, err)
		}
		t.Logf("%s: %v", name, err)
	}
}

// On TCP the tenant is the bearer token's: none or a wrong one is 401;
// with TLS the same. The client speaks it with NewTCP.
func TestTCPBearerTokens(t *testing.T) {
	for _, withTLS := range []bool{false, true} {
		o := TCPOptions{Addr: "127.0.0.1:0", TokensFile: writeTokens(t, tokensFile, 0o600)}
		var roots *x509.CertPool
		if withTLS {
			// With TLS, every interface is allowed.
			o.Addr = "0.0.0.0:0"
			o.CertFile, o.KeyFile, roots = selfSigned(t)
		}
		ln, tokens, err := ListenTCP(o)
		if err != nil {
			t.Fatal(err)
		}
		s, err := New(Config{Store: lease.NewTable(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		go s.ServeTCP(ln, tokens)
		port := ln.Addr().(*net.TCPAddr).Port
		base := "http://127.0.0.1:" + strconv.Itoa(port)
		var tc *tls.Config
		if withTLS {
			base = "https://127.0.0.1:" + strconv.Itoa(port)
			tc = &tls.Config{RootCAs: roots, ServerName: "localhost"}
		}
		ctx := context.Background()
		for tok, want := range map[string]Class{"": ClassUnauthorized, "wrong-wrong-wrong-wrong": ClassUnauthorized} {
			_, err := NewTCP(base, tok, tc).List(ctx, "")
			var e *Error
			if !errors.As(err, &e) || e.Class != want || e.Status != 401 {
				t.Fatalf("tls %v token %q: %v", withTLS, tok, err)
			}
		}
		a := NewTCP(base, "aaaaaaaaaaaaaaaaaaaaaaaa", tc)
		r, err := a.Acquire(ctx, ManifestRequest{AgentID: "x", SessionID: "y", Intents: []string{"MUTATES FILE:/t/**"}})
		if err != nil || r.Outcome != "GRANTED" || r.Leases[0].Tenant != "orch-a" {
			t.Fatalf("tls %v: acquire as orch-a: %+v %v", withTLS, r, err)
		}
		if ls, err := NewTCP(base, "bbbbbbbbbbbbbbbbbbbbbbbb", tc).List(ctx, ""); err != nil || len(ls) != 0 {
			t.Fatalf("orch-b lists %v %v", ls, err)
		}
		if ls, err := NewTCP(base, "cccccccccccccccccccccccc", tc).List(ctx, ""); err != nil || len(ls) != 1 {
			t.Fatalf("admin lists %v %v", ls, err)
		}
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if err := s.Shutdown(sctx); err != nil {
			t.Fatal(err)
		}
		cancel()
	}
}

// selfSigned writes a certificate for localhost and 127.0.0.1, its key,
// and returns them with a pool that trusts it.
func selfSigned(t *testing.T) (certFile, keyFile string, roots *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "localhost"},
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	roots = x509.NewCertPool()
	roots.AddCert(c)
	return certFile, keyFile, roots
}
