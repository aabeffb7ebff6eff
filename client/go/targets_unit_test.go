package lease

// Dial's checks of targets and options, and the argument checks, with no
// server: each refusal is ErrInvalid before any connection.

import (
	"errors"
	"strings"
	"testing"
)

func TestDialRefusesPlaintextToOtherHosts(t *testing.T) {
	for _, target := range []string{"192.0.2.1:7443", "example.com:443", "10.0.0.1:1",
		"[::ffff:127.0.0.1]:1", "[2001:db8::1]:1", "0.0.0.0:1",
		"127.0.0.1:1,192.0.2.1:7443"} {
		c, err := Dial(target, nil)
		var e *Error
		if !errors.As(err, &e) || e.Kind != ErrInvalid || c != nil ||
			!strings.Contains(e.Message, "not a loopback address") {
			t.Errorf("Dial(%q): %v", target, err)
		}
	}
}

func TestDialAcceptsLoopback(t *testing.T) {
	for _, target := range []string{"127.0.0.1:1", "127.9.9.9:65535", "localhost:1", "[::1]:1",
		"unix:/nonexistent/leased.sock", "unix:relative.sock", "127.0.0.1:1,[::1]:2"} {
		c, err := Dial(target, nil)
		if err != nil {
			t.Errorf("Dial(%q): %v", target, err)
			continue
		}
		c.Close()
	}
}

func TestDialRefusesBadTargetsAndOptions(t *testing.T) {
	for _, target := range []string{"", "localhost", ":1", "localhost:", "localhost:x",
		"localhost:70000", "localhost:-1", "unix:", "[::1:1", "[]:1", "127.0.0.1:1,,127.0.0.1:2",
		"127.0.0.1:1,", strings.Repeat("127.0.0.1:1,", 8) + "127.0.0.1:1",
		strings.Repeat("a", 510) + ":1"} {
		if _, err := Dial(target, nil); !errors.Is(err, ErrInvalid) {
			t.Errorf("Dial(%q): %v", target, err)
		}
	}
	for _, o := range []Options{
		{Token: "bad token"}, {Token: "tok\n"}, {Token: "é"}, {Token: strings.Repeat("t", 4097)},
		{CertFile: "c.pem", KeyFile: "k.pem"},
		{CAFile: "/nonexistent/ca.pem"},
		{CAFile: "/dev/null"},
	} {
		if _, err := Dial("127.0.0.1:1", &o); !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v: %v", o, err)
		}
	}
	c, err := Dial("127.0.0.1:1", &Options{Token: "A-Za-z0-9-._~+/="})
	if err != nil {
		t.Errorf("a token of every character allowed: %v", err)
	} else {
		c.Close()
	}
}

func TestArgumentsCheckedBeforeAnyCall(t *testing.T) {
	c, err := Dial("127.0.0.1:1", nil) // nothing listens: a call would fail otherwise
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ok := strings.Repeat("é", MaxOwner/2)
	for _, a := range [][2]string{{"", "o"}, {"s", ""}, {strings.Repeat("s", MaxSessionID+1), "o"},
		{"s", ok + "x"}, {"s\x00", "o"}, {"\xed\xa0\x80", "o"}} { // a surrogate
		_, err := c.Acquire(bg, a[0], a[1])
		var e *Error
		if !errors.As(err, &e) || e.Kind != ErrInvalid || e.Code != 0 {
			t.Errorf("Acquire(%q, %q): %v", a[0], a[1], err)
		}
	}
	if err := c.Release(bg, Lease{SessionID: "s"}); !errors.Is(err, ErrInvalid) {
		t.Errorf("Release without owner: %v", err)
	}
	if _, err := c.Renew(bg, Lease{Owner: "o"}); !errors.Is(err, ErrInvalid) {
		t.Errorf("Renew without id: %v", err)
	}
	if _, err := c.Get(bg, "\xff"); !errors.Is(err, ErrInvalid) {
		t.Errorf("Get: %v", err)
	}
}
