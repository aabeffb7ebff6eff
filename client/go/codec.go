package lease

import (
	"errors"
	"fmt"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
)

// The few messages of proto/mecatl/driver/v1/session_lease.proto and
// proto/leased/admin/v1/admin.proto that the client sends and reads,
// encoded by hand with protowire: the project commits no generated code,
// and a go build cannot run protoc. Field numbers are the wire contract.

// wireLease is mecatl.driver.v1.Lease, and leased.admin.v1.Lease, which
// adds live (field 5).
type wireLease struct {
	sessionID string // 1
	owner     string // 2
	token     uint64 // 3
	hasExpiry bool   // 4, a google.protobuf.Timestamp:
	seconds   int64  //   1
	nanos     int32  //   2
	live      bool   // 5
}

// acquireRequest is mecatl.driver.v1.AcquireRequest, and with no owner
// leased.admin.v1.GetRequest (session_id is field 1 of both).
type acquireRequest struct {
	sessionID string // 1
	owner     string // 2
}

// leaseRequest is RenewRequest and ReleaseRequest: {1 lease}.
type leaseRequest struct {
	lease wireLease
}

// leaseResponse is LeaseResponse and leased.admin.v1.GetResponse: {1
// lease}; lease stays nil when the reply has none.
type leaseResponse struct {
	lease *wireLease
}

// emptyResponse is ReleaseResponse: any fields it has are skipped.
type emptyResponse struct{}

// request is a message the client sends; reply one it reads.
type request interface {
	appendTo(b []byte) []byte
}

type reply interface {
	decode(b []byte) error
}

func (r *acquireRequest) appendTo(b []byte) []byte {
	b = appendString(b, 1, r.sessionID)
	return appendString(b, 2, r.owner)
}

func (r *leaseRequest) appendTo(b []byte) []byte {
	return appendMessage(b, 1, r.lease.appendTo(nil))
}

func (l *wireLease) appendTo(b []byte) []byte {
	b = appendString(b, 1, l.sessionID)
	b = appendString(b, 2, l.owner)
	b = appendVarint(b, 3, l.token)
	if l.hasExpiry {
		var ts []byte
		ts = appendVarint(ts, 1, uint64(l.seconds))
		ts = appendVarint(ts, 2, uint64(int64(l.nanos))) // sign-extended, as int32 is
		b = appendMessage(b, 4, ts)
	}
	if l.live {
		b = appendVarint(b, 5, 1)
	}
	return b
}

func (r *leaseResponse) decode(b []byte) error {
	return eachField(b, func(num protowire.Number, typ protowire.Type, b []byte) (int, error) {
		if num != 1 {
			return 0, nil
		}
		v, n, err := bytesField(typ, b)
		if err != nil {
			return 0, err
		}
		if r.lease == nil {
			r.lease = &wireLease{}
		}
		return n, r.lease.decode(v) // a repeated message field merges
	})
}

func (emptyResponse) decode(b []byte) error {
	return eachField(b, func(protowire.Number, protowire.Type, []byte) (int, error) {
		return 0, nil
	})
}

func (l *wireLease) decode(b []byte) error {
	return eachField(b, func(num protowire.Number, typ protowire.Type, b []byte) (n int, err error) {
		switch num {
		case 1:
			l.sessionID, n, err = stringField(typ, b)
		case 2:
			l.owner, n, err = stringField(typ, b)
		case 3:
			l.token, n, err = varintField(typ, b)
		case 4:
			var v []byte
			if v, n, err = bytesField(typ, b); err == nil {
				l.hasExpiry = true
				err = l.decodeTimestamp(v)
			}
		case 5:
			var v uint64
			v, n, err = varintField(typ, b)
			l.live = v != 0
		}
		return n, err
	})
}

func (l *wireLease) decodeTimestamp(b []byte) error {
	return eachField(b, func(num protowire.Number, typ protowire.Type, b []byte) (n int, err error) {
		var v uint64
		switch num {
		case 1:
			v, n, err = varintField(typ, b)
			l.seconds = int64(v)
		case 2:
			v, n, err = varintField(typ, b)
			l.nanos = int32(v)
		}
		return n, err
	})
}

// eachField calls f with each field of the message b: its number, wire
// type, and the bytes from its value on. f returns how many bytes of the
// value it took, or 0 for a field it does not know, which is skipped.
func eachField(b []byte, f func(protowire.Number, protowire.Type, []byte) (int, error)) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		m, err := f(num, typ, b)
		if err != nil {
			return err
		}
		if m == 0 { // every value takes a byte at least
			if m = protowire.ConsumeFieldValue(num, typ, b); m < 0 {
				return protowire.ParseError(m)
			}
		}
		b = b[m:]
	}
	return nil
}

var errWireType = errors.New("a field of the wrong wire type")

func varintField(typ protowire.Type, b []byte) (uint64, int, error) {
	if typ != protowire.VarintType {
		return 0, 0, errWireType
	}
	v, n := protowire.ConsumeVarint(b)
	if n < 0 {
		return 0, 0, protowire.ParseError(n)
	}
	return v, n, nil
}

func bytesField(typ protowire.Type, b []byte) ([]byte, int, error) {
	if typ != protowire.BytesType {
		return nil, 0, errWireType
	}
	v, n := protowire.ConsumeBytes(b)
	if n < 0 {
		return nil, 0, protowire.ParseError(n)
	}
	return v, n, nil
}

func stringField(typ protowire.Type, b []byte) (string, int, error) {
	v, n, err := bytesField(typ, b)
	if err == nil && !utf8.Valid(v) {
		err = errors.New("a string field not in UTF-8")
	}
	return string(v), n, err
}

// proto3: a field at its default value is not sent.

func appendString(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

func appendVarint(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

// appendMessage sends a message field even when empty: its presence is
// what a reader sees.
func appendMessage(b []byte, num protowire.Number, m []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, m)
}

// codec is the gRPC codec of these messages, given to every call with
// grpc.ForceCodec. Its name is the content subtype: application/grpc+proto.
type codec struct{}

func (codec) Marshal(v interface{}) ([]byte, error) {
	m, ok := v.(request)
	if !ok {
		return nil, fmt.Errorf("lease codec: cannot send a %T", v)
	}
	return m.appendTo(nil), nil
}

func (codec) Unmarshal(b []byte, v interface{}) error {
	m, ok := v.(reply)
	if !ok {
		return fmt.Errorf("lease codec: cannot read into a %T", v)
	}
	return m.decode(b)
}

func (codec) Name() string { return "proto" }
