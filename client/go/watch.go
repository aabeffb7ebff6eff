package lease

// Watch: the changes of a session's lease, or of every session under a
// prefix, as leased tells them (leased.v1.Leases/Watch), with the
// failover of liblease's lease_watch (client/lease.h).

import (
	"context"
	"errors"
	"io"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
)

const leasesWatch = "/leased.v1.Leases/Watch"

// EventKind says what a change did.
type EventKind int

// The kinds of change; renewals are not changes.
const (
	Granted  EventKind = 1 // a new holder, with a new token
	Released EventKind = 2 // its holder let go
	Expired  EventKind = 3 // it ran out without a renewal
	Revoked  EventKind = 4 // an operator ended it
)

func (k EventKind) String() string {
	switch k {
	case Granted:
		return "granted"
	case Released:
		return "released"
	case Expired:
		return "expired"
	case Revoked:
		return "revoked"
	}
	return "unknown"
}

// Event is a change of a lease.
type Event struct {
	// Rises with every change the service stores.
	Revision uint64
	Kind     EventKind
	// Granted: the new lease (its Expiry as granted); the others: the
	// lease that ended. TTL is 0.
	Lease Lease
}

// Watch calls fn for each change of session's lease, or, when prefix is
// true, of the lease of every session whose id starts with session (""
// then: every session), in the order of their revisions, each once the
// service stored it; on the calling goroutine, from the first change
// after *revision (0: from now on). *revision follows the stream: the
// last revision it covered, changes of other sessions included, so a
// later Watch from it misses nothing and repeats nothing. It lasts until
// fn returns false (then nil), or until ctx ends (ErrDeadline at its
// deadline). A service that goes away or drains is watched again at the
// next target (or the same one, back) from *revision, until then.
// ErrGone: what followed *revision is no longer kept (leased keeps its
// last --watch-history changes): read the leases again and watch from
// 0. ErrUnsupported from a service without Watch. As liblease's
// lease_watch.
func (c *Client) Watch(ctx context.Context, session string, prefix bool, revision *uint64, fn func(Event) bool) error {
	req := &watchRequest{after: *revision}
	if prefix {
		req.prefix = session
		if len(session) > MaxSessionID {
			return fail(ErrInvalid, "prefix longer than the limit")
		}
	} else {
		if err := checkString("session id", session, MaxSessionID); err != nil {
			return err
		}
		req.sessionID = session
	}
	onMsg := func(m *watchResponse) (bool, error) {
		for _, e := range m.events {
			if e.lease == nil || !e.lease.hasExpiry || e.kind < uint64(Granted) || e.kind > uint64(Revoked) ||
				len(e.lease.sessionID) > MaxSessionID || len(e.lease.owner) > MaxOwner {
				return false, fail(ErrUnavailable, "an event leased does not send")
			}
			w := e.lease
			*revision, req.after = e.revision, e.revision
			if !fn(Event{Revision: e.revision, Kind: EventKind(e.kind),
				Lease: Lease{SessionID: w.sessionID, Owner: w.owner, Token: w.token, Expiry: expiryOf(w)}}) {
				return false, nil
			}
		}
		if m.compactRevision == 0 {
			*revision, req.after = m.revision, m.revision
		}
		return true, nil
	}
	err := c.conn.stream(ctx, leasesWatch, req, onMsg)
	var e *Error
	if errors.As(err, &e) {
		return err
	}
	if status.Code(err) == codes.OutOfRange {
		return &Error{Kind: ErrGone, Code: codes.OutOfRange, Message: status.Convert(err).Message()}
	}
	return fromCall(err)
}

// stream is one server-streaming call that may last until ctx ends, as
// liblease's conn_stream: each message to onMsg, which returns false to
// stop (then nil) or an error to end with; a target that ends
// UNAVAILABLE hands over to the next (req, which onMsg may change, is
// sent again), and when all did, rounds at most ten a second until ctx
// ends, then UNAVAILABLE with the first reason.
func (c *conn) stream(ctx context.Context, method string, req request,
	onMsg func(*watchResponse) (bool, error)) error {
	n := len(c.channels)
	first := int(atomic.LoadUint32(&c.current))
	var why error
	for round := time.Now(); ; round = pauseUntil(ctx, round.Add(retryPause)) {
		for k := 0; k < n; k++ {
			t := (first + k) % n
			received, err := c.streamOnce(ctx, t, method, req, onMsg)
			if status.Code(err) != codes.Unavailable {
				if t != first {
					atomic.StoreUint32(&c.current, uint32(t))
				}
				return err
			}
			if received { // it served a while: its reason is news
				atomic.StoreUint32(&c.current, uint32(t))
				why = err
				round = time.Now()
			} else if why == nil {
				why = err
			}
		}
		if ctx.Err() != nil {
			return status.FromContextError(ctx.Err()).Err()
		}
	}
}

// streamOnce is one stream of target t: whether a message came, and how
// it ended (nil: stopped by onMsg, or ended OK by the server).
func (c *conn) streamOnce(ctx context.Context, t int, method string, req request,
	onMsg func(*watchResponse) (bool, error)) (bool, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if c.auth != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", c.auth)
	}
	cs, err := c.channels[t].NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, method,
		grpc.ForceCodec(codec{}))
	if err != nil {
		return false, err
	}
	if err := cs.SendMsg(req); err != nil && err != io.EOF {
		return false, err
	}
	if err := cs.CloseSend(); err != nil {
		return false, err
	}
	for received := false; ; received = true {
		var m watchResponse
		if err := cs.RecvMsg(&m); err != nil {
			if err == io.EOF {
				return received, nil
			}
			return received, err
		}
		if more, err := onMsg(&m); err != nil || !more {
			return true, err
		}
	}
}

// watchRequest is leased.v1.WatchRequest.
type watchRequest struct {
	sessionID string // 1
	prefix    string // 2
	after     uint64 // 3
}

func (r *watchRequest) appendTo(b []byte) []byte {
	b = appendString(b, 1, r.sessionID)
	b = appendString(b, 2, r.prefix)
	return appendVarint(b, 3, r.after)
}

// watchEvent is leased.v1.Event; its Lease has the fields of Mecatl's.
type watchEvent struct {
	revision uint64     // 1
	kind     uint64     // 2
	lease    *wireLease // 3
}

// watchResponse is leased.v1.WatchResponse.
type watchResponse struct {
	events          []watchEvent // 1
	revision        uint64       // 2
	compactRevision uint64       // 3
}

func (r *watchResponse) decode(b []byte) error {
	return eachField(b, func(num protowire.Number, typ protowire.Type, b []byte) (n int, err error) {
		switch num {
		case 1:
			var v []byte
			if v, n, err = bytesField(typ, b); err == nil {
				var e watchEvent
				err = e.decode(v)
				r.events = append(r.events, e)
			}
		case 2:
			r.revision, n, err = varintField(typ, b)
		case 3:
			r.compactRevision, n, err = varintField(typ, b)
		}
		return n, err
	})
}

func (e *watchEvent) decode(b []byte) error {
	return eachField(b, func(num protowire.Number, typ protowire.Type, b []byte) (n int, err error) {
		switch num {
		case 1:
			e.revision, n, err = varintField(typ, b)
		case 2:
			e.kind, n, err = varintField(typ, b)
		case 3:
			var v []byte
			if v, n, err = bytesField(typ, b); err == nil {
				if e.lease == nil {
					e.lease = &wireLease{}
				}
				err = e.lease.decode(v)
			}
		}
		return n, err
	})
}
