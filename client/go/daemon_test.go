package lease

// Helpers of the tests that run the real leased ($LEASED_BIN), over
// SQLite or, with LEASED_TEST_STORE=postgres, over the PostgreSQL
// database $LEASED_TEST_POSTGRES (tests/integration/with_postgres.py
// makes it). tests/clients/go_test.sh runs them; without LEASED_BIN they
// are skipped.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

const (
	shortTTL = 500 * time.Millisecond // for the cases that wait out an expiry
	// A fifth of a TTL beyond it, so that round trips cannot straddle it.
	expire  = shortTTL * 6 / 5
	liveTTL = 10 * time.Second // a loaded machine must not expire it
)

// syncBuffer is a daemon's log, written by exec's copying goroutine and
// read by the test.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

type daemon struct {
	t      *testing.T
	cmd    *exec.Cmd
	addr   string
	log    syncBuffer
	exited chan struct{}
	err    error // of Wait, once exited is closed
	once   sync.Once
}

func postgres(t *testing.T) (string, bool) {
	if os.Getenv("LEASED_TEST_STORE") != "postgres" {
		return "", false
	}
	conninfo := os.Getenv("LEASED_TEST_POSTGRES")
	if conninfo == "" {
		t.Fatal("LEASED_TEST_STORE=postgres without LEASED_TEST_POSTGRES (run through with_postgres.py)")
	}
	return conninfo, true
}

// The databases of this process's daemons over PostgreSQL, by TTL: the
// shared mode keeps one TTL per database, so the first TTL gets the
// database given and any other one a new database (psql, on the same
// server; in a conninfo the last dbname counts).
var databases = struct {
	sync.Mutex
	byTTL map[time.Duration]string
}{byTTL: map[time.Duration]string{}}

func databaseFor(t *testing.T, conninfo string, ttl time.Duration) string {
	databases.Lock()
	defer databases.Unlock()
	if db, ok := databases.byTTL[ttl]; ok {
		return db
	}
	db := conninfo
	if len(databases.byTTL) > 0 {
		name := fmt.Sprintf("leases_go_%d_%d", os.Getpid(), ttl.Milliseconds())
		out, err := exec.Command("psql", conninfo+" dbname=postgres", "-c",
			"CREATE DATABASE "+name).CombinedOutput()
		if err != nil {
			t.Fatalf("psql: CREATE DATABASE %s: %v\n%s", name, err, out)
		}
		db = conninfo + " dbname=" + name
	}
	databases.byTTL[ttl] = db
	return db
}

// startDaemon starts leased with a TTL and extra arguments, on a port of
// its choosing, and stops it when the test ends (checking it exits 0).
func startDaemon(t *testing.T, ttl time.Duration, args ...string) *daemon {
	t.Helper()
	bin := os.Getenv("LEASED_BIN")
	if bin == "" {
		t.Skip("LEASED_BIN is not set: tests/clients/go_test.sh runs this against leased")
	}
	argv := []string{"--listen", "127.0.0.1:0", "--data-dir", filepath.Join(t.TempDir(), "data"),
		"--ttl", fmt.Sprintf("%dms", ttl.Milliseconds())}
	if conninfo, ok := postgres(t); ok {
		argv = append(argv, "--postgres", databaseFor(t, conninfo, ttl))
	}
	d := &daemon{t: t, exited: make(chan struct{})}
	d.cmd = exec.Command(bin, append(argv, args...)...)
	d.cmd.Stdout = &d.log
	d.cmd.Stderr = &d.log
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		d.err = d.cmd.Wait()
		close(d.exited)
	}()
	t.Cleanup(func() { d.stop() })
	d.addr = d.waitLog(`msg=listening addr=(\S+)`)[1]
	return d
}

// waitLog waits (10 s at most) for a line of the log to match pattern;
// its submatches.
func (d *daemon) waitLog(pattern string) []string {
	d.t.Helper()
	re := regexp.MustCompile(pattern)
	end := time.Now().Add(10 * time.Second)
	for {
		if m := re.FindStringSubmatch(d.log.String()); m != nil {
			return m
		}
		select {
		case <-d.exited:
			d.t.Fatalf("leased exited (%v) before logging %q:\n%s", d.err, pattern, d.log.String())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(end) {
			d.t.Fatalf("no %q in leased's log:\n%s", pattern, d.log.String())
		}
	}
}

// stop stops leased with SIGTERM (going on first, if SIGSTOPped) and
// fails the test unless it exits 0 within 15 s. Once; later calls do
// nothing.
func (d *daemon) stop() {
	d.once.Do(func() {
		d.cmd.Process.Signal(syscall.SIGCONT)
		d.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-d.exited:
		case <-time.After(15 * time.Second):
			d.cmd.Process.Kill()
			<-d.exited
			d.t.Errorf("leased did not stop within 15 s of SIGTERM")
		}
		if d.err != nil {
			d.t.Errorf("leased exited: %v; its log:\n%s", d.err, d.log.String())
		}
	})
}

func dial(t *testing.T, targets string, opts *Options) *Client {
	t.Helper()
	c, err := Dial(targets, opts)
	if err != nil {
		t.Fatalf("Dial(%q): %v", targets, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

var sessions uint32

// newSession is a session id of its own for each call.
func newSession(tag string) string {
	return fmt.Sprintf("go-%d-%s-%d", os.Getpid(), tag, atomic.AddUint32(&sessions, 1))
}

var bg = context.Background()

func mustAcquire(t *testing.T, c *Client, session, owner string) Lease {
	t.Helper()
	l, err := c.Acquire(bg, session, owner)
	if err != nil {
		t.Fatalf("Acquire(%s, %s): %v", session, owner, err)
	}
	return l
}

func mustRenew(t *testing.T, c *Client, l Lease) Lease {
	t.Helper()
	r, err := c.Renew(bg, l)
	if err != nil {
		t.Fatalf("Renew(%+v): %v", l, err)
	}
	return r
}

func mustRelease(t *testing.T, c *Client, l Lease) {
	t.Helper()
	if err := c.Release(bg, l); err != nil {
		t.Fatalf("Release(%+v): %v", l, err)
	}
}

// wantKind fails unless err is of that kind.
func wantKind(t *testing.T, err, kind error, what string) {
	t.Helper()
	if kind == nil && err != nil || kind != nil && !errors.Is(err, kind) {
		t.Fatalf("%s: got %v, want %v", what, err, kind)
	}
}

// eventually waits (within limit) for cond, checking every 5 ms.
func eventually(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("not within %v: %s", limit, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
