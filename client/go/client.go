package lease

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
)

// The limits of session ids and owners, in bytes of UTF-8.
const (
	MaxSessionID = 512
	MaxOwner     = 256
)

const (
	leaseService = "/mecatl.driver.v1.SessionLeaseService/"
	adminGet     = "/leased.admin.v1.Admin/Get"
	leasesWait   = "/leased.v1.Leases/Wait"
	ttlHeader    = "leased-ttl-ms"
	// Wait where the server has no Wait: Acquire this often.
	waitPoll = 250 * time.Millisecond
)

// Lease is a granted lease: a plain value, copy it freely.
type Lease struct {
	SessionID string
	Owner     string
	// The fencing token: >= 1, rises on every change of owner.
	Token uint64
	// The service's wall clock.
	Expiry time.Time
	// The lifetime the service gave this grant, counted from when it
	// decided it (after the call was sent); 0 when it did not say (a
	// server of Mecatl's protocol other than leased). Unlike Expiry it
	// needs no agreement of clocks: the lease lasts at least until the
	// call's send time plus TTL on the caller's own clock (less
	// MarginMin(TTL) for the clocks' rates).
	TTL time.Duration
}

// Info is a session's lease as the admin service has it (Get).
type Info struct {
	SessionID string
	Owner     string
	Token     uint64
	Expiry    time.Time
	// Held and not expired (or still in leased's restart quarantine).
	Live bool
}

// Options of Dial; the zero value (or nil) is plaintext with a 5 s
// timeout.
type Options struct {
	// The deadline of each call; 0 means 5 s. A call's context may end
	// it sooner. On expiry a call fails with ErrDeadline (outcome
	// unknown).
	Timeout time.Duration
	// TLS (1.2+): a PEM file of the CA certificates that signed the
	// server's; "" for plaintext, which only loopback and unix socket
	// targets may use.
	CAFile string
	// A client certificate and its key (PEM files), for a server that
	// asks for one (mutual TLS): both or neither, with CAFile.
	CertFile, KeyFile string
	// The name to check the server's certificate against, when it is not
	// the target's host.
	ServerName string
	// A bearer token sent with every call (authorization: Bearer TOKEN).
	// Characters as in RFC 6750: A-Z a-z 0-9 -._~+/=
	Token string
}

// Client talks to a leased (or any server of the
// mecatl.driver.v1.SessionLeaseService protocol). Safe for use by any
// number of goroutines at once.
type Client struct {
	conn *conn
}

// Dial opens a client to the lease service at targets: "HOST:PORT" or
// "unix:/PATH", or several separated by commas ("a:7443,b:7443"): a call
// that finds one unavailable (not reachable, draining), or not connected
// and silent for its share of the timeout, is tried on the next, and the
// client stays with the one that answered; leased's calls are safe to
// repeat. Plaintext (no CAFile) only to loopback (127.0.0.0/8, [::1],
// localhost) or unix sockets: any other host is refused with ErrInvalid.
// Dial does not wait for a connection: an unreachable server shows as
// ErrUnavailable (or ErrDeadline) on the first call.
func Dial(targets string, opts *Options) (*Client, error) {
	if opts == nil {
		opts = &Options{}
	}
	c, err := openConn(targets, opts)
	if err != nil {
		return nil, err
	}
	return &Client{conn: c}, nil
}

// Close closes the client's connections.
func (c *Client) Close() error {
	return c.conn.close()
}

// Acquire takes session for owner. A takeover gets a token greater than
// any the session had; the same owner re-acquiring a live lease keeps
// its token and gets a later expiry. ErrHeld: another owner holds it.
func (c *Client) Acquire(ctx context.Context, session, owner string) (Lease, error) {
	if err := checkString("session id", session, MaxSessionID); err != nil {
		return Lease{}, err
	}
	if err := checkString("owner", owner, MaxOwner); err != nil {
		return Lease{}, err
	}
	return c.grant(ctx, "Acquire", &acquireRequest{sessionID: session, owner: owner})
}

// Wait is Acquire that waits while another owner holds the lease, until
// ctx's deadline (none: no end; ctx cancelled: its error), then ErrHeld.
// Against leased the call waits in the session's line
// (leased.v1.Leases/Wait: first come first served, granted the moment
// the lease ends); against a server without it, Acquire is tried every
// 250 ms. A wait that ends at the deadline is settled by one more Acquire
// (a grant made as the call ended is never left unknown). As liblease's
// lease_wait.
func (c *Client) Wait(ctx context.Context, session, owner string) (Lease, error) {
	if err := checkString("session id", session, MaxSessionID); err != nil {
		return Lease{}, err
	}
	if err := checkString("owner", owner, MaxOwner); err != nil {
		return Lease{}, err
	}
	req := &acquireRequest{sessionID: session, owner: owner}
	var resp leaseResponse
	var md metadata.MD
	err := fromCall(c.conn.callLong(ctx, leasesWait, req, &resp, &md))
	switch {
	case err == nil:
		return leaseOf(&resp, md)
	case errors.Is(err, ErrUnsupported):
		for {
			l, err := c.Acquire(ctx, session, owner)
			if !errors.Is(err, ErrHeld) || !pauseUntil(ctx, time.Now().Add(waitPoll)).Before(deadlineOf(ctx)) {
				return l, err
			}
		}
	case ctx.Err() != context.Canceled && !deadlineOf(ctx).Equal(never) &&
		(errors.Is(err, ErrDeadline) || errors.Is(err, ErrUnavailable)):
		// At ctx's deadline (the call's own timer may fire a moment
		// before ctx's): neither comes sooner.
		return c.Acquire(context.Background(), session, owner)
	}
	return Lease{}, err
}

// never is a deadline that never comes.
var never = time.Unix(1<<62, 0)

// deadlineOf is ctx's deadline, or never.
func deadlineOf(ctx context.Context) time.Time {
	if d, ok := ctx.Deadline(); ok {
		return d
	}
	return never
}

// Renew extends l (same owner and token): the result has the same token
// and a strictly later expiry; this also reclaims an expired lease
// nobody took over. ErrHeld: ownership is lost.
func (c *Client) Renew(ctx context.Context, l Lease) (Lease, error) {
	if err := checkLease(l); err != nil {
		return Lease{}, err
	}
	return c.grant(ctx, "Renew", &leaseRequest{lease: toWire(l)})
}

// Release frees l if its owner and token still match; otherwise it does
// nothing and still succeeds (release is idempotent).
func (c *Client) Release(ctx context.Context, l Lease) error {
	if err := checkLease(l); err != nil {
		return err
	}
	var md metadata.MD
	return fromCall(c.conn.call(ctx, leaseService+"Release", &leaseRequest{lease: toWire(l)},
		&emptyResponse{}, &md))
}

// Get asks leased's admin service for session's lease, live or expired:
// nil (and no error) when it has none (never held, released, or
// collected).
func (c *Client) Get(ctx context.Context, session string) (*Info, error) {
	if err := checkString("session id", session, MaxSessionID); err != nil {
		return nil, err
	}
	var resp leaseResponse
	var md metadata.MD
	err := fromCall(c.conn.call(ctx, adminGet, &acquireRequest{sessionID: session}, &resp, &md))
	if e, ok := err.(*Error); ok && e.Code == codes.NotFound {
		return nil, nil
	}
	if err != nil || resp.lease == nil {
		return nil, err
	}
	w := resp.lease
	return &Info{SessionID: w.sessionID, Owner: w.owner, Token: w.token,
		Expiry: expiryOf(w), Live: w.live}, nil
}

// grant makes an Acquire or Renew call and reads the lease it grants.
func (c *Client) grant(ctx context.Context, method string, req request) (Lease, error) {
	var resp leaseResponse
	var md metadata.MD
	if err := fromCall(c.conn.call(ctx, leaseService+method, req, &resp, &md)); err != nil {
		return Lease{}, err
	}
	return leaseOf(&resp, md)
}

// leaseOf reads the lease a reply grants, with the TTL said beside it.
func leaseOf(resp *leaseResponse, md metadata.MD) (Lease, error) {
	w := resp.lease
	if w == nil || !w.hasExpiry {
		return Lease{}, fail(ErrUnavailable, "reply without a lease")
	}
	if len(w.sessionID) > MaxSessionID || len(w.owner) > MaxOwner {
		return Lease{}, fail(ErrUnavailable, "reply lease over the size limits")
	}
	return Lease{SessionID: w.sessionID, Owner: w.owner, Token: w.token,
		Expiry: expiryOf(w), TTL: saidTTL(md)}, nil
}

func expiryOf(w *wireLease) time.Time {
	if !w.hasExpiry {
		return time.Time{}
	}
	return time.Unix(w.seconds, int64(w.nanos))
}

func toWire(l Lease) wireLease {
	w := wireLease{sessionID: l.SessionID, owner: l.Owner, token: l.Token}
	if !l.Expiry.IsZero() {
		w.hasExpiry = true
		w.seconds = l.Expiry.Unix()
		w.nanos = int32(l.Expiry.Nanosecond())
	}
	return w
}

// saidTTL is the TTL leased says with each grant: leased-ttl-ms, 1 to
// 12 decimal digits, not 0; 0 when absent or invalid.
func saidTTL(md metadata.MD) time.Duration {
	for _, v := range md.Get(ttlHeader) {
		if len(v) == 0 || len(v) > 12 || strings.Trim(v, "0123456789") != "" {
			continue
		}
		var ms int64
		for _, ch := range v {
			ms = ms*10 + int64(ch-'0')
		}
		if ms > 0 {
			return time.Duration(ms) * time.Millisecond
		}
	}
	return 0
}

// checkString applies liblease's rules for ids and owners: 1..max bytes
// of valid UTF-8, no NUL.
func checkString(what, s string, max int) error {
	why := ""
	switch {
	case s == "":
		why = "empty"
	case len(s) > max:
		why = fmt.Sprintf("longer than the limit of %d bytes", max)
	case strings.IndexByte(s, 0) >= 0:
		why = "contains a NUL byte"
	case !utf8.ValidString(s):
		why = "not valid UTF-8"
	default:
		return nil
	}
	return fail(ErrInvalid, what+": "+why)
}

func checkLease(l Lease) error {
	if err := checkString("session id", l.SessionID, MaxSessionID); err != nil {
		return err
	}
	return checkString("owner", l.Owner, MaxOwner)
}

// MarginMin is the least a holder takes off its lease's TTL to get its
// local deadline: 1 % of the TTL for the rates of two hosts' clocks, and
// 20 ms for a holder that wakes a little late on a loaded machine.
func MarginMin(ttl time.Duration) time.Duration {
	return ttl/100 + 20*time.Millisecond
}
