package lease

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"sync"
	"time"
)

// The keeper, as liblease's (client/keeper.c): a goroutine renews, and a
// timer acts at the deadline whatever a renewal call is doing. Its state
// is under mu; lost and stopped only ever turn true, and whichever
// goroutine sees the loss first says so. A renewal that returns after
// the loss, or after Stop, changes nothing.

const retryMax = time.Second // between failed renewals

// KeeperOptions tune a Keeper; nil or the zero value are the defaults.
type KeeperOptions struct {
	// A TTL to trust when it is shorter than the service's; longer is
	// refused (ErrInvalid). 0: the service's. With a service that does
	// not say its TTL, this is the TTL trusted, and 0 estimates it from
	// the grant's expiry and this host's wall clock (which assumes the
	// two clocks agree).
	TTL time.Duration
	// Taken off the local deadline: the longest a piece of work runs
	// after Valid said true, with the clocks' allowance. 0: a tenth of
	// the TTL. Never less than MarginMin(TTL).
	Margin time.Duration
	// The lease is lost: a renewal was refused (err Is ErrHeld: the
	// lease expired and another owner took it, or it was released behind
	// the keeper's back), or the local deadline came with no renewal
	// (err: the last failure). Stop working on the session; the keeper
	// will not release it. Called once, on a goroutine of the keeper's,
	// no later than the deadline. May be nil. Must not call Stop.
	OnLost func(l Lease, err error)
	// A renewal failed but the lease is still trusted (until the local
	// deadline); the keeper retries. May be nil. Must not call Stop.
	OnTrouble func(l Lease, err error)
}

// Keeper holds one lease: it renews it at about a third of the TTL
// (less a random tenth, so that many keepers do not renew in step), says
// when it is lost or the service is in trouble, and releases it on Stop.
//
// The deadline rule: the lease is trusted until its local deadline, the
// send time of the last successful renewal (or of the acquire) plus the
// TTL, less a margin, on the monotonic clock. The service decided the
// grant after that send time, so on the service's own clock the lease
// lasts longer, whatever the two wall clocks say. No renewal waits past
// the deadline (each call is cut short there, or at a third of the TTL
// if that comes first), and a timer acts at the deadline itself, even
// while a call is blocked: from then on Valid is false, Context is done
// and OnLost has been called. Act on the session only while Valid says
// true, in pieces of work shorter than the margin.
type Keeper struct {
	c         *Client
	opts      KeeperOptions
	ttlUnsaid time.Duration // the TTL of grants that do not say theirs
	ctx       context.Context
	cancel    context.CancelFunc
	done      chan struct{} // closed when the renewer returns
	callbacks sync.WaitGroup
	stopOnce  sync.Once
	stopErr   error

	mu        sync.Mutex
	lease     Lease
	ttl       time.Duration // trusted for lease
	deadline  time.Time     // monotonic: trust the lease until then
	nextRenew time.Time
	lastErr   error
	lost      bool
	stopped   bool
	lossErr   error
	watchdog  *time.Timer
	random    *rand.Rand
}

// Keep acquires session for owner through c (which must stay open while
// the keeper runs) and starts keeping it. A failure (ErrHeld or any)
// returns at once, with no keeper. ctx bounds the acquire only; the
// keeper runs until Stop or the loss.
func Keep(ctx context.Context, c *Client, session, owner string, opts *KeeperOptions) (*Keeper, error) {
	k := &Keeper{c: c, done: make(chan struct{}),
		random:  rand.New(rand.NewSource(time.Now().UnixNano())),
		lastErr: fail(ErrUnavailable, "no renewal before the local deadline")}
	if opts != nil {
		k.opts = *opts
	}
	if k.opts.TTL < 0 || k.opts.Margin < 0 {
		return nil, fail(ErrInvalid, "a negative TTL or Margin")
	}
	sent := time.Now()
	l, err := c.Acquire(ctx, session, owner)
	if err != nil {
		return nil, err
	}
	if err := k.checkGrant(l); err != nil {
		c.Release(context.Background(), l)
		return nil, err
	}
	k.ctx, k.cancel = context.WithCancel(context.Background())
	k.mu.Lock()
	k.grant(sent, l)
	k.watchdog = time.AfterFunc(time.Until(k.deadline), k.watch)
	k.mu.Unlock()
	go k.run()
	return k, nil
}

// checkGrant checks the options against the first grant, and settles
// the TTL of grants that do not say theirs.
func (k *Keeper) checkGrant(l Lease) error {
	switch {
	case l.TTL > 0:
		if k.opts.TTL > l.TTL {
			return fail(ErrInvalid, fmt.Sprintf(
				"TTL (%v) is longer than the service's TTL (%v)", k.opts.TTL, l.TTL))
		}
	case k.opts.TTL > 0:
		k.ttlUnsaid = k.opts.TTL
	default:
		if k.ttlUnsaid = time.Until(l.Expiry); k.ttlUnsaid <= 0 {
			return fail(ErrInvalid, "the service does not say its TTL, and the lease "+
				"came back expired: are the clocks apart? set KeeperOptions.TTL")
		}
	}
	if ttl := k.trustedTTL(l); k.opts.Margin >= ttl {
		return fail(ErrInvalid, fmt.Sprintf(
			"Margin (%v) is not less than the TTL (%v)", k.opts.Margin, ttl))
	}
	return nil
}

// trustedTTL is the TTL to trust for the grant l: the service's, or the
// option's if shorter; for a grant that does not say its own, ttlUnsaid.
func (k *Keeper) trustedTTL(l Lease) time.Duration {
	if l.TTL <= 0 {
		return k.ttlUnsaid
	}
	if k.opts.TTL > 0 && k.opts.TTL < l.TTL {
		return k.opts.TTL
	}
	return l.TTL
}

func (k *Keeper) margin(ttl time.Duration) time.Duration {
	m := k.opts.Margin
	if m == 0 {
		m = ttl / 10
	}
	if min := MarginMin(ttl); m < min {
		m = min
	}
	return m
}

// grant takes the grant l of a call sent at sent (under mu): its
// deadline, and the next renewal a third of the TTL after sent, less up
// to a tenth of it at random.
func (k *Keeper) grant(sent time.Time, l Lease) {
	k.lease = l
	k.ttl = k.trustedTTL(l)
	k.deadline = sent.Add(k.ttl - k.margin(k.ttl))
	jitter := time.Duration(k.random.Int63n(int64(k.ttl/10) + 1))
	k.nextRenew = sent.Add(k.ttl/3 - jitter)
}

// lose marks the lease lost, once, and says so (under mu, unlocking
// around the callback).
func (k *Keeper) lose(err error) {
	if k.lost || k.stopped {
		return
	}
	k.lost = true
	k.lossErr = err
	k.cancel()
	l := k.lease
	if k.opts.OnLost == nil {
		return
	}
	k.callbacks.Add(1)
	k.mu.Unlock()
	defer k.mu.Lock()
	defer k.callbacks.Done()
	k.opts.OnLost(l, err)
}

// watch is the watchdog timer's: the lease is lost at its deadline,
// whatever a renewal call is doing. A renewal moves the deadline later
// without touching the timer, which, firing early, waits again.
func (k *Keeper) watch() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.lost || k.stopped {
		return
	}
	if left := time.Until(k.deadline); left > 0 {
		k.watchdog.Reset(left)
		return
	}
	k.lose(k.lastErr)
}

// run is the renewer.
func (k *Keeper) run() {
	defer close(k.done)
	wait := time.NewTimer(0)
	defer wait.Stop()
	<-wait.C
	k.mu.Lock()
	defer k.mu.Unlock()
	for !k.lost && !k.stopped {
		now := time.Now()
		switch {
		case !now.Before(k.deadline): // the watchdog's, were it late
			k.lose(k.lastErr)
		case now.Before(k.nextRenew):
			until := k.nextRenew
			if k.deadline.Before(until) {
				until = k.deadline
			}
			wait.Reset(until.Sub(now))
			k.mu.Unlock()
			select {
			case <-wait.C:
			case <-k.ctx.Done(): // lost or stopped
				if !wait.Stop() {
					<-wait.C
				}
			}
			k.mu.Lock()
		default:
			k.renewOnce(now)
		}
	}
}

// renewOnce renews the lease with a call sent at sent (under mu,
// unlocking around the call).
func (k *Keeper) renewOnce(sent time.Time) {
	cur := k.lease
	end := k.deadline
	if third := sent.Add(k.ttl / 3); third.Before(end) {
		end = third // a retry, not a wait, past a lost call
	}
	k.mu.Unlock()
	ctx, cancel := context.WithDeadline(k.ctx, end)
	l, err := k.c.Renew(ctx, cur)
	cancel()
	k.mu.Lock()
	switch {
	case k.lost || k.stopped:
	case errors.Is(err, ErrHeld):
		k.lose(err)
	case !time.Now().Before(k.deadline):
		// Past the deadline, the lease is lost for good, even if this
		// call (cut short there) got its answer in at the last moment
		// and the watchdog is late.
		if err == nil {
			err = k.lastErr
		}
		k.lose(err)
	case err == nil:
		k.grant(sent, l)
	default:
		k.lastErr = err
		retry := k.ttl / 10
		if retry > retryMax {
			retry = retryMax
		}
		k.nextRenew = time.Now().Add(retry)
		if k.opts.OnTrouble != nil {
			k.callbacks.Add(1)
			k.mu.Unlock()
			k.opts.OnTrouble(cur, err)
			k.callbacks.Done()
			k.mu.Lock()
		}
	}
}

// Valid says whether the lease may still be trusted: not lost, not
// stopped, and its local deadline not passed (on the clock, even if the
// watchdog is late).
func (k *Keeper) Valid() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return !k.lost && !k.stopped && time.Now().Before(k.deadline)
}

// Err is nil while the lease is kept; once lost, why (as given to
// OnLost); after Stop, ErrStopped. (Context's Err is context.Canceled
// either way: Go 1.19 has no cancel cause.)
func (k *Keeper) Err() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	switch {
	case k.lost:
		return k.lossErr
	case k.stopped:
		return ErrStopped
	case !time.Now().Before(k.deadline):
		return k.lastErr // the watchdog is about to say so
	}
	return nil
}

// Context is done when the lease is lost or the keeper stopped: give it
// to the work done under the lease.
func (k *Keeper) Context() context.Context { return k.ctx }

// Deadline is the local deadline (with a monotonic clock reading): the
// lease is trusted until then, and lost then unless a renewal moves it
// later.
func (k *Keeper) Deadline() time.Time {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.deadline
}

// Lease is the lease as last granted (its Token is the one a fencing
// check needs).
func (k *Keeper) Lease() Lease {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.lease
}

// Stop stops renewing, waits for a callback that is running, and
// releases the lease unless it was lost, with the client's own timeout.
// It returns the release's error (nil when lost). Further calls return
// the same. Not from a callback.
func (k *Keeper) Stop() error {
	k.stopOnce.Do(func() {
		k.mu.Lock()
		k.stopped = true
		k.watchdog.Stop()
		k.mu.Unlock()
		k.cancel() // ends a renewal in flight
		<-k.done
		k.callbacks.Wait()
		k.mu.Lock()
		lost, l := k.lost, k.lease
		k.mu.Unlock()
		if !lost {
			k.stopErr = k.c.Release(context.Background(), l)
		}
	})
	return k.stopErr
}
