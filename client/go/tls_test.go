package lease

// TLS, mutual TLS and bearer tokens against the real leased, with
// certificates made by the openssl command line as
// tests/integration/certs.py makes them.

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// makeCerts writes ca, server (for localhost and 127.0.0.1) and client1
// (.pem and .key), EC P-256, valid for a day, into a new directory.
func makeCerts(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	run := func(args ...string) {
		cmd := exec.Command("openssl", args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("openssl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	ec := []string{"-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"}
	run(append(append([]string{"req", "-x509"}, ec...), "-days", "1", "-subj", "/CN=leased-test-ca",
		"-keyout", "ca.key", "-out", "ca.pem")...)
	leaf := func(name, cn, san string) {
		run(append(append([]string{"req"}, ec...), "-subj", "/CN="+cn,
			"-keyout", name+".key", "-out", name+".csr")...)
		ext := "basicConstraints=CA:FALSE\nsubjectAltName=" + san + "\n"
		if err := os.WriteFile(filepath.Join(dir, name+".ext"), []byte(ext), 0o600); err != nil {
			t.Fatal(err)
		}
		run("x509", "-req", "-in", name+".csr", "-CA", "ca.pem", "-CAkey", "ca.key",
			"-CAcreateserial", "-days", "1", "-extfile", name+".ext", "-out", name+".pem")
	}
	leaf("server", "localhost", "DNS:localhost,IP:127.0.0.1")
	leaf("client1", "client-one", "DNS:client-one.test")
	for _, k := range []string{"ca.key", "server.key", "client1.key"} {
		os.Chmod(filepath.Join(dir, k), 0o600)
	}
	return dir
}

func TestTLS(t *testing.T) {
	certs := makeCerts(t)
	p := func(name string) string { return filepath.Join(certs, name) }
	d := startDaemon(t, liveTTL, "--tls-cert", p("server.pem"), "--tls-key", p("server.key"))
	port := d.addr[strings.LastIndexByte(d.addr, ':'):]
	for _, target := range []string{d.addr, "localhost" + port} {
		c := dial(t, target, &Options{CAFile: p("ca.pem")})
		l := mustAcquire(t, c, newSession("tls"), "owner-a")
		mustRelease(t, c, mustRenew(t, c, l))
	}
	// ServerName: the name checked, whatever the target says.
	c := dial(t, d.addr, &Options{CAFile: p("ca.pem"), ServerName: "other.test", Timeout: time.Second})
	_, err := c.Acquire(bg, newSession("tls"), "owner-a")
	wantKind(t, err, ErrUnavailable, "a server name the certificate does not have")
	c = dial(t, d.addr, &Options{CAFile: p("ca.pem"), ServerName: "localhost"})
	mustAcquire(t, c, newSession("tls"), "owner-a")
	// A CA that did not sign the server's certificate.
	c = dial(t, d.addr, &Options{CAFile: p("client1.pem"), Timeout: time.Second})
	_, err = c.Acquire(bg, newSession("tls"), "owner-a")
	wantKind(t, err, ErrUnavailable, "an untrusted server")
	// Plaintext to a TLS server.
	c = dial(t, d.addr, &Options{Timeout: time.Second})
	_, err = c.Acquire(bg, newSession("tls"), "owner-a")
	if !errors.Is(err, ErrUnavailable) && !errors.Is(err, ErrDeadline) {
		t.Fatalf("plaintext to TLS: %v", err)
	}
}

func TestMutualTLS(t *testing.T) {
	certs := makeCerts(t)
	p := func(name string) string { return filepath.Join(certs, name) }
	d := startDaemon(t, liveTTL, "--tls-cert", p("server.pem"), "--tls-key", p("server.key"),
		"--tls-client-ca", p("ca.pem"))
	c := dial(t, d.addr, &Options{CAFile: p("ca.pem"), CertFile: p("client1.pem"), KeyFile: p("client1.key")})
	mustRelease(t, c, mustAcquire(t, c, newSession("mtls"), "owner-a"))
	// Without a certificate: leased ends the handshake, so the call
	// never reaches it.
	c = dial(t, d.addr, &Options{CAFile: p("ca.pem"), Timeout: time.Second})
	_, err := c.Acquire(bg, newSession("mtls"), "owner-a")
	wantKind(t, err, ErrUnavailable, "mutual TLS without a client certificate")
	for _, o := range []Options{
		{CAFile: p("ca.pem"), CertFile: p("client1.pem")},
		{CAFile: p("ca.pem"), KeyFile: p("client1.key")},
		{CertFile: p("client1.pem"), KeyFile: p("client1.key")},
		{CAFile: p("ca.pem"), CertFile: p("client1.pem"), KeyFile: p("server.key")},
	} {
		_, err := Dial(d.addr, &o)
		wantKind(t, err, ErrInvalid, "Dial with "+o.CertFile+" "+o.KeyFile)
	}
}

func TestBearerToken(t *testing.T) {
	tokens := filepath.Join(t.TempDir(), "tokens")
	// Mode 0600 from the start: leased refuses a file others may read.
	if err := os.WriteFile(tokens, []byte("# test tokens\nclient-a s3cret-T0ken.~+/=\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, liveTTL, "--auth-token-file", tokens)
	c := dial(t, d.addr, &Options{Token: "s3cret-T0ken.~+/="})
	l := mustAcquire(t, c, newSession("token"), "owner-a")
	if info, err := c.Get(bg, l.SessionID); err != nil || info == nil || info.Token != l.Token {
		t.Fatalf("Get with the token: %+v, %v", info, err)
	}
	mustRelease(t, c, l)
	for _, o := range []*Options{{Token: "wrong"}, nil} {
		c := dial(t, d.addr, o)
		_, err := c.Acquire(bg, newSession("token"), "owner-a")
		wantKind(t, err, ErrUnauthenticated, "a wrong or no token")
		_, err = c.Get(bg, l.SessionID)
		wantKind(t, err, ErrUnauthenticated, "Get with a wrong or no token")
	}
}
