// Package lease is the Go client of leased, the lease service: it gives
// one process at a time the ownership of a session (any opaque id), with
// a fencing token that rises on every change of owner. It speaks
// mecatl.driver.v1.SessionLeaseService (and leased.admin.v1.Admin's Get)
// over gRPC, as liblease does (client/lease.h), with no generated code.
//
//	c, err := lease.Dial("127.0.0.1:7443", nil)
//	l, err := c.Acquire(ctx, "session-1", "server-a")
//	l, err = c.Renew(ctx, l)
//	err = c.Release(ctx, l)
//	c.Close()
//
// Plaintext goes only to loopback or unix sockets; give Options.CAFile
// for TLS (and CertFile, KeyFile for mutual TLS, Token for a bearer
// token). Several comma-separated targets fail over.
//
// Errors are *Error values; test their kind with errors.Is: ErrHeld
// (another owner holds it, or ownership is lost: stop the work),
// ErrUnavailable (transient: keep a lease until its expiry and retry),
// ErrDeadline (no answer in time: the outcome is unknown), ErrInvalid,
// ErrUnsupported, ErrDenied, ErrUnauthenticated.
//
// A server that holds a session should use a Keeper, which renews on
// its own and stops trusting the lease at a local deadline that needs
// no agreement of clocks:
//
//	k, err := lease.Keep(ctx, c, "session-1", "server-a", nil)
//	for k.Valid() {
//		work(k.Context(), k.Lease().Token) // shorter than the margin
//	}
//	err = k.Stop() // releases, unless lost
//
// Client.Wait waits in leased's line for a session; Client.Watch tells
// the changes of a session's lease, or of every session under a prefix,
// each with a revision to resume from.
//
// Built offline in GOPATH mode over Debian's golang-google-grpc-dev and
// golang-google-protobuf-dev, or as the module leased/lease (see
// docs/client.md).
package lease
