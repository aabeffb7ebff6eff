package lease

// Wait against the real leased: in its line over SQLite, asking again
// over PostgreSQL (which has no Wait yet).

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestWaitGrantedWhenTheHolderReleases(t *testing.T) {
	d := startDaemon(t, 10*time.Second)
	c := dial(t, d.addr, nil)
	id := newSession("wait")
	a := mustAcquire(t, c, id, "owner-a")
	type result struct {
		l   Lease
		err error
	}
	done := make(chan result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(bg, 30*time.Second)
		defer cancel()
		l, err := c.Wait(ctx, id, "owner-b")
		done <- result{l, err}
	}()
	// Still waiting while owner-a holds the lease (its Wait deadline is
	// 30 s away).
	select {
	case r := <-done:
		t.Fatalf("Wait returned while the lease was held: %+v", r)
	case <-time.After(300 * time.Millisecond):
	}
	mustRelease(t, c, a)
	r := <-done
	if r.err != nil || r.l.Owner != "owner-b" || r.l.Token <= a.Token {
		t.Fatalf("Wait after the release: %+v, %v (owner-a had token %d)", r.l, r.err, a.Token)
	}
	// The holder's own Wait and a free session's are answered at once.
	if l, err := c.Wait(bg, id, "owner-b"); err != nil || l.Token != r.l.Token {
		t.Fatalf("the holder's Wait: %+v, %v", l, err)
	}
}

func TestWaitEndsHeldAtItsDeadline(t *testing.T) {
	d := startDaemon(t, 10*time.Second)
	c := dial(t, d.addr, nil)
	id := newSession("waitheld")
	mustAcquire(t, c, id, "owner-a")
	ctx, cancel := context.WithTimeout(bg, 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.Wait(ctx, id, "owner-b")
	if !errors.Is(err, ErrHeld) || time.Since(start) < 500*time.Millisecond {
		t.Fatalf("Wait ended after %v with %v, want ErrHeld at its deadline", time.Since(start), err)
	}
	if _, err := c.Wait(bg, id, ""); !errors.Is(err, ErrInvalid) {
		t.Fatalf("an empty owner: %v", err)
	}
}
