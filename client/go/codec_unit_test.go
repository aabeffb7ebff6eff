package lease

// The codec, with no daemon: the wire form, round trips, unknown fields,
// and malformed input (an error, never a panic).

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

// The exact bytes of a message protoc's encoders would write.
func TestCodecWireForm(t *testing.T) {
	got, err := codec{}.Marshal(&acquireRequest{sessionID: "s", owner: "ow"})
	want := []byte{0x0a, 1, 's', 0x12, 2, 'o', 'w'}
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("AcquireRequest: % x, %v; want % x", got, err, want)
	}
	// Renew{lease{session "s", token 300, expiry {1, -1}}}: nanos is an
	// int32, sent sign-extended to 10 bytes; an owner "" is not sent.
	got, _ = codec{}.Marshal(&leaseRequest{lease: wireLease{sessionID: "s", token: 300,
		hasExpiry: true, seconds: 1, nanos: -1}})
	ts := []byte{0x08, 1, 0x10, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}
	inner := append([]byte{0x0a, 1, 's', 0x18, 0xac, 0x02, 0x22, byte(len(ts))}, ts...)
	want = append([]byte{0x0a, byte(len(inner))}, inner...)
	if !bytes.Equal(got, want) {
		t.Fatalf("RenewRequest: % x; want % x", got, want)
	}
	// An empty lease is still a lease: the field is there.
	got, _ = codec{}.Marshal(&leaseRequest{})
	if !bytes.Equal(got, []byte{0x0a, 0}) {
		t.Fatalf("empty lease: % x", got)
	}
}

func TestCodecRoundTrip(t *testing.T) {
	for _, l := range []wireLease{
		{},
		{sessionID: "s", owner: "o", token: 1, hasExpiry: true, seconds: 1700000000, nanos: 123456789},
		{sessionID: "séssion-☃", owner: "ówner", token: 1<<64 - 1, hasExpiry: true,
			seconds: -62135596800, nanos: 999999999, live: true},
		{sessionID: string(bytes.Repeat([]byte{'x'}, 512)), hasExpiry: true},
	} {
		b, err := codec{}.Marshal(&leaseRequest{lease: l})
		if err != nil {
			t.Fatal(err)
		}
		var r leaseResponse // the same shape: {1 lease}
		if err := (codec{}).Unmarshal(b, &r); err != nil {
			t.Fatalf("%+v: %v", l, err)
		}
		if r.lease == nil || *r.lease != l {
			t.Fatalf("sent %+v, read %+v", l, r.lease)
		}
	}
	var r leaseResponse
	if err := (codec{}).Unmarshal(nil, &r); err != nil || r.lease != nil {
		t.Fatalf("an empty reply: %+v, %v", r.lease, err)
	}
	if err := (codec{}).Unmarshal([]byte{0x0a, 0x00, 0x08, 0x01}, &emptyResponse{}); err != nil {
		t.Fatalf("ReleaseResponse with fields: %v", err)
	}
}

// unknown appends one field of every wire type, numbered from 6 on.
func unknown(b []byte) []byte {
	b = protowire.AppendTag(b, 6, protowire.VarintType)
	b = protowire.AppendVarint(b, 1<<40)
	b = protowire.AppendTag(b, 7, protowire.Fixed32Type)
	b = protowire.AppendFixed32(b, 7)
	b = protowire.AppendTag(b, 8, protowire.Fixed64Type)
	b = protowire.AppendFixed64(b, 8)
	b = protowire.AppendTag(b, 9, protowire.BytesType)
	b = protowire.AppendString(b, "nine")
	b = protowire.AppendTag(b, 10, protowire.StartGroupType)
	b = protowire.AppendTag(b, 1, protowire.VarintType)
	b = protowire.AppendVarint(b, 1)
	return protowire.AppendTag(b, 10, protowire.EndGroupType)
}

func TestCodecSkipsUnknownFields(t *testing.T) {
	ts := unknown(nil)
	ts = protowire.AppendTag(ts, 1, protowire.VarintType)
	ts = protowire.AppendVarint(ts, 42)
	ts = unknown(ts)
	l := unknown(nil)
	l = protowire.AppendTag(l, 1, protowire.BytesType)
	l = protowire.AppendString(l, "s")
	l = unknown(l)
	l = protowire.AppendTag(l, 4, protowire.BytesType)
	l = protowire.AppendBytes(l, ts)
	l = protowire.AppendTag(l, 3, protowire.VarintType)
	l = protowire.AppendVarint(l, 9)
	b := unknown(nil)
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendBytes(b, l)
	b = unknown(b)
	var r leaseResponse
	if err := (codec{}).Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	want := wireLease{sessionID: "s", token: 9, hasExpiry: true, seconds: 42}
	if r.lease == nil || *r.lease != want {
		t.Fatalf("read %+v, want %+v", r.lease, want)
	}
}

func TestCodecMalformedInput(t *testing.T) {
	good, _ := codec{}.Marshal(&leaseRequest{lease: wireLease{sessionID: "session",
		owner: "owner", token: 12345, hasExpiry: true, seconds: 1700000000, nanos: 5}})
	bad := map[string][]byte{
		"truncated tag":               {0x80},
		"field number 0":              {0x00, 0x01},
		"truncated varint":            {0x0a, 0x02, 0x18, 0xff},
		"length past the end":         {0x0a, 0x05, 0x0a, 0x01},
		"inner length past the end":   {0x0a, 0x03, 0x0a, 0x05, 's'},
		"string as a varint":          {0x0a, 0x02, 0x08, 0x01},
		"token as bytes":              {0x0a, 0x03, 0x1a, 0x01, 'x'},
		"lease as a varint":           {0x08, 0x01},
		"expiry as fixed64":           {0x0a, 0x09, 0x21, 1, 2, 3, 4, 5, 6, 7, 8},
		"seconds as bytes":            {0x0a, 0x04, 0x22, 0x02, 0x0a, 0x00},
		"session not UTF-8":           {0x0a, 0x03, 0x0a, 0x01, 0xff},
		"owner not UTF-8":             {0x0a, 0x04, 0x12, 0x02, 0xc0, 0x80},
		"end group at the top":        {0x0c},
		"unterminated unknown group":  {0x53, 0x08, 0x01},
		"unknown length past the end": {0x4a, 0x09, 'x'},
		"good then garbage":           append(append([]byte{}, good...), 0xff),
	}
	for what, b := range bad {
		var r leaseResponse
		if err := (codec{}).Unmarshal(b, &r); err == nil {
			t.Errorf("%s (% x): no error, read %+v", what, b, r.lease)
		}
	}
	// Every cut of a good reply reads or fails; none panics (a panic
	// fails the test).
	for n := 0; n < len(good); n++ {
		var r leaseResponse
		(codec{}).Unmarshal(good[:n], &r)
		(codec{}).Unmarshal(good[:n], &emptyResponse{})
	}
	if _, err := (codec{}).Marshal("not a message"); err == nil {
		t.Error("Marshal of a string: no error")
	}
	if err := (codec{}).Unmarshal(good, new(int)); err == nil {
		t.Error("Unmarshal into an int: no error")
	}
}

// Watch's messages: the request as leased reads it, a response read
// back field for field (its lease as Mecatl's), and malformed ones
// refused.
func TestCodecWatchMessages(t *testing.T) {
	b, err := codec{}.Marshal(&watchRequest{prefix: "job-", after: 300})
	if want := []byte{0x12, 0x04, 'j', 'o', 'b', '-', 0x18, 0xac, 0x02}; err != nil || !bytes.Equal(b, want) {
		t.Fatalf("WatchRequest % x (%v), want % x", b, err, want)
	}
	lease := (&wireLease{sessionID: "s", owner: "o", token: 7, hasExpiry: true, seconds: 9}).appendTo(nil)
	var ev []byte
	ev = appendVarint(ev, 1, 41)
	ev = appendVarint(ev, 2, uint64(Released))
	ev = appendMessage(ev, 3, lease)
	var m []byte
	m = appendMessage(m, 1, ev)
	m = appendMessage(m, 1, ev)
	m = appendVarint(m, 2, 41)
	var r watchResponse
	if err := (codec{}).Unmarshal(m, &r); err != nil {
		t.Fatal(err)
	}
	want := wireLease{sessionID: "s", owner: "o", token: 7, hasExpiry: true, seconds: 9}
	if len(r.events) != 2 || r.revision != 41 || r.compactRevision != 0 ||
		r.events[1].revision != 41 || r.events[1].kind != uint64(Released) ||
		r.events[1].lease == nil || *r.events[1].lease != want {
		t.Fatalf("read %+v", r)
	}
	for what, b := range map[string][]byte{
		"event as a varint":         {0x08, 0x01},
		"revision as bytes":         {0x12, 0x01, 'x'},
		"event's lease truncated":   {0x0a, 0x03, 0x1a, 0x05, 's'},
		"event's kind past the end": {0x0a, 0x02, 0x10, 0xff},
	} {
		var r watchResponse
		if err := (codec{}).Unmarshal(b, &r); err == nil {
			t.Errorf("%s (% x): no error, read %+v", what, b, r)
		}
	}
	for n := 0; n < len(m); n++ { // every cut reads or fails, never panics
		(codec{}).Unmarshal(m[:n], &watchResponse{})
	}
}
