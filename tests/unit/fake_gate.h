/*
 * The gates of the fakes (fake_store.h, fake_pg.h): each kind of call a
 * fake lets a test hold has a gate, at which its calls wait until the
 * test lets them go, one (fake_gate_step) or all (fake_gate_release),
 * and past which they end with the failure the test injected
 * (fake_gate_fail). Calls that entered, wait and returned are counted,
 * for the test to wait for.
 *
 * struct fake_gates also holds what a fake guards with them: the one
 * mutex that guards all of the fake (the fake locks mu itself around
 * everything it does, and the gates wait on it), and the hook that tells
 * the test something changed. No gate holds a call longer than the
 * wait_ms given to fake_gate_init: it then lets the call go and counts a
 * timeout, so that a test never hangs on a gate.
 */
#ifndef LEASED_FAKE_GATE_H
#define LEASED_FAKE_GATE_H

#include <pthread.h>
#include <stdbool.h>

#define FAKE_GATE_KINDS 8 /* the most kinds of call a fake gates */

struct fake_gate {
    bool hold;
    unsigned pass; /* calls fake_gate_step let go, not yet gone */
    unsigned entered, waiting, returned;
    int fail;           /* what calls end with (0: as they should) */
    unsigned fail_left; /* calls still to fail (0: fail stays) */
};

struct fake_gates {
    pthread_mutex_t mu;
    pthread_cond_t cv; /* on CLOCK_MONOTONIC */
    void (*changed)(void *arg);
    void *changed_arg;
    int wait_ms;
    struct fake_gate gate[FAKE_GATE_KINDS];
    unsigned timeouts;
};

/* Makes g's lock and condition variable, its gates open: g must be
 * zeroed. changed(arg) (NULL: none) is called by fake_gate_notify. */
void fake_gate_init(struct fake_gates *g, int wait_ms,
                    void (*changed)(void *arg), void *arg);
void fake_gate_destroy(struct fake_gates *g);

/* Tells the test something changed (lock held). */
void fake_gate_notify(struct fake_gates *g);

/* A call of kind k enters (lock held): waits at its gate while it is
 * held, and returns the error it is to end with (0: none). */
int fake_gate_enter(struct fake_gates *g, int k);
/* That call returns (lock held). */
void fake_gate_leave(struct fake_gates *g, int k);

/* The test's side (each takes the lock). Calls of kind k wait at their
 * gate from now on; one of them goes (one waiting, or the next); all
 * go, and none is held any more. */
void fake_gate_hold(struct fake_gates *g, int k);
void fake_gate_step(struct fake_gates *g, int k);
void fake_gate_release(struct fake_gates *g, int k);
/* The next n calls of kind k (0: every one, until err is 0 again) end
 * with err, decided when they pass their gate. */
void fake_gate_fail(struct fake_gates *g, int k, int err, unsigned n);

/* One of g's counters, or of its fake's (guarded by the same lock), read
 * under the lock: &g->gate[k].entered, &g->timeouts... */
unsigned fake_gate_read(struct fake_gates *g, const unsigned *counter);

#endif
