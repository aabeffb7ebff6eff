package lease

// Watch against the real leased (either store): the changes in order,
// a watch resumed from its revision, a revision no longer kept, and a
// server without Watch. Over PostgreSQL the daemons of one TTL share a
// database with the other tests' (daemon_test.go): revisions are only
// compared as rising, and each test watches a prefix of its own.

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

type change struct {
	kind  EventKind
	id    string
	token uint64
}

// watchUntil watches prefix p from *rev until last says an event is the
// last one (30 s at most), and returns the events.
func watchUntil(t *testing.T, c *Client, p string, rev *uint64, last func(Event) bool) []Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(bg, 30*time.Second)
	defer cancel()
	var got []Event
	done := false
	err := c.Watch(ctx, p, true, rev, func(e Event) bool {
		got = append(got, e)
		done = last(e)
		return !done
	})
	if err != nil || !done {
		t.Fatalf("Watch: %v after the events %+v", err, got)
	}
	return got
}

// count is a last() for watchUntil: the nth event.
func count(n int) func(Event) bool {
	seen := 0
	return func(Event) bool { seen++; return seen == n }
}

func changesOf(events []Event) []change {
	var cs []change
	for _, e := range events {
		cs = append(cs, change{e.Kind, e.Lease.SessionID, e.Lease.Token})
	}
	return cs
}

// rising checks that the revisions rise, the last one in *rev.
func rising(t *testing.T, events []Event, rev uint64) {
	t.Helper()
	for i := 1; i < len(events); i++ {
		if events[i].Revision <= events[i-1].Revision {
			t.Fatalf("revisions out of order: %+v", events)
		}
	}
	if events[len(events)-1].Revision != rev {
		t.Fatalf("the revision is %d after the events %+v", rev, events)
	}
}

// grantAndRelease makes n sessions under p change owner twice each: the
// changes a watch of p must tell.
func grantAndRelease(t *testing.T, c *Client, p string, n int) []change {
	var want []change
	for i := 0; i < n; i++ {
		l := mustAcquire(t, c, fmt.Sprintf("%s%d", p, i), "owner-a")
		mustRelease(t, c, l)
		want = append(want, change{Granted, l.SessionID, l.Token}, change{Released, l.SessionID, l.Token})
	}
	return want
}

func TestWatchTellsEachChangeAndResumesFromItsRevision(t *testing.T) {
	d := startDaemon(t, 10*time.Second)
	c := dial(t, closedPort(t)+","+d.addr, nil) // the first is down
	p := newSession("watch") + "/"
	// Changes before the watch, so that revision 1 is behind it: the
	// watch from 1 goes as far as the first's release.
	f := mustAcquire(t, c, p+"first", "owner-z")
	mustRelease(t, c, f)
	var rev uint64 = 1
	first := watchUntil(t, c, p, &rev, func(e Event) bool {
		return e.Lease.SessionID == f.SessionID && e.Kind == Released
	})
	want := grantAndRelease(t, c, p, 3)
	b := mustRenew(t, c, mustAcquire(t, c, p+"b", "owner-b")) // renewals are no changes
	want = append(want, change{Granted, b.SessionID, b.Token})
	// The revision covers the first watch's events: this one tells the
	// rest, none twice.
	got := watchUntil(t, c, p, &rev, count(len(want)))
	rising(t, append(first, got...), rev)
	if fmt.Sprint(changesOf(got)) != fmt.Sprint(want) {
		t.Fatalf("the changes %v, want %v", changesOf(got), want)
	}
	if e := got[len(got)-1]; e.Lease.Owner != "owner-b" || e.Lease.Expiry.After(b.Expiry) {
		t.Fatalf("the grant told %+v, answered %+v", e.Lease, b)
	}
	// One session's watch leaves out the others'.
	mustRelease(t, c, mustAcquire(t, c, p+"other", "owner-o"))
	mustRelease(t, c, b)
	one := rev
	err := c.Watch(bg, b.SessionID, false, &one, func(e Event) bool {
		if e.Kind != Released || e.Lease.Token != b.Token {
			t.Errorf("want the release of %+v, got %+v", b, e)
		}
		return false
	})
	if err != nil || one <= rev+2 {
		t.Fatalf("Watch of one session: %v, at revision %d after %d", err, one, rev)
	}
}

func TestWatchOfARevisionNoLongerKeptIsGone(t *testing.T) {
	// A TTL of its own: over PostgreSQL, a database of its own.
	d := startDaemon(t, 9876*time.Millisecond, "--watch-history", "3")
	c := dial(t, d.addr, nil)
	p := newSession("gone") + "/"
	grantAndRelease(t, c, p, 3) // revisions 1..6
	var rev uint64 = 3
	got := watchUntil(t, c, p, &rev, count(3))
	if got[0].Revision != 4 || rev != 6 {
		t.Fatalf("after 3: %+v (revision %d)", got, rev)
	}
	// (After the one above: over PostgreSQL, the replica's copy of the
	// events has then read them all.)
	rev = 1
	err := c.Watch(bg, p, true, &rev, func(Event) bool { return true })
	var e *Error
	if !errors.Is(err, ErrGone) || !errors.As(err, &e) || e.Code.String() != "OutOfRange" || rev != 1 {
		t.Fatalf("a watch after 1 with 4..6 kept: %v (revision %d)", err, rev)
	}
}

func TestWatchErrors(t *testing.T) {
	d := startDaemon(t, 10*time.Second)
	c := dial(t, d.addr, nil)
	var rev uint64
	// From before the deadline is set, and a little early: leased's
	// timers may end the call a millisecond before it (a run under load
	// saw 498 ms from a start taken after it was set).
	start := time.Now()
	ctx, cancel := context.WithTimeout(bg, 500*time.Millisecond)
	defer cancel()
	err := c.Watch(ctx, newSession("quiet"), false, &rev, func(Event) bool { return true })
	if !errors.Is(err, ErrDeadline) || time.Since(start) < 450*time.Millisecond {
		t.Fatalf("a quiet watch ended after %v with %v, want ErrDeadline at its deadline", time.Since(start), err)
	}
	if err := c.Watch(bg, "", false, &rev, nil); !errors.Is(err, ErrInvalid) {
		t.Fatalf("an empty session: %v", err)
	}
	m := dial(t, mecatlOnly(t, d.addr), nil)
	if err := m.Watch(bg, "", true, &rev, nil); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("a server without Watch: %v", err)
	}
}
