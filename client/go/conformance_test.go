package lease

// The behaviour table of liblease's conformance suite
// (client/conformance.c), each check a test of its own, through this
// package against the real leased: a 500 ms TTL where a check waits out
// an expiry, a 10 s one where a lease must stay live between calls.

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

func liveClient(t *testing.T) *Client {
	return dial(t, startDaemon(t, liveTTL).addr, nil)
}

func shortClient(t *testing.T) *Client {
	return dial(t, startDaemon(t, shortTTL).addr, nil)
}

// 1. A fresh acquire returns the id, the owner, an expiry, a token >= 1,
// and the TTL leased says.
func TestConformance01FreshAcquire(t *testing.T) {
	c := liveClient(t)
	id := newSession("fresh")
	before := time.Now()
	l := mustAcquire(t, c, id, "owner-a")
	if l.SessionID != id || l.Owner != "owner-a" || l.Token < 1 {
		t.Fatalf("got %+v", l)
	}
	if l.TTL != liveTTL {
		t.Fatalf("TTL %v, want %v (leased-ttl-ms)", l.TTL, liveTTL)
	}
	// Same host, same clock: the expiry is the decision plus the TTL (to
	// the precision of the store's timestamps).
	slack := time.Millisecond
	if l.Expiry.Before(before.Add(liveTTL-slack)) || l.Expiry.After(time.Now().Add(liveTTL+slack)) {
		t.Fatalf("expiry %v not a TTL after the call", l.Expiry)
	}
}

// 2. Renew keeps the token and returns a strictly later expiry, twice in
// a row too.
func TestConformance02RenewExtendsKeepsToken(t *testing.T) {
	c := liveClient(t)
	l := mustAcquire(t, c, newSession("renew"), "owner-a")
	r := mustRenew(t, c, l)
	if r.Token != l.Token || !r.Expiry.After(l.Expiry) || r.TTL != liveTTL {
		t.Fatalf("renew of %+v gave %+v", l, r)
	}
	r2 := mustRenew(t, c, r)
	if r2.Token != l.Token || !r2.Expiry.After(r.Expiry) {
		t.Fatalf("second renew %+v not later than %+v", r2, r)
	}
}

// 3. After a release another owner acquires, with a greater token.
func TestConformance03ReleaseLetsAnotherOwnerIn(t *testing.T) {
	c := liveClient(t)
	id := newSession("release")
	a := mustAcquire(t, c, id, "owner-a")
	mustRelease(t, c, a)
	b := mustAcquire(t, c, id, "owner-b")
	if b.Owner != "owner-b" || b.Token <= a.Token {
		t.Fatalf("%+v after %+v", b, a)
	}
}

// 4. A second owner's acquire of a live lease is ErrHeld; the holder is
// untouched.
func TestConformance04SecondOwnerHeld(t *testing.T) {
	c := liveClient(t)
	id := newSession("held")
	a := mustAcquire(t, c, id, "owner-a")
	_, err := c.Acquire(bg, id, "owner-b")
	wantKind(t, err, ErrHeld, "second owner's acquire")
	if r := mustRenew(t, c, a); r.Token != a.Token {
		t.Fatalf("token %d became %d", a.Token, r.Token)
	}
}

// 5. The same owner re-acquiring keeps the token, with a later expiry.
func TestConformance05SameOwnerReacquireKeepsToken(t *testing.T) {
	c := liveClient(t)
	id := newSession("reacquire")
	a := mustAcquire(t, c, id, "owner-a")
	b := mustAcquire(t, c, id, "owner-a")
	if b.Token != a.Token || !b.Expiry.After(a.Expiry) {
		t.Fatalf("%+v after %+v", b, a)
	}
}

// 6. Acquire after release, by the same owner too, raises the token.
func TestConformance06AcquireAfterReleaseRaisesToken(t *testing.T) {
	c := liveClient(t)
	id := newSession("rerelease")
	a := mustAcquire(t, c, id, "owner-a")
	mustRelease(t, c, a)
	b := mustAcquire(t, c, id, "owner-a")
	if b.Token <= a.Token {
		t.Fatalf("token %d after %d", b.Token, a.Token)
	}
}

// 7 and 8. Acquire after expiry raises the token; the old holder's
// renewal is then ErrHeld, and its release frees nothing.
func TestConformance07And08ExpiryTakeoverStaleRenewHeld(t *testing.T) {
	c := shortClient(t)
	id := newSession("expiry")
	a := mustAcquire(t, c, id, "owner-a")
	time.Sleep(expire)
	b := mustAcquire(t, c, id, "owner-b")
	if b.Token <= a.Token {
		t.Fatalf("token %d after %d", b.Token, a.Token)
	}
	_, err := c.Renew(bg, a)
	wantKind(t, err, ErrHeld, "stale renew")
	mustRelease(t, c, a)
	_, err = c.Acquire(bg, id, "owner-c")
	wantKind(t, err, ErrHeld, "acquire after the stale release")
}

// 9. Renew after release is ErrHeld.
func TestConformance09RenewAfterReleaseHeld(t *testing.T) {
	c := liveClient(t)
	a := mustAcquire(t, c, newSession("renewrel"), "owner-a")
	mustRelease(t, c, a)
	_, err := c.Renew(bg, a)
	wantKind(t, err, ErrHeld, "renew after release")
}

// 10. Release is idempotent, also for a session never seen.
func TestConformance10ReleaseIdempotent(t *testing.T) {
	c := liveClient(t)
	a := mustAcquire(t, c, newSession("idem"), "owner-a")
	mustRelease(t, c, a)
	mustRelease(t, c, a)
	ghost := Lease{SessionID: newSession("never"), Owner: "nobody", Token: 7}
	mustRelease(t, c, ghost)
	mustRelease(t, c, ghost)
	if got := mustAcquire(t, c, ghost.SessionID, "owner-b"); got.Token < 1 {
		t.Fatalf("token %d", got.Token)
	}
}

// 11. Tokens rise strictly across a chain of 100 takeovers.
func TestConformance11TakeoverChain(t *testing.T) {
	c := liveClient(t)
	id := newSession("chain")
	var last uint64
	for i := 0; i < 100; i++ {
		l := mustAcquire(t, c, id, fmt.Sprintf("owner-%d", i))
		if l.Token <= last {
			t.Fatalf("link %d: token %d after %d", i, l.Token, last)
		}
		last = l.Token
		mustRelease(t, c, l)
	}
}

// 12. Distinct sessions never contend.
func TestConformance12DistinctSessions(t *testing.T) {
	c := liveClient(t)
	a := mustAcquire(t, c, newSession("distinct"), "owner-a")
	b := mustAcquire(t, c, newSession("distinct"), "owner-b")
	mustRenew(t, c, a)
	mustRenew(t, c, b)
}

// Renewing an expired lease nobody took over reclaims it: same token, a
// later expiry, and held again.
func TestConformanceReclaimOnRenew(t *testing.T) {
	c := shortClient(t)
	id := newSession("reclaim")
	a := mustAcquire(t, c, id, "owner-a")
	time.Sleep(expire)
	r := mustRenew(t, c, a)
	if r.Token != a.Token || !r.Expiry.After(a.Expiry) {
		t.Fatalf("reclaim of %+v gave %+v", a, r)
	}
	_, err := c.Acquire(bg, id, "owner-b")
	wantKind(t, err, ErrHeld, "acquire after the reclaim")
}

// A release by the wrong owner, or with the wrong token (0 too), frees
// nothing.
func TestConformanceWrongReleaseFreesNothing(t *testing.T) {
	c := liveClient(t)
	id := newSession("wrongrel")
	a := mustAcquire(t, c, id, "owner-a")
	other := a
	other.Owner = "owner-b"
	mustRelease(t, c, other)
	other = a
	other.Token = a.Token + 1
	mustRelease(t, c, other)
	other.Token = 0
	mustRelease(t, c, other)
	_, err := c.Acquire(bg, id, "owner-c")
	wantKind(t, err, ErrHeld, "acquire after the wrong releases")
	if r := mustRenew(t, c, a); r.Token != a.Token {
		t.Fatalf("token %d became %d", a.Token, r.Token)
	}
}

// A renewal with token 0, a wrong token, a wrong owner, or of a session
// never seen is ErrHeld, and changes nothing.
func TestConformanceRenewWrongTokenHeld(t *testing.T) {
	c := liveClient(t)
	a := mustAcquire(t, c, newSession("renewtok"), "owner-a")
	bad := a
	bad.Token = 0
	_, err := c.Renew(bg, bad)
	wantKind(t, err, ErrHeld, "renew with token 0")
	bad.Token = a.Token + 1
	_, err = c.Renew(bg, bad)
	wantKind(t, err, ErrHeld, "renew with a wrong token")
	bad = a
	bad.Owner = "owner-b"
	_, err = c.Renew(bg, bad)
	wantKind(t, err, ErrHeld, "renew by a wrong owner")
	mustRenew(t, c, a)
	bad.SessionID = newSession("renewghost")
	_, err = c.Renew(bg, bad)
	wantKind(t, err, ErrHeld, "renew of a session never seen")
}

// Invalid arguments are refused (before any call) and change nothing;
// an id of exactly the limit is fine.
func TestConformanceInvalidArgumentsRefused(t *testing.T) {
	c := liveClient(t)
	id := newSession("invalid")
	long := strings.Repeat("x", MaxSessionID+1)
	for _, a := range [][2]string{{"", "owner-a"}, {id, ""}, {long, "owner-a"},
		{"bad\xff", "owner-a"}, {"nul\x00id", "owner-a"}, {id, strings.Repeat("o", MaxOwner+1)}} {
		_, err := c.Acquire(bg, a[0], a[1])
		wantKind(t, err, ErrInvalid, "Acquire("+a[0]+", "+a[1]+")")
	}
	_, err := c.Renew(bg, Lease{SessionID: id, Owner: "\xc0\x80", Token: 1}) // overlong
	wantKind(t, err, ErrInvalid, "Renew with an overlong form")
	wantKind(t, c.Release(bg, Lease{Owner: "owner-a", Token: 1}), ErrInvalid, "Release without id")
	exact := id + strings.Repeat("x", MaxSessionID-len(id))
	mustRelease(t, c, mustAcquire(t, c, exact, id))
	mustAcquire(t, c, id, "owner-a") // nothing held it
}

// Many sessions at once, from 8 goroutines of 16 each: all succeed.
func TestConformanceParallelSessions(t *testing.T) {
	c := liveClient(t)
	var wg sync.WaitGroup
	errs := make(chan error, 8*16*3)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func(owner string) {
			defer wg.Done()
			for i := 0; i < 16; i++ {
				l, err := c.Acquire(bg, newSession("parallel"), owner)
				if err == nil {
					l, err = c.Renew(bg, l)
				}
				if err == nil {
					err = c.Release(bg, l)
				}
				if err != nil {
					errs <- err
				}
			}
		}(fmt.Sprintf("worker-%d", w))
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// Get (the admin service) shows a held lease; nil for a session never
// seen, or released.
func TestGet(t *testing.T) {
	c := liveClient(t)
	id := newSession("get")
	l := mustAcquire(t, c, id, "owner-a")
	info, err := c.Get(bg, id)
	if err != nil || info == nil {
		t.Fatalf("Get: %+v, %v", info, err)
	}
	if info.SessionID != id || info.Owner != "owner-a" || info.Token != l.Token ||
		!info.Live || !info.Expiry.Equal(l.Expiry) {
		t.Fatalf("Get: %+v, granted %+v", info, l)
	}
	if info, err := c.Get(bg, newSession("never")); info != nil || err != nil {
		t.Fatalf("Get of a session never seen: %+v, %v", info, err)
	}
	mustRelease(t, c, l)
	if info, err := c.Get(bg, id); info != nil || err != nil {
		t.Fatalf("Get after release: %+v, %v", info, err)
	}
	_, err = c.Get(bg, "")
	wantKind(t, err, ErrInvalid, "Get of an empty id")
}
