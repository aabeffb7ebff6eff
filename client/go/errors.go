package lease

import (
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The kinds of failure, as liblease's enum lease_err (client/lease.h).
// Every error of this package is an *Error whose Kind is one of them:
// test with errors.Is(err, lease.ErrHeld).
var (
	// Acquire: another owner holds a live lease. Renew: ownership is
	// lost (expired and taken over, or released). Stop the work; do not
	// release.
	ErrHeld = errors.New("held by another owner, or ownership lost")
	// The service does not serve leases (gRPC UNIMPLEMENTED): switch
	// leasing off; retrying will not help.
	ErrUnsupported = errors.New("the service does not serve leases")
	// A transient failure (storage, overload, shutdown, network): keep a
	// lease you hold until its expiry and retry.
	ErrUnavailable = errors.New("the lease service is unavailable")
	// A bad argument: empty or over-long id or owner, invalid UTF-8, a
	// bad target or option. Retrying the same call will not help.
	ErrInvalid = errors.New("invalid argument")
	// No answer within the deadline: the call may or may not have taken
	// effect. Never read it as "not held".
	ErrDeadline = errors.New("no answer within the deadline: outcome unknown")
	// The service knows the caller, and its policy does not let it use
	// this session, owner or call (PERMISSION_DENIED). Nothing changed.
	ErrDenied = errors.New("not allowed for this caller")
	// The service does not know the caller: no credentials, or wrong ones
	// (UNAUTHENTICATED). Nothing changed. Fix the token or certificate.
	ErrUnauthenticated = errors.New("no valid credentials")
	// Watch: the changes after the revision asked for are no longer kept
	// (OUT_OF_RANGE). Read the leases again and watch from 0.
	ErrGone = errors.New("the changes asked for are no longer kept")
	// Keeper.Err after Keeper.Stop (not a kind of *Error).
	ErrStopped = errors.New("the keeper was stopped")
)

// Error is the error of every failed call: its Kind (one of the Err
// variables above), the gRPC status the service answered (codes.OK when
// the client found the fault itself: a bad argument, a malformed reply),
// and why, in words.
type Error struct {
	Kind    error
	Code    codes.Code
	Message string
}

func (e *Error) Error() string {
	msg := e.Message
	if msg == "" {
		msg = e.Kind.Error()
	}
	if e.Code == codes.OK {
		return "lease: " + msg
	}
	return "lease: " + msg + " (" + codeName(e.Code) + ")"
}

// Unwrap makes errors.Is(err, ErrHeld) and the like work.
func (e *Error) Unwrap() error { return e.Kind }

func fail(kind error, msg string) error {
	return &Error{Kind: kind, Message: msg}
}

// kindOf maps a gRPC status code as liblease does (client/grpc_driver.c,
// status_error).
func kindOf(c codes.Code) error {
	switch c {
	case codes.OK:
		return nil
	case codes.FailedPrecondition:
		return ErrHeld
	case codes.Unimplemented:
		return ErrUnsupported
	case codes.InvalidArgument:
		return ErrInvalid
	case codes.DeadlineExceeded:
		return ErrDeadline
	case codes.PermissionDenied:
		return ErrDenied
	case codes.Unauthenticated:
		return ErrUnauthenticated
	default:
		return ErrUnavailable
	}
}

// fromCall turns the error of a gRPC call into an *Error (nil stays
// nil).
func fromCall(err error) error {
	if err == nil {
		return nil
	}
	s, ok := status.FromError(err)
	if !ok {
		// Not a status: a context error that gRPC did not convert.
		s = status.FromContextError(err)
	}
	return &Error{Kind: kindOf(s.Code()), Code: s.Code(), Message: s.Message()}
}

// codeName is the code's canonical name, as the C library and the gRPC
// specification write it.
func codeName(c codes.Code) string {
	names := [...]string{"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT",
		"DEADLINE_EXCEEDED", "NOT_FOUND", "ALREADY_EXISTS",
		"PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
		"ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL",
		"UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"}
	if int(c) < len(names) {
		return names[c]
	}
	return c.String()
}
