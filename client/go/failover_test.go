package lease

// Failover across targets against the real leased.

import (
	"net"
	"sync/atomic"
	"testing"
)

// closedPort is a loopback address where nothing listens.
func closedPort(t *testing.T) string {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	return addr
}

// A first target that refuses connections: every call goes through the
// second, and the client stays with it.
func TestFailoverPastAClosedPort(t *testing.T) {
	d := startDaemon(t, liveTTL)
	c := dial(t, closedPort(t)+","+d.addr, nil)
	id := newSession("failover")
	l := mustAcquire(t, c, id, "owner-a")
	if got := atomic.LoadUint32(&c.conn.current); got != 1 {
		t.Fatalf("current target %d, want 1", got)
	}
	r := mustRenew(t, c, l)
	if r.Token != l.Token {
		t.Fatalf("token %d became %d", l.Token, r.Token)
	}
	_, err := c.Acquire(bg, id, "owner-b")
	wantKind(t, err, ErrHeld, "another owner")
	mustRelease(t, c, r)
	mustAcquire(t, c, id, "owner-b")
}

// Two daemons: calls go to the first; stopped, to the other. Over
// PostgreSQL both serve one table (the shared mode), and the lease
// taken through the first is renewed through the second; over SQLite
// each has its own, and what the client does shows on the second.
func TestFailoverWhenTheTargetInUseStops(t *testing.T) {
	a, b := startDaemon(t, liveTTL), startDaemon(t, liveTTL)
	_, shared := postgres(t)
	c := dial(t, a.addr+","+b.addr, nil)
	onA, onB := dial(t, a.addr, nil), dial(t, b.addr, nil)
	id := newSession("failover")
	l := mustAcquire(t, c, id, "owner-a")
	if info, err := onA.Get(bg, id); err != nil || info == nil || info.Token != l.Token {
		t.Fatalf("the first daemon has %+v, %v", info, err)
	}
	a.stop()
	if shared {
		r := mustRenew(t, c, l)
		if r.Token != l.Token || !r.Expiry.After(l.Expiry) {
			t.Fatalf("renewal through the second: %+v after %+v", r, l)
		}
		_, err := c.Acquire(bg, id, "owner-b")
		wantKind(t, err, ErrHeld, "another owner through the second")
	} else {
		if info, err := onB.Get(bg, id); info != nil || err != nil {
			t.Fatalf("the second daemon has %+v, %v before the failover", info, err)
		}
		l = mustAcquire(t, c, id, "owner-b")
	}
	if got := atomic.LoadUint32(&c.conn.current); got != 1 {
		t.Fatalf("current target %d, want 1", got)
	}
	info, err := onB.Get(bg, id)
	if err != nil || info == nil || info.Owner != l.Owner || info.Token != l.Token {
		t.Fatalf("the second daemon has %+v, %v; want %+v", info, err, l)
	}
	mustRelease(t, c, l)
	if info, err := onB.Get(bg, id); info != nil || err != nil {
		t.Fatalf("after the release through the second: %+v, %v", info, err)
	}
}
