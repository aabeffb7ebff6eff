package lease

// The client against fake servers in this process (no daemon): what it
// makes of statuses, headers and odd replies, what it sends, failover
// and deadlines, and the keeper's TTL rules.

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// rawCodec lets the fake server see and send bytes.
type rawCodec struct{}

func (rawCodec) Marshal(v interface{}) ([]byte, error) { return *v.(*[]byte), nil }
func (rawCodec) Unmarshal(b []byte, v interface{}) error {
	*v.(*[]byte) = append([]byte(nil), b...)
	return nil
}
func (rawCodec) String() string { return "proto" }

// fakeCall is what the fake server was asked.
type fakeCall struct {
	method string
	body   []byte
	md     metadata.MD
}

// fake answers each call with handle's reply, header and error.
type fake struct {
	addr   string
	calls  int32
	mu     sync.Mutex
	last   fakeCall
	handle func(ctx context.Context, c fakeCall) ([]byte, metadata.MD, error)
}

func startFake(t *testing.T, handle func(context.Context, fakeCall) ([]byte, metadata.MD, error)) *fake {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fake{addr: lis.Addr().String(), handle: handle}
	s := grpc.NewServer(grpc.CustomCodec(rawCodec{}),
		grpc.UnknownServiceHandler(func(_ interface{}, stream grpc.ServerStream) error {
			atomic.AddInt32(&f.calls, 1)
			method, _ := grpc.MethodFromServerStream(stream)
			var body []byte
			if err := stream.RecvMsg(&body); err != nil {
				return err
			}
			md, _ := metadata.FromIncomingContext(stream.Context())
			c := fakeCall{method: method, body: body, md: md}
			f.mu.Lock()
			f.last = c
			f.mu.Unlock()
			reply, header, err := f.handle(stream.Context(), c)
			if err != nil {
				return err
			}
			if header != nil {
				stream.SetHeader(header)
			}
			return stream.SendMsg(&reply)
		}))
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	return f
}

func (f *fake) lastCall() fakeCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.last
}

// granted is a LeaseResponse granting the lease of the request body (an
// AcquireRequest or a lease request) until ttl from now.
func granted(c fakeCall, ttl time.Duration) []byte {
	var w wireLease
	if strings.HasSuffix(c.method, "/Acquire") {
		w.decode(c.body) // AcquireRequest's fields 1 and 2 are a lease's
	} else {
		var r leaseResponse // {1 lease}, as RenewRequest
		r.decode(c.body)
		w = *r.lease
	}
	if w.token == 0 {
		w.token = 1
	}
	e := time.Now().Add(ttl)
	w.hasExpiry, w.seconds, w.nanos = true, e.Unix(), int32(e.Nanosecond())
	return (&leaseRequest{lease: w}).appendTo(nil)
}

func ttlMD(ms string) metadata.MD { return metadata.Pairs(ttlHeader, ms) }

func TestFakeStatusKinds(t *testing.T) {
	want := map[codes.Code]error{
		codes.Canceled: ErrUnavailable, codes.Unknown: ErrUnavailable,
		codes.InvalidArgument: ErrInvalid, codes.DeadlineExceeded: ErrDeadline,
		codes.NotFound: ErrUnavailable, codes.AlreadyExists: ErrUnavailable,
		codes.PermissionDenied: ErrDenied, codes.ResourceExhausted: ErrUnavailable,
		codes.FailedPrecondition: ErrHeld, codes.Aborted: ErrUnavailable,
		codes.OutOfRange: ErrUnavailable, codes.Unimplemented: ErrUnsupported,
		codes.Internal: ErrUnavailable, codes.Unavailable: ErrUnavailable,
		codes.DataLoss: ErrUnavailable, codes.Unauthenticated: ErrUnauthenticated,
	}
	var code int32
	f := startFake(t, func(context.Context, fakeCall) ([]byte, metadata.MD, error) {
		return nil, nil, status.Error(codes.Code(atomic.LoadInt32(&code)), "the reason")
	})
	c := dial(t, f.addr, &Options{Timeout: 300 * time.Millisecond})
	for k, kind := range want {
		atomic.StoreInt32(&code, int32(k))
		_, err := c.Acquire(bg, "s", "o")
		var e *Error
		if !errors.As(err, &e) || e.Code != k || e.Kind != kind || !errors.Is(err, kind) {
			t.Errorf("%v: got %#v, want kind %v", k, err, kind)
			continue
		}
		if s := err.Error(); !strings.Contains(s, "the reason") || !strings.Contains(s, codeName(k)) {
			t.Errorf("%v: %q says not the reason and the code", k, s)
		}
	}
}

func TestFakeTTLHeader(t *testing.T) {
	var header atomic.Value
	f := startFake(t, func(_ context.Context, c fakeCall) ([]byte, metadata.MD, error) {
		return granted(c, time.Minute), header.Load().(metadata.MD), nil
	})
	c := dial(t, f.addr, nil)
	for _, tc := range []struct {
		md   metadata.MD
		want time.Duration
	}{
		{ttlMD("1500"), 1500 * time.Millisecond},
		{ttlMD("1"), time.Millisecond},
		{ttlMD("999999999999"), 999999999999 * time.Millisecond},
		{ttlMD("1000000000000"), 0}, // 13 digits
		{ttlMD("0"), 0},
		{ttlMD("-5"), 0},
		{ttlMD("15s"), 0},
		{ttlMD(""), 0},
		{metadata.Pairs("other", "7"), 0},
		{metadata.Pairs(ttlHeader, "x", ttlHeader, "250"), 250 * time.Millisecond},
	} {
		header.Store(tc.md)
		l, err := c.Acquire(bg, "s", "o")
		if err != nil || l.TTL != tc.want {
			t.Errorf("%v: TTL %v, %v; want %v", tc.md, l.TTL, err, tc.want)
		}
		l, err = c.Renew(bg, l)
		if err != nil || l.TTL != tc.want {
			t.Errorf("%v: renewal's TTL %v, %v; want %v", tc.md, l.TTL, err, tc.want)
		}
	}
}

func TestFakeOddReplies(t *testing.T) {
	var reply atomic.Value
	f := startFake(t, func(context.Context, fakeCall) ([]byte, metadata.MD, error) {
		return reply.Load().([]byte), nil, nil
	})
	c := dial(t, f.addr, nil)
	long := wireLease{sessionID: strings.Repeat("s", MaxSessionID+1), owner: "o", token: 1, hasExpiry: true}
	for _, tc := range []struct {
		what  string
		reply []byte
		code  codes.Code
		msg   string
	}{
		{"no lease", nil, codes.OK, "reply without a lease"},
		{"no expiry", (&leaseRequest{lease: wireLease{sessionID: "s", owner: "o", token: 1}}).appendTo(nil),
			codes.OK, "reply without a lease"},
		{"over the limits", (&leaseRequest{lease: long}).appendTo(nil), codes.OK, "over the size limits"},
		{"malformed", []byte{0x0a, 0x05, 0x0a}, codes.Internal, ""},
	} {
		reply.Store(tc.reply)
		_, err := c.Acquire(bg, "s", "o")
		var e *Error
		if !errors.As(err, &e) || e.Kind != ErrUnavailable || e.Code != tc.code ||
			!strings.Contains(e.Message, tc.msg) {
			t.Errorf("%s: got %#v", tc.what, err)
		}
	}
	// Get: a reply without a lease is no lease.
	reply.Store([]byte(nil))
	if info, err := c.Get(bg, "s"); info != nil || err != nil {
		t.Errorf("Get of an empty reply: %+v, %v", info, err)
	}
}

func TestFakeWhatIsSent(t *testing.T) {
	var notFound int32
	f := startFake(t, func(_ context.Context, c fakeCall) ([]byte, metadata.MD, error) {
		switch {
		case strings.HasSuffix(c.method, "/Release"):
			return nil, nil, nil
		case strings.HasSuffix(c.method, "/Get") && atomic.LoadInt32(&notFound) == 1:
			return nil, nil, status.Error(codes.NotFound, "no lease")
		case strings.HasSuffix(c.method, "/Get"):
			w := wireLease{sessionID: "s", owner: "o", token: 4, hasExpiry: true, seconds: 1e9, live: true}
			return (&leaseRequest{lease: w}).appendTo(nil), nil, nil
		}
		return granted(c, time.Minute), nil, nil
	})
	c := dial(t, f.addr, &Options{Token: "tok-EN.~+/="})
	l, err := c.Acquire(bg, "sess", "own")
	if err != nil {
		t.Fatal(err)
	}
	got := f.lastCall()
	if got.method != "/mecatl.driver.v1.SessionLeaseService/Acquire" ||
		string(got.body) != "\x0a\x04sess\x12\x03own" {
		t.Fatalf("Acquire sent %s % x", got.method, got.body)
	}
	if a := got.md.Get("authorization"); len(a) != 1 || a[0] != "Bearer tok-EN.~+/=" {
		t.Fatalf("authorization %q", a)
	}
	for _, method := range []string{"Renew", "Release"} {
		if method == "Renew" {
			_, err = c.Renew(bg, l)
		} else {
			err = c.Release(bg, l)
		}
		got = f.lastCall()
		var r leaseResponse
		if err != nil || got.method != leaseService+method || r.decode(got.body) != nil || r.lease == nil ||
			*r.lease != toWire(l) || r.lease.seconds != l.Expiry.Unix() {
			t.Fatalf("%s: %v; sent %s %+v, want %+v", method, err, got.method, r.lease, toWire(l))
		}
	}
	info, err := c.Get(bg, "s")
	if err != nil || info == nil || *info != (Info{SessionID: "s", Owner: "o", Token: 4,
		Expiry: time.Unix(1e9, 0), Live: true}) {
		t.Fatalf("Get: %+v, %v", info, err)
	}
	if got = f.lastCall(); got.method != adminGet || string(got.body) != "\x0a\x01s" {
		t.Fatalf("Get sent %s % x", got.method, got.body)
	}
	atomic.StoreInt32(&notFound, 1)
	if info, err := c.Get(bg, "s"); info != nil || err != nil {
		t.Fatalf("Get NOT_FOUND: %+v, %v", info, err)
	}
}

// With several targets, a call goes on to the next while one answers
// UNAVAILABLE, and the client stays with the one that answered.
func TestFakeFailoverStaysWithTheOneThatAnswered(t *testing.T) {
	var aDown, bDown int32 = 1, 0
	answer := func(down *int32) func(context.Context, fakeCall) ([]byte, metadata.MD, error) {
		return func(_ context.Context, c fakeCall) ([]byte, metadata.MD, error) {
			if atomic.LoadInt32(down) == 1 {
				return nil, nil, status.Error(codes.Unavailable, "draining")
			}
			return granted(c, time.Minute), nil, nil
		}
	}
	a, b := startFake(t, answer(&aDown)), startFake(t, answer(&bDown))
	c := dial(t, a.addr+","+b.addr, nil)
	for i := 0; i < 3; i++ {
		if _, err := c.Acquire(bg, "s", "o"); err != nil {
			t.Fatal(err)
		}
	}
	if na, nb := atomic.LoadInt32(&a.calls), atomic.LoadInt32(&b.calls); na != 1 || nb != 3 {
		t.Fatalf("calls: a %d, b %d; want 1 and 3", na, nb)
	}
	atomic.StoreInt32(&aDown, 0)
	atomic.StoreInt32(&bDown, 1)
	for i := 0; i < 2; i++ {
		if _, err := c.Acquire(bg, "s", "o"); err != nil {
			t.Fatal(err)
		}
	}
	if na, nb := atomic.LoadInt32(&a.calls), atomic.LoadInt32(&b.calls); na != 3 || nb != 4 {
		t.Fatalf("calls: a %d, b %d; want 3 and 4", na, nb)
	}
}

// When every target is unavailable, rounds of retries, at most ten a
// second, until the timeout; then the first round's reason.
func TestFakeAllUnavailable(t *testing.T) {
	f := startFake(t, func(context.Context, fakeCall) ([]byte, metadata.MD, error) {
		return nil, nil, status.Error(codes.Unavailable, "storage failing")
	})
	c := dial(t, f.addr, &Options{Timeout: 550 * time.Millisecond})
	start := time.Now()
	_, err := c.Acquire(bg, "s", "o")
	took := time.Since(start)
	var e *Error
	if !errors.As(err, &e) || e.Kind != ErrUnavailable || e.Message != "storage failing" {
		t.Fatalf("got %#v", err)
	}
	if n := atomic.LoadInt32(&f.calls); took < 500*time.Millisecond || n < 3 || n > 8 {
		t.Fatalf("%d calls in %v; want about 6 in 550 ms", n, took)
	}
}

// A call ends at the client's timeout or the context's deadline, the
// sooner; ErrDeadline then. A cancelled context ends it too.
func TestFakeDeadline(t *testing.T) {
	f := startFake(t, func(ctx context.Context, _ fakeCall) ([]byte, metadata.MD, error) {
		<-ctx.Done()
		return nil, nil, status.FromContextError(ctx.Err()).Err()
	})
	c := dial(t, f.addr, &Options{Timeout: 300 * time.Millisecond})
	start := time.Now()
	_, err := c.Acquire(bg, "s", "o")
	if took := time.Since(start); !errors.Is(err, ErrDeadline) || took < 250*time.Millisecond || took > 2*time.Second {
		t.Fatalf("timeout: %v after %v", err, took)
	}
	c = dial(t, f.addr, nil)
	ctx, cancel := context.WithTimeout(bg, 200*time.Millisecond)
	defer cancel()
	start = time.Now()
	_, err = c.Acquire(ctx, "s", "o")
	if took := time.Since(start); !errors.Is(err, ErrDeadline) || took > 2*time.Second {
		t.Fatalf("context deadline: %v after %v", err, took)
	}
	ctx, cancel = context.WithCancel(bg)
	time.AfterFunc(100*time.Millisecond, cancel)
	start = time.Now()
	_, err = c.Acquire(ctx, "s", "o")
	var e *Error
	if took := time.Since(start); !errors.As(err, &e) || e.Code != codes.Canceled || took > 2*time.Second {
		t.Fatalf("cancelled: %v after %v", err, took)
	}
}

// A target that accepts connections and never speaks gets its share of
// the timeout only: the next one answers in time.
func TestFakeSilentTargetGetsItsShare(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	var held []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			conn, err := lis.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, conn)
			mu.Unlock()
		}
	}()
	defer func() {
		mu.Lock()
		for _, c := range held {
			c.Close()
		}
		mu.Unlock()
	}()
	f := startFake(t, func(_ context.Context, c fakeCall) ([]byte, metadata.MD, error) {
		return granted(c, time.Minute), nil, nil
	})
	c := dial(t, lis.Addr().String()+","+f.addr, &Options{Timeout: 2 * time.Second})
	start := time.Now()
	_, err = c.Acquire(bg, "s", "o")
	if took := time.Since(start); err != nil || took > 1900*time.Millisecond {
		t.Fatalf("%v after %v", err, took)
	}
}

// The keeper's TTL: the service's, or a shorter one of the options; from
// the options or the expiry when the service says none; a longer one,
// or a margin not under the TTL, refused (and the lease released).
func TestFakeKeeperTTL(t *testing.T) {
	var header atomic.Value
	var releases int32
	f := startFake(t, func(_ context.Context, c fakeCall) ([]byte, metadata.MD, error) {
		if strings.HasSuffix(c.method, "/Release") {
			atomic.AddInt32(&releases, 1)
			return nil, nil, nil
		}
		return granted(c, 10*time.Second), header.Load().(metadata.MD), nil
	})
	c := dial(t, f.addr, nil)
	for _, tc := range []struct {
		header metadata.MD
		opts   KeeperOptions
		ttl    time.Duration // trusted; 0: refused
	}{
		{ttlMD("10000"), KeeperOptions{}, 10 * time.Second},
		{ttlMD("10000"), KeeperOptions{TTL: 4 * time.Second}, 4 * time.Second},
		{ttlMD("10000"), KeeperOptions{TTL: 11 * time.Second}, 0},
		{ttlMD("10000"), KeeperOptions{Margin: 10 * time.Second}, 0},
		{metadata.MD{}, KeeperOptions{TTL: 3 * time.Second}, 3 * time.Second},
		{metadata.MD{}, KeeperOptions{}, 10 * time.Second}, // from the expiry
	} {
		header.Store(tc.header)
		released := atomic.LoadInt32(&releases)
		start := time.Now()
		k, err := Keep(bg, c, "s", "o", &tc.opts)
		if tc.ttl == 0 {
			if !errors.Is(err, ErrInvalid) || atomic.LoadInt32(&releases) != released+1 {
				t.Errorf("%+v: %v, want ErrInvalid and a release", tc.opts, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%+v: %v", tc.opts, err)
		}
		// deadline = send time + TTL - a tenth of it
		d := k.Deadline().Sub(start)
		if want := tc.ttl - tc.ttl/10; d < want-100*time.Millisecond || d > want+10*time.Millisecond {
			t.Errorf("%+v: deadline in %v, want %v", tc.opts, d, want)
		}
		if !k.Valid() || k.Err() != nil {
			t.Errorf("%+v: not valid: %v", tc.opts, k.Err())
		}
		if err := k.Stop(); err != nil || k.Valid() || !errors.Is(k.Err(), ErrStopped) ||
			atomic.LoadInt32(&releases) != released+1 {
			t.Errorf("%+v: Stop: %v", tc.opts, err)
		}
		select {
		case <-k.Context().Done():
		default:
			t.Errorf("%+v: Context not done after Stop", tc.opts)
		}
	}
	if _, err := Keep(bg, c, "s", "o", &KeeperOptions{TTL: -1}); !errors.Is(err, ErrInvalid) {
		t.Errorf("a negative TTL: %v", err)
	}
}

// A blocked renewal cannot make the keeper late: lost at its deadline,
// OnLost once with the last failure, before the expiry it was granted.
func TestFakeKeeperLostAtTheDeadline(t *testing.T) {
	var block int32
	f := startFake(t, func(ctx context.Context, c fakeCall) ([]byte, metadata.MD, error) {
		if strings.HasSuffix(c.method, "/Renew") && atomic.LoadInt32(&block) == 1 {
			<-ctx.Done()
			return nil, nil, status.FromContextError(ctx.Err()).Err()
		}
		return granted(c, 600*time.Millisecond), ttlMD("600"), nil
	})
	c := dial(t, f.addr, nil)
	lost := make(chan error, 2)
	var troubles int32
	var lostLease Lease
	k, err := Keep(bg, c, "s", "o", &KeeperOptions{
		OnLost:    func(l Lease, err error) { lostLease = l; lost <- err },
		OnTrouble: func(Lease, error) { atomic.AddInt32(&troubles, 1) },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Stop()
	first := k.Deadline()
	eventually(t, 2*time.Second, "a renewal", func() bool { return k.Deadline().After(first) })
	atomic.StoreInt32(&block, 1)
	var why error
	select {
	case why = <-lost:
	case <-time.After(3 * time.Second):
		t.Fatal("not lost within 3 s")
	}
	at := time.Now()
	if k.Valid() || !errors.Is(why, ErrDeadline) || k.Err() != why {
		t.Fatalf("lost with %v; valid %v, Err %v", why, k.Valid(), k.Err())
	}
	if !at.Before(lostLease.Expiry) || at.Before(k.Deadline()) {
		t.Fatalf("lost at %v: deadline %v, expiry %v", at, k.Deadline(), lostLease.Expiry)
	}
	if atomic.LoadInt32(&troubles) < 1 {
		t.Fatal("no OnTrouble before the loss")
	}
	select {
	case <-k.Context().Done():
	default:
		t.Fatal("Context not done")
	}
	if err := k.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	select {
	case err := <-lost:
		t.Fatalf("OnLost again: %v", err)
	default:
	}
}
