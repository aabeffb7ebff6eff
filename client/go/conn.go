package lease

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Targets, TLS, token and failover, as liblease's client/conn.c.

const (
	maxTargets     = 8
	maxTargetLen   = 511
	maxTokenLen    = 4096
	reconnectMin   = 100 * time.Millisecond
	reconnectMax   = time.Second
	connectMin     = time.Second            // the least a connection attempt gets
	retryPause     = 100 * time.Millisecond // the least a round of retries takes
	waitSlice      = 250 * time.Millisecond // waiting for one target to connect
	defaultTimeout = 5 * time.Second
)

// conn is one gRPC channel per target, and the target that answered
// last.
type conn struct {
	channels []*grpc.ClientConn
	current  uint32 // atomic: an index into channels
	timeout  time.Duration
	auth     string // "Bearer TOKEN", or ""
}

// splitTarget checks one target as liblease does (core/addr.c): "unix:"
// and a path, or HOST:PORT with a decimal port, HOST in brackets for
// IPv6. plaintextOK says whether it is loopback or a unix socket.
func splitTarget(t string) (plaintextOK bool, err error) {
	if strings.HasPrefix(t, "unix:") {
		if t == "unix:" {
			return false, fmt.Errorf("target %s: no socket path", t)
		}
		return true, nil
	}
	colon := strings.LastIndexByte(t, ':')
	if colon <= 0 || colon == len(t)-1 {
		return false, fmt.Errorf("target %s: want HOST:PORT or unix:/PATH", t)
	}
	host, port := t[:colon], t[colon+1:]
	if strings.HasPrefix(host, "[") {
		if !strings.HasSuffix(host, "]") || len(host) < 3 {
			return false, fmt.Errorf("target %s: bad IPv6 address", t)
		}
		host = host[1 : len(host)-1]
	}
	if p, err := strconv.ParseUint(port, 10, 16); err != nil || p > 65535 {
		return false, fmt.Errorf("target %s: bad port", t)
	}
	return isLoopback(host), nil
}

// isLoopback: localhost, 127.0.0.0/8 or ::1 (not an IPv4-mapped form).
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return false
	}
	if strings.Contains(host, ":") {
		return ip.Equal(net.IPv6loopback)
	}
	return ip.To4()[0] == 127
}

func tokenOK(t string) bool {
	if t == "" || len(t) > maxTokenLen {
		return false
	}
	for _, ch := range []byte(t) {
		if !('A' <= ch && ch <= 'Z' || 'a' <= ch && ch <= 'z' ||
			'0' <= ch && ch <= '9' || strings.IndexByte("-._~+/=", ch) >= 0) {
			return false
		}
	}
	return true
}

// tlsConfig is the TLS the options ask for: nil for plaintext.
func tlsConfig(o *Options) (*tls.Config, error) {
	if o.CAFile == "" {
		if o.CertFile != "" || o.KeyFile != "" {
			return nil, fail(ErrInvalid, "a client certificate needs CAFile (TLS)")
		}
		return nil, nil
	}
	if (o.CertFile == "") != (o.KeyFile == "") {
		return nil, fail(ErrInvalid, "CertFile and KeyFile go together")
	}
	pem, err := os.ReadFile(o.CAFile)
	if err != nil {
		return nil, fail(ErrInvalid, fmt.Sprintf("cannot read %s: %v", o.CAFile, err))
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fail(ErrInvalid, fmt.Sprintf("%s: no PEM certificate", o.CAFile))
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool, ServerName: o.ServerName}
	if o.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(o.CertFile, o.KeyFile)
		if err != nil {
			return nil, fail(ErrInvalid, fmt.Sprintf("client certificate: %v", err))
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// dialTarget dials one checked target ourselves, so that "unix:/PATH"
// and HOST:PORT mean what they mean to liblease whatever gRPC-Go's own
// resolvers do.
func dialTarget(ctx context.Context, t string) (net.Conn, error) {
	var d net.Dialer
	if path := strings.TrimPrefix(t, "unix:"); path != t {
		return d.DialContext(ctx, "unix", path)
	}
	return d.DialContext(ctx, "tcp", t)
}

func openConn(targets string, o *Options) (*conn, error) {
	c := &conn{timeout: o.Timeout}
	if c.timeout <= 0 {
		c.timeout = defaultTimeout
	}
	if o.Token != "" {
		if !tokenOK(o.Token) {
			return nil, fail(ErrInvalid, fmt.Sprintf(
				"token: 1..%d characters of A-Z a-z 0-9 -._~+/=", maxTokenLen))
		}
		c.auth = "Bearer " + o.Token
	}
	cfg, err := tlsConfig(o)
	if err != nil {
		return nil, err
	}
	list := strings.Split(targets, ",")
	if len(list) > maxTargets {
		return nil, fail(ErrInvalid, fmt.Sprintf("target %s: more than %d addresses", targets, maxTargets))
	}
	for _, t := range list { // all checked before any channel is made
		if t == "" || len(t) > maxTargetLen {
			return nil, fail(ErrInvalid, fmt.Sprintf("target %s: an empty or too long address", targets))
		}
		plaintextOK, err := splitTarget(t)
		if err != nil {
			return nil, fail(ErrInvalid, err.Error())
		}
		if !plaintextOK && cfg == nil {
			return nil, fail(ErrInvalid, fmt.Sprintf("target %s: not a loopback address: "+
				"plaintext is allowed only on loopback or a unix socket (give CAFile for TLS)", t))
		}
	}
	connect := connectMin
	if c.timeout > connect {
		connect = c.timeout
	}
	for _, t := range list {
		opts := []grpc.DialOption{
			grpc.WithContextDialer(dialTarget),
			// Reconnect soon after a server comes back (a restart takes
			// about a second, far less than a TTL), and give up on an
			// attempt after a call's timeout: a silent host then fails
			// calls, and the next target is tried.
			grpc.WithConnectParams(grpc.ConnectParams{
				Backoff: backoff.Config{BaseDelay: reconnectMin, Multiplier: 1.6,
					Jitter: 0.2, MaxDelay: reconnectMax},
				MinConnectTimeout: connect,
			}),
		}
		if cfg != nil {
			opts = append(opts, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
		} else {
			opts = append(opts, grpc.WithInsecure())
		}
		if strings.HasPrefix(t, "unix:") {
			opts = append(opts, grpc.WithAuthority("localhost"))
		}
		// passthrough: the target goes to dialTarget unchanged.
		ch, err := grpc.Dial("passthrough:///"+t, opts...)
		if err != nil {
			c.close()
			return nil, fail(ErrInvalid, fmt.Sprintf("target %s: %v", t, err))
		}
		c.channels = append(c.channels, ch)
	}
	return c, nil
}

func (c *conn) close() error {
	for _, ch := range c.channels {
		ch.Close()
	}
	return nil
}

// once is one call on channel t until end.
func (c *conn) once(ctx context.Context, t int, end time.Time, waitForReady bool,
	method string, req, resp interface{}, header *metadata.MD) error {
	ctx, cancel := context.WithDeadline(ctx, end)
	defer cancel()
	if c.auth != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", c.auth)
	}
	return c.channels[t].Invoke(ctx, method, req, resp, grpc.ForceCodec(codec{}),
		grpc.WaitForReady(waitForReady), grpc.Header(header))
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// call makes one unary call within the client's timeout, or until ctx's
// deadline if sooner, as liblease's conn_call: while targets answer
// UNAVAILABLE (or, not connected, nothing within their share of the
// timeout), the next one; when all did, rounds of waiting a little for
// each to connect, at most ten a second, until the end, then UNAVAILABLE
// with the first round's reason. The target that answered is kept for
// the next call. The server's initial metadata goes into header.
func (c *conn) call(ctx context.Context, method string, req, resp interface{}, header *metadata.MD) error {
	end := time.Now().Add(c.timeout)
	if d, ok := ctx.Deadline(); ok {
		end = earlier(end, d)
	}
	n := len(c.channels)
	first := int(atomic.LoadUint32(&c.current))
	answered := func(t int, err error) error {
		if t != first {
			atomic.StoreUint32(&c.current, uint32(t))
		}
		return err
	}
	// First every target in turn, failing fast. With several, one not
	// connected yet gets its share of the time only: a host that drops
	// packets never answers (had the call got through late, repeating it
	// elsewhere is safe: leased's calls are).
	var firstErr error
	for k := 0; k < n; k++ {
		t := (first + k) % n
		share := n > 1 && c.channels[t].GetState() != connectivity.Ready
		slice := c.timeout
		if share {
			slice /= time.Duration(n)
		}
		err := c.once(ctx, t, earlier(end, time.Now().Add(slice)), false, method, req, resp, header)
		if ctx.Err() == context.Canceled {
			return err
		}
		code := status.Code(err)
		if code != codes.Unavailable && !(share && code == codes.DeadlineExceeded) {
			return answered(t, err)
		}
		firstErr = err
	}
	// All unavailable: until the end, in turn, wait a while for each to
	// connect (a restarting server takes about a second). A round takes
	// retryPause at least, so that servers answering UNAVAILABLE at once
	// (storage failing, draining) are not asked as fast as they answer.
	for round := time.Now(); round.Before(end); round = pauseUntil(ctx, earlier(round.Add(retryPause), end)) {
		for k := 0; k < n && time.Now().Before(end); k++ {
			t := (first + k) % n
			err := c.once(ctx, t, earlier(end, time.Now().Add(waitSlice)), true, method, req, resp, header)
			if ctx.Err() == context.Canceled {
				return err
			}
			if code := status.Code(err); code != codes.Unavailable && code != codes.DeadlineExceeded {
				return answered(t, err)
			}
		}
		if ctx.Err() == context.Canceled { // while pausing
			return status.FromContextError(ctx.Err()).Err()
		}
	}
	return status.Error(codes.Unavailable, status.Convert(firstErr).Message())
}

// callLong makes one unary call that may last until ctx's deadline (none:
// no end), past the client's timeout: a call the server answers when
// something happens (leased's Wait), as liblease's conn_call_long. A
// target that answers UNAVAILABLE hands over to the next; when all did,
// rounds at most ten a second until the end, then UNAVAILABLE with the
// first reason.
func (c *conn) callLong(ctx context.Context, method string, req, resp interface{}, header *metadata.MD) error {
	end := deadlineOf(ctx)
	n := len(c.channels)
	first := int(atomic.LoadUint32(&c.current))
	var firstErr error
	for round := time.Now(); ; round = pauseUntil(ctx, earlier(round.Add(retryPause), end)) {
		for k := 0; k < n; k++ {
			t := (first + k) % n
			err := c.once(ctx, t, end, false, method, req, resp, header)
			if status.Code(err) != codes.Unavailable {
				if t != first && err == nil {
					atomic.StoreUint32(&c.current, uint32(t))
				}
				return err
			}
			if firstErr == nil {
				firstErr = err
			}
		}
		if ctx.Err() != nil {
			return status.FromContextError(ctx.Err()).Err()
		}
		if !time.Now().Before(end) {
			return status.Error(codes.Unavailable, status.Convert(firstErr).Message())
		}
	}
}

// pauseUntil sleeps until t, or until ctx ends; it returns the time then.
func pauseUntil(ctx context.Context, t time.Time) time.Time {
	if d := time.Until(t); d > 0 {
		timer := time.NewTimer(d)
		select {
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
		}
	}
	return time.Now()
}
