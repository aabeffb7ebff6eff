// Go interop: the 12 conformance behaviours of docs/protocol.md, from a
// Go client built offline with Debian's golang-go and
// golang-google-grpc-dev, against the real leased ($LEASED_BIN): on a
// 500 ms TTL for the cases that wait out an expiry, on a 10 s one for
// those where a lease must stay live from one call to the next (a loaded
// machine must not expire it in between). The messages come from proto/
// at run time: protoc writes a descriptor set ($LEASED_PROTO_SET), read
// with protodesc and used with dynamicpb, so no generated Go code is
// needed.
//
//	conformance [-list] [CASE...]
package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
)

const (
	ttl     = 500 * time.Millisecond
	expire  = 600 * time.Millisecond
	liveTTL = 10 * time.Second
	service = "/mecatl.driver.v1.SessionLeaseService/"
)

// codec marshals protobuf-go (APIv2) messages, dynamic ones included.
type codec struct{}

func (codec) Marshal(v interface{}) ([]byte, error) {
	return proto.Marshal(v.(proto.Message))
}
func (codec) Unmarshal(b []byte, v interface{}) error {
	return proto.Unmarshal(b, v.(proto.Message))
}
func (codec) Name() string { return "proto" }

var msgs = map[string]protoreflect.MessageDescriptor{}

func loadProtos() {
	raw, err := os.ReadFile(os.Getenv("LEASED_PROTO_SET"))
	check(err)
	var set descriptorpb.FileDescriptorSet
	check(proto.Unmarshal(raw, &set))
	files, err := protodesc.NewFiles(&set)
	check(err)
	files.RangeFiles(func(f protoreflect.FileDescriptor) bool {
		if f.Package() == "mecatl.driver.v1" {
			for i := 0; i < f.Messages().Len(); i++ {
				m := f.Messages().Get(i)
				msgs[string(m.Name())] = m
			}
		}
		return true
	})
}

func check(err error) {
	if err != nil {
		panic(err)
	}
}

// A lease as the wire has it.
type lease struct {
	session, owner string
	token          uint64
	expiry         int64 // ns
}

type client struct {
	conn *grpc.ClientConn
}

func newMsg(name string) *dynamicpb.Message { return dynamicpb.NewMessage(msgs[name]) }

func set(m *dynamicpb.Message, field string, v interface{}) {
	fd := m.Descriptor().Fields().ByName(protoreflect.Name(field))
	m.Set(fd, protoreflect.ValueOf(v))
}

func get(m protoreflect.Message, field string) protoreflect.Value {
	return m.Get(m.Descriptor().Fields().ByName(protoreflect.Name(field)))
}

func toLease(resp *dynamicpb.Message) lease {
	l := get(resp, "lease").Message()
	e := get(l, "expiry").Message()
	return lease{
		session: get(l, "session_id").String(),
		owner:   get(l, "owner").String(),
		token:   get(l, "token").Uint(),
		expiry:  get(e, "seconds").Int()*1e9 + get(e, "nanos").Int(),
	}
}

func (c *client) call(method string, req, resp proto.Message) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return c.conn.Invoke(ctx, service+method, req, resp, grpc.ForceCodec(codec{}))
}

func (c *client) acquire(session, owner string) (lease, error) {
	req := newMsg("AcquireRequest")
	set(req, "session_id", session)
	set(req, "owner", owner)
	resp := newMsg("LeaseResponse")
	if err := c.call("Acquire", req, resp); err != nil {
		return lease{}, err
	}
	return toLease(resp), nil
}

func wireLease(l lease) *dynamicpb.Message {
	m := newMsg("Lease")
	set(m, "session_id", l.session)
	set(m, "owner", l.owner)
	set(m, "token", l.token)
	return m
}

func (c *client) renew(l lease) (lease, error) {
	req := newMsg("RenewRequest")
	req.Set(req.Descriptor().Fields().ByName("lease"), protoreflect.ValueOfMessage(wireLease(l)))
	resp := newMsg("LeaseResponse")
	if err := c.call("Renew", req, resp); err != nil {
		return lease{}, err
	}
	return toLease(resp), nil
}

func (c *client) release(l lease) error {
	req := newMsg("ReleaseRequest")
	req.Set(req.Descriptor().Fields().ByName("lease"), protoreflect.ValueOfMessage(wireLease(l)))
	return c.call("Release", req, newMsg("ReleaseResponse"))
}

// daemon starts leased and returns a client and a stop function.
func daemon(leaseTTL time.Duration) (*client, func() error) {
	dir, err := os.MkdirTemp("", "leased-go-")
	check(err)
	cmd := exec.Command(os.Getenv("LEASED_BIN"), "--listen", "127.0.0.1:0",
		"--data-dir", filepath.Join(dir, "data"),
		"--ttl", fmt.Sprintf("%dms", leaseTTL.Milliseconds()))
	stderr, err := cmd.StderrPipe()
	check(err)
	check(cmd.Start())
	lines := bufio.NewScanner(stderr)
	re := regexp.MustCompile(`msg=listening addr=(\S+)`)
	addr := ""
	for addr == "" && lines.Scan() {
		if m := re.FindStringSubmatch(lines.Text()); m != nil {
			addr = m[1]
		}
	}
	go func() {
		for lines.Scan() {
		}
	}()
	if addr == "" {
		panic("leased did not listen")
	}
	conn, err := grpc.Dial(addr, grpc.WithInsecure())
	check(err)
	return &client{conn}, func() error {
		conn.Close()
		cmd.Process.Signal(syscall.SIGTERM)
		err := cmd.Wait()
		os.RemoveAll(dir)
		return err
	}
}

func sessionID() string { return randomHex(16) }
func ownerID() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), randomHex(4))
}
func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func must(l lease, err error) lease {
	check(err)
	return l
}

func assert(ok bool, format string, args ...interface{}) {
	if !ok {
		panic(fmt.Sprintf(format, args...))
	}
}

func held(err error) {
	assert(status.Code(err) == codes.FailedPrecondition,
		"want FAILED_PRECONDITION, got %v", err)
}

var cases = map[string]func(c *client){
	"test_01_fresh_acquire_returns_id_owner_expiry": func(c *client) {
		s, o := sessionID(), ownerID()
		l := must(c.acquire(s, o))
		assert(l.session == s && l.owner == o && l.expiry > 0 && l.token >= 1, "%+v", l)
	},
	"test_02_renew_keeps_token_expiry_strictly_later": func(c *client) {
		l := must(c.acquire(sessionID(), ownerID()))
		r := must(c.renew(l))
		assert(r.token == l.token && r.expiry > l.expiry, "%+v %+v", l, r)
		a := must(c.renew(r))
		assert(a.expiry > r.expiry, "not later")
		time.Sleep(500 * time.Millisecond)
		later := must(c.renew(a))
		assert(later.token == l.token && later.expiry > a.expiry, "not later")
	},
	"test_03_after_release_another_owner_acquires": func(c *client) {
		s := sessionID()
		check(c.release(must(c.acquire(s, ownerID()))))
		o := ownerID()
		assert(must(c.acquire(s, o)).owner == o, "not the new owner")
	},
	"test_04_second_owner_of_live_lease_failed_precondition": func(c *client) {
		s := sessionID()
		l := must(c.acquire(s, ownerID()))
		_, err := c.acquire(s, ownerID())
		held(err)
		assert(must(c.renew(l)).token == l.token, "holder affected")
	},
	"test_05_same_owner_reacquire_keeps_token": func(c *client) {
		s, o := sessionID(), ownerID()
		l := must(c.acquire(s, o))
		assert(must(c.acquire(s, o)).token == l.token, "token changed")
	},
	"test_06_acquire_after_release_greater_token": func(c *client) {
		s, o := sessionID(), ownerID()
		l := must(c.acquire(s, o))
		check(c.release(l))
		other := must(c.acquire(s, ownerID()))
		assert(other.token > l.token, "not greater")
		check(c.release(other))
		assert(must(c.acquire(s, o)).token > other.token, "not greater")
	},
	"test_07_acquire_after_expiry_greater_token": func(c *client) {
		s, o := sessionID(), ownerID()
		l := must(c.acquire(s, o))
		time.Sleep(expire)
		assert(must(c.acquire(s, ownerID())).token > l.token, "not greater")
		s2 := sessionID()
		first := must(c.acquire(s2, o))
		time.Sleep(expire)
		assert(must(c.acquire(s2, o)).token > first.token, "not greater")
	},
	"test_08_renew_after_expiry_and_takeover_failed_precondition": func(c *client) {
		s := sessionID()
		l := must(c.acquire(s, ownerID()))
		time.Sleep(expire)
		must(c.acquire(s, ownerID()))
		_, err := c.renew(l)
		held(err)
	},
	"test_09_renew_after_release_failed_precondition": func(c *client) {
		l := must(c.acquire(sessionID(), ownerID()))
		check(c.release(l))
		_, err := c.renew(l)
		held(err)
	},
	"test_10_release_idempotent_also_never_seen": func(c *client) {
		l := must(c.acquire(sessionID(), ownerID()))
		check(c.release(l))
		check(c.release(l))
		never := lease{session: sessionID(), owner: ownerID(), token: 7}
		check(c.release(never))
		check(c.release(never))
		assert(must(c.acquire(never.session, ownerID())).token >= 1, "not free")
	},
	"test_11_tokens_rise_strictly_across_takeovers": func(c *client) {
		s := sessionID()
		l := must(c.acquire(s, ownerID()))
		tokens := []uint64{l.token}
		for i := 0; i < 6; i++ {
			if i%3 == 2 {
				time.Sleep(expire)
			} else {
				check(c.release(l))
			}
			l = must(c.acquire(s, ownerID()))
			tokens = append(tokens, l.token)
		}
		for i := 1; i < len(tokens); i++ {
			assert(tokens[i-1] < tokens[i], "%v", tokens)
		}
	},
	"test_12_distinct_sessions_never_contend": func(c *client) {
		la := must(c.acquire(sessionID(), ownerID()))
		lb := must(c.acquire(sessionID(), ownerID()))
		assert(must(c.renew(la)).token == la.token, "renew a")
		check(c.release(la))
		assert(must(c.renew(lb)).token == lb.token, "renew b")
		var wg sync.WaitGroup
		errs := make(chan error, 16)
		for i := 0; i < 16; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := c.acquire(sessionID(), ownerID())
				errs <- err
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			check(err)
		}
	},
}

// ttlFor is the TTL a case's daemon runs with: short where it waits out
// an expiry.
func ttlFor(name string) time.Duration {
	switch name {
	case "test_07_acquire_after_expiry_greater_token",
		"test_08_renew_after_expiry_and_takeover_failed_precondition",
		"test_11_tokens_rise_strictly_across_takeovers":
		return ttl
	}
	return liveTTL
}

func run(name string) (err error) {
	c, stop := daemon(ttlFor(name))
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
		if serr := stop(); err == nil && serr != nil {
			err = fmt.Errorf("leased: %v", serr)
		}
	}()
	cases[name](c)
	return nil
}

func main() {
	list := flag.Bool("list", false, "list the cases")
	flag.Parse()
	names := flag.Args()
	if *list || len(names) == 0 {
		for name := range cases {
			names = append(names, name)
		}
		sort.Strings(names)
	}
	if *list {
		for _, n := range names {
			fmt.Println(n)
		}
		return
	}
	loadProtos()
	failed := 0
	for _, name := range names {
		if cases[name] == nil {
			fmt.Println("no such case:", name)
			failed++
			continue
		}
		start := time.Now()
		if err := run(name); err != nil {
			failed++
			fmt.Printf("FAIL %s\n%v\n", name, err)
		} else {
			fmt.Printf("ok   %s (%.2fs)\n", name, time.Since(start).Seconds())
		}
	}
	if failed > 0 {
		os.Exit(1)
	}
}
