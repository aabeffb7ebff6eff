// holder_go: `holder keep` (tests/faults/holder.c) with the Go package's
// keeper (client/go) in place of liblease's, so that the holders' fault
// campaign (tests/faults/holders) checks the Go holder the same way: the
// same flags, the same units file, the same fence (the file
// lease_fence_enter keeps: one line of 20 decimal digits, rewritten in
// place under flock) and resource log.
//
//	holder_go keep --url U --session S[,S2...] --units FILE --fence-dir D
//	               --for MS [--retry-ms N] [--timeout-ms N]
//	               [--hold-ms LO,HI] [--rest-ms N] [--prefix P] [--no-fence]
//
// Its negative control is the same program built against a broken copy
// of the package (tests/faults/build_holder_go.sh --uncapped).
//
// Exit: 0, 1 when something else than the lease failed, 2 on bad usage.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"leased/lease"
)

type options struct {
	url, session, units, fenceDir, prefix string
	forMS, retryMS, timeoutMS, restMS     int
	holdLo, holdHi                        int
	noFence                               bool
}

var errRefused = errors.New("a greater token wrote first")

// fenceEnter is lease_fence_enter: the open, locked fence file, or
// errRefused when a greater token wrote before.
func fenceEnter(path string, token uint64) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0666)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	buf := make([]byte, 22)
	n, _ := f.ReadAt(buf, 0)
	var high uint64
	if n > 0 {
		if n != 21 || buf[20] != '\n' {
			f.Close()
			return nil, fmt.Errorf("%s: not a fence file", path)
		}
		if high, err = strconv.ParseUint(string(buf[:20]), 10, 64); err != nil {
			f.Close()
			return nil, fmt.Errorf("%s: not a fence file", path)
		}
	}
	if token < high {
		f.Close()
		return nil, errRefused
	}
	if token > high {
		if _, err := f.WriteAt([]byte(fmt.Sprintf("%020d\n", token)), 0); err != nil {
			f.Close()
			return nil, err
		}
		if err := syscall.Fdatasync(int(f.Fd())); err != nil {
			f.Close()
			return nil, err
		}
	}
	return f, nil
}

func writeResource(o *options, session, owner string, token uint64) error {
	path := filepath.Join(o.fenceDir, "resource-"+session+".log")
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0644)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = fmt.Fprintf(f, "%d %s %d %d\n", token, owner, os.Getpid(), time.Now().UnixNano())
	return err
}

// unit does one unit of work and records it: whether the write was
// accepted, or an error when neither accepted nor refused.
func unit(o *options, units *os.File, session, owner string, token uint64) (bool, error) {
	t0 := time.Now().UnixNano()
	time.Sleep(time.Duration(5+rand.Intn(16)) * time.Millisecond) // the work
	accepted := true
	if o.noFence {
		if err := writeResource(o, session, owner, token); err != nil {
			return false, err
		}
	} else {
		f, err := fenceEnter(filepath.Join(o.fenceDir, "fence-"+session), token)
		switch {
		case errors.Is(err, errRefused):
			accepted = false
		case err != nil:
			return false, err
		default:
			err = writeResource(o, session, owner, token)
			f.Close() // lets the lock go
			if err != nil {
				return false, err
			}
		}
	}
	t1 := time.Now().UnixNano()
	write := "accepted"
	if !accepted {
		write = "refused"
	}
	line, _ := json.Marshal(map[string]interface{}{"kind": "unit", "session": session,
		"owner": owner, "token": token, "pid": os.Getpid(), "start": t0, "end": t1,
		"write": write})
	if _, err := units.Write(append(line, '\n')); err != nil {
		return false, err
	}
	return accepted, nil
}

func keep(o *options) error {
	c, err := lease.Dial(o.url, &lease.Options{Timeout: time.Duration(o.timeoutMS) * time.Millisecond})
	if err != nil {
		return err
	}
	defer c.Close()
	units, err := os.OpenFile(o.units, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0644)
	if err != nil {
		return err
	}
	defer units.Close()
	sessions := strings.Split(o.session, ",")
	end := time.Now().Add(time.Duration(o.forMS) * time.Millisecond)
	attempts, held, lost, done := 0, 0, 0, 0
	for time.Now().Before(end) {
		session := sessions[rand.Intn(len(sessions))]
		owner := fmt.Sprintf("%s-%d-%d", o.prefix, os.Getpid(), attempts)
		attempts++
		k, err := lease.Keep(context.Background(), c, session, owner, nil)
		if err != nil {
			if !errors.Is(err, lease.ErrHeld) && !errors.Is(err, lease.ErrUnavailable) &&
				!errors.Is(err, lease.ErrDeadline) {
				return fmt.Errorf("acquire %s: %w", session, err)
			}
			time.Sleep(time.Duration(o.retryMS) * time.Millisecond)
			continue
		}
		held++
		until := time.Now().Add(time.Duration(o.holdLo+rand.Intn(o.holdHi-o.holdLo+1)) * time.Millisecond)
		if until.After(end) {
			until = end
		}
		for time.Now().Before(until) && k.Valid() {
			ok, err := unit(o, units, session, owner, k.Lease().Token)
			if err != nil {
				k.Stop()
				return err
			}
			if !ok {
				break
			}
			done++
		}
		if !k.Valid() {
			lost++
		}
		k.Stop() // the release may fail as calls do; the lease runs out
		time.Sleep(time.Duration(o.restMS) * time.Millisecond)
	}
	fmt.Fprintf(os.Stderr, "holder_go: keep: %d attempts, %d held, %d lost, %d units\n",
		attempts, held, lost, done)
	return nil
}

func main() {
	if len(os.Args) < 2 || os.Args[1] != "keep" {
		fmt.Fprintln(os.Stderr, "usage: holder_go keep --url U --session S ... (see the source)")
		os.Exit(2)
	}
	fs := flag.NewFlagSet("holder_go keep", flag.ContinueOnError)
	o := &options{}
	hold := fs.String("hold-ms", "500,3000", "")
	fs.StringVar(&o.url, "url", "", "")
	fs.StringVar(&o.session, "session", "", "")
	fs.StringVar(&o.units, "units", "", "")
	fs.StringVar(&o.fenceDir, "fence-dir", "", "")
	fs.StringVar(&o.prefix, "prefix", "gokeep", "")
	fs.IntVar(&o.forMS, "for", 0, "")
	fs.IntVar(&o.retryMS, "retry-ms", 20, "")
	fs.IntVar(&o.timeoutMS, "timeout-ms", 1000, "")
	fs.IntVar(&o.restMS, "rest-ms", 0, "")
	fs.BoolVar(&o.noFence, "no-fence", false, "")
	if err := fs.Parse(os.Args[2:]); err != nil {
		os.Exit(2)
	}
	lo, hi, ok := strings.Cut(*hold, ",")
	var err1, err2 error
	o.holdLo, err1 = strconv.Atoi(lo)
	o.holdHi, err2 = strconv.Atoi(hi)
	if !ok || err1 != nil || err2 != nil || o.holdHi < o.holdLo || o.url == "" ||
		o.session == "" || o.units == "" || o.fenceDir == "" {
		fmt.Fprintln(os.Stderr, "holder_go: bad usage")
		os.Exit(2)
	}
	rand.Seed(time.Now().UnixNano() ^ int64(os.Getpid()))
	if err := keep(o); err != nil {
		fmt.Fprintln(os.Stderr, "holder_go:", err)
		os.Exit(1)
	}
}
