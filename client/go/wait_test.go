package lease

// Wait against the real leased, in its line (either store), and against
// a server of Mecatl's contract alone, asking again.

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// waitWhileHeld starts owner-b's Wait for id, held by a, and checks that
// it is still waiting 300 ms later (its deadline is 30 s away); then a is
// released, and the Wait's grant must follow, with a greater token.
func waitWhileHeld(t *testing.T, c *Client, id string, a Lease) Lease {
	t.Helper()
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
	return r.l
}

func TestWaitGrantedWhenTheHolderReleases(t *testing.T) {
	d := startDaemon(t, 10*time.Second)
	c := dial(t, d.addr, nil)
	id := newSession("wait")
	b := waitWhileHeld(t, c, id, mustAcquire(t, c, id, "owner-a"))
	// The holder's own Wait and a free session's are answered at once.
	if l, err := c.Wait(bg, id, "owner-b"); err != nil || l.Token != b.Token {
		t.Fatalf("the holder's Wait: %+v, %v", l, err)
	}
}

func TestWaitEndsHeldAtItsDeadline(t *testing.T) {
	d := startDaemon(t, 10*time.Second)
	c := dial(t, d.addr, nil)
	id := newSession("waitheld")
	mustAcquire(t, c, id, "owner-a")
	start := time.Now() // as in TestWatchErrors
	ctx, cancel := context.WithTimeout(bg, 500*time.Millisecond)
	defer cancel()
	_, err := c.Wait(ctx, id, "owner-b")
	if !errors.Is(err, ErrHeld) || time.Since(start) < 450*time.Millisecond {
		t.Fatalf("Wait ended after %v with %v, want ErrHeld at its deadline", time.Since(start), err)
	}
	if _, err := c.Wait(bg, id, ""); !errors.Is(err, ErrInvalid) {
		t.Fatalf("an empty owner: %v", err)
	}
}

// mecatlOnly starts tests/integration/mecatl_only.py ($MECATL_ONLY) in
// front of target: a server of Mecatl's contract alone, which answers
// Wait UNIMPLEMENTED. Its address.
func mecatlOnly(t *testing.T, target string) string {
	t.Helper()
	script := os.Getenv("MECATL_ONLY")
	if script == "" {
		t.Fatal("MECATL_ONLY is not set: run through meson test")
	}
	cmd := exec.Command("/usr/bin/python3", script, target)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close() // it stops once its standard input closes
		cmd.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	fields := strings.Fields(line)
	if err != nil || len(fields) != 2 || fields[0] != "listening" {
		t.Fatalf("mecatl_only.py said %q (%v)", line, err)
	}
	return fields[1]
}

func TestWaitAsksAgainWhereWaitIsNotServed(t *testing.T) {
	d := startDaemon(t, 10*time.Second)
	c := dial(t, mecatlOnly(t, d.addr), nil)
	id := newSession("waitpoll")
	waitWhileHeld(t, c, id, mustAcquire(t, c, id, "owner-a"))
}
