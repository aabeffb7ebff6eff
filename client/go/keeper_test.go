package lease

// The keeper against the real leased.

import (
	"errors"
	"sync"
	"syscall"
	"testing"
	"time"
)

// events records a keeper's callbacks.
type events struct {
	mu       sync.Mutex
	lost     chan lossEvent
	troubles int
}

type lossEvent struct {
	lease   Lease
	err     error
	at      time.Time // wall and monotonic
	valid   bool      // Valid, asked in OnLost
	ctxDone bool      // Context done, in OnLost
}

func newEvents() *events { return &events{lost: make(chan lossEvent, 2)} }

// options are KeeperOptions recording into e; k is set once Keep
// returns (OnLost may look at it only then).
func (e *events) options(k **Keeper, ready chan struct{}) *KeeperOptions {
	return &KeeperOptions{
		OnLost: func(l Lease, err error) {
			ev := lossEvent{lease: l, err: err, at: time.Now()}
			<-ready
			ev.valid = (*k).Valid()
			select {
			case <-(*k).Context().Done():
				ev.ctxDone = true
			default:
			}
			e.lost <- ev
		},
		OnTrouble: func(Lease, error) {
			e.mu.Lock()
			e.troubles++
			e.mu.Unlock()
		},
	}
}

// keep starts a keeper whose callbacks go to a new events.
func keep(t *testing.T, c *Client, session, owner string) (*Keeper, *events) {
	t.Helper()
	e := newEvents()
	var k *Keeper
	ready := make(chan struct{})
	k, err := Keep(bg, c, session, owner, e.options(&k, ready))
	if err != nil {
		t.Fatalf("Keep(%s, %s): %v", session, owner, err)
	}
	close(ready)
	t.Cleanup(func() { k.Stop() })
	return k, e
}

func (e *events) waitLost(t *testing.T, limit time.Duration) lossEvent {
	t.Helper()
	select {
	case ev := <-e.lost:
		return ev
	case <-time.After(limit):
		t.Fatalf("not lost within %v", limit)
	}
	panic("unreachable")
}

func (e *events) noLoss(t *testing.T) {
	t.Helper()
	select {
	case ev := <-e.lost:
		t.Fatalf("lost: %+v", ev)
	default:
	}
}

// Over several TTLs the keeper renews (the deadline moves on, the token
// stays) and the lease stays valid all along.
func TestKeeperRenewsAcrossTTLs(t *testing.T) {
	const ttl = time.Second
	d := startDaemon(t, ttl)
	c := dial(t, d.addr, nil)
	id := newSession("keep")
	k, e := keep(t, c, id, "owner-a")
	first := k.Lease()
	if first.TTL != ttl {
		t.Fatalf("TTL %v, want %v", first.TTL, ttl)
	}
	renewals, deadline := 0, k.Deadline()
	for end := time.Now().Add(7 * ttl / 2); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if !k.Valid() {
			t.Fatalf("not valid %v before its deadline %v: %v", time.Now(), k.Deadline(), k.Err())
		}
		if dl := k.Deadline(); dl.After(deadline) {
			renewals, deadline = renewals+1, dl
		}
	}
	l := k.Lease()
	if l.Token != first.Token || !l.Expiry.After(first.Expiry.Add(2*ttl)) {
		t.Fatalf("lease %+v after %+v", l, first)
	}
	// One every third of the TTL, less up to a tenth of it: between 10
	// and 15 in 3.5 TTLs; at least 8 (a slow start), and never more than
	// 15, which would mean renewals sooner than the schedule.
	if renewals < 8 || renewals > 15 {
		t.Fatalf("%d renewals in 3.5 TTLs", renewals)
	}
	info, err := c.Get(bg, id)
	if err != nil || info == nil || !info.Live || info.Token != first.Token || info.Owner != "owner-a" {
		t.Fatalf("leased has %+v, %v", info, err)
	}
	e.noLoss(t)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.troubles != 0 {
		t.Fatalf("%d troubles", e.troubles)
	}
	if err := k.Stop(); err != nil {
		t.Fatal(err)
	}
}

// Stop releases (another owner then gets in), once; the keeper is then
// invalid, its Context done, and OnLost never called.
func TestKeeperStopReleases(t *testing.T) {
	d := startDaemon(t, liveTTL)
	c := dial(t, d.addr, nil)
	id := newSession("stop")
	k, e := keep(t, c, id, "owner-a")
	l := k.Lease()
	if !k.Valid() || k.Err() != nil {
		t.Fatalf("not valid at the start: %v", k.Err())
	}
	if err := k.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := k.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if k.Valid() || !errors.Is(k.Err(), ErrStopped) {
		t.Fatalf("after Stop: valid %v, Err %v", k.Valid(), k.Err())
	}
	select {
	case <-k.Context().Done():
	default:
		t.Fatal("Context not done after Stop")
	}
	b := mustAcquire(t, c, id, "owner-b")
	if b.Token <= l.Token {
		t.Fatalf("token %d after %d", b.Token, l.Token)
	}
	e.noLoss(t)
}

// Released behind its back and taken by another owner: the keeper's
// next renewal is refused, OnLost says ErrHeld, the Context is done, and
// Stop releases nothing.
func TestKeeperLostWhenTakenOver(t *testing.T) {
	const ttl = time.Second
	d := startDaemon(t, ttl)
	c := dial(t, d.addr, nil)
	id := newSession("takeover")
	k, e := keep(t, c, id, "owner-a")
	other := dial(t, d.addr, nil)
	mustRelease(t, other, k.Lease())
	b := mustAcquire(t, other, id, "owner-b")
	ev := e.waitLost(t, 2*ttl) // the next renewal, at a third of the TTL
	if !errors.Is(ev.err, ErrHeld) || ev.valid || !ev.ctxDone || !errors.Is(k.Err(), ErrHeld) {
		t.Fatalf("lost with %v; valid %v, context done %v, Err %v", ev.err, ev.valid, ev.ctxDone, k.Err())
	}
	if ev.lease.Owner != "owner-a" || ev.lease.Token >= b.Token {
		t.Fatalf("OnLost's lease %+v", ev.lease)
	}
	if err := k.Stop(); err != nil {
		t.Fatal(err)
	}
	info, err := other.Get(bg, id)
	if err != nil || info == nil || info.Owner != "owner-b" || info.Token != b.Token || !info.Live {
		t.Fatalf("after Stop leased has %+v, %v", info, err)
	}
	e.noLoss(t)
}

// leased stopped (SIGSTOP) while a keeper holds a lease: the keeper
// calls it lost (OnLost, Valid false, Context done) before the lease's
// expiry as leased granted it, in every run, whatever the phase of the
// renewals when leased stops. The watchdog does it while a renewal is
// blocked on the stopped daemon. Same host, same wall clock: the expiry
// compares with the time of the loss.
func TestKeeperStalledDaemonLostBeforeExpiry(t *testing.T) {
	const ttl, runs = 2 * time.Second, 3
	d := startDaemon(t, ttl)
	c := dial(t, d.addr, nil)
	var margins []time.Duration
	for run := 0; run < runs; run++ {
		id := newSession("stall")
		k, e := keep(t, c, id, "owner-a")
		// Stopped before any renewal, after one, and after three.
		time.Sleep(time.Duration(run) * ttl / 2)
		if err := d.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		ev := e.waitLost(t, 3*ttl)
		if err := d.cmd.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		if ev.err == nil || errors.Is(ev.err, ErrHeld) || ev.valid || !ev.ctxDone {
			t.Fatalf("run %d: lost with %v; valid %v, context done %v", run, ev.err, ev.valid, ev.ctxDone)
		}
		// The last grant's expiry, as the keeper had it and as leased
		// has it once it runs again (a renewal it answered as it
		// stopped may have moved it later still).
		if !ev.at.Before(ev.lease.Expiry) {
			t.Fatalf("run %d: lost at %v, not before the expiry %v", run, ev.at, ev.lease.Expiry)
		}
		info, err := c.Get(bg, id)
		if err != nil || info == nil || info.Token != ev.lease.Token || info.Expiry.Before(ev.lease.Expiry) {
			t.Fatalf("run %d: leased has %+v, %v; the keeper had %+v", run, info, err, ev.lease)
		}
		margins = append(margins, ev.lease.Expiry.Sub(ev.at))
		if err := k.Stop(); err != nil {
			t.Fatalf("run %d: Stop: %v", run, err)
		}
	}
	t.Logf("lost before leased's expiry by %v", margins)
}
