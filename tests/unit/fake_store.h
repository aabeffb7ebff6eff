/*
 * A fake store for the tests of daemon/mode_embedded.c: storage/store.h over
 * rows in memory, whose timing and failures are the test's.
 *
 * What it is:
 *  - each kind of write (enum fake_call) can be held: its calls wait at a
 *    gate (fake_gate.h) until the test lets them go, one (fake_step) or
 *    all (fake_release); and it can be made to fail (fake_fail);
 *  - a model of the disk: every commit is numbered, and a sync makes
 *    durable the commits that had ended when it began, so that a test
 *    can ask, when a reply arrives, whether what it promises was
 *    committed (fake_committed) and synced (fake_synced);
 *  - a checker of store.h's one rule on threads: apart from store_sync,
 *    no two calls at once (fake_overlaps).
 *
 * What it is not: a storage engine. store_open, store_raise_tokens,
 * store_list and store_snapshot fail (the tests open it with fake_open();
 * List and Snapshot are not tested here).
 *
 * Threads: the store's calls run on the mode's loop or its workers,
 * the fake_* calls on the test's thread (the one that called
 * fake_create, the loop's). One mutex guards it all. No gate holds a
 * call longer than FAKE_GATE_MS: it then lets the call go and counts a
 * timeout (fake_timeouts), so that a test never hangs on a gate.
 */
#ifndef LEASED_FAKE_STORE_H
#define LEASED_FAKE_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define FAKE_GATE_MS 10000

struct fake;
struct store;

enum fake_call {
    FAKE_APPLY,    /* store_apply */
    FAKE_SYNC,     /* store_sync */
    FAKE_SET_META, /* store_set_meta */
    FAKE_NCALLS,
};

/* Creates an empty fake. changed(arg) is called, from whichever thread,
 * after each change a test may wait for (a call entering, waiting at its
 * gate, returning), with the fake's lock held: it must not call the fake
 * (uv_async_send is what it is for). Returns NULL when out of memory. */
struct fake *fake_create(void (*changed)(void *arg), void *arg);

/* Frees the fake. Its store must be closed. Accepts NULL. */
void fake_destroy(struct fake *f);

/* The store over f, for mode_embedded_create (which takes it and closes it);
 * one at a time. NULL when out of memory. */
struct store *fake_open(struct fake *f);
bool fake_closed(struct fake *f);

/* Calls of kind c wait at their gate from now on. */
void fake_hold(struct fake *f, enum fake_call c);
/* Lets one call of kind c go past its gate: one waiting, or the next. */
void fake_step(struct fake *f, enum fake_call c);
/* Lets every call of kind c go, and holds none any more. */
void fake_release(struct fake *f, enum fake_call c);
/* Calls of kind c end with err from now on (STORE_OK: as they should),
 * decided when they pass their gate. A failed store_sync sets errno to
 * EIO; a store_set_meta failing with STORE_ESYNC commits but is not
 * synced. */
void fake_fail(struct fake *f, enum fake_call c, int err);

/* Calls of kind c that entered, wait at the gate now, returned. */
unsigned fake_entered(struct fake *f, enum fake_call c);
unsigned fake_waiting(struct fake *f, enum fake_call c);
unsigned fake_returned(struct fake *f, enum fake_call c);

/* Sets a meta value, as if stored before the mode started. */
void fake_put_meta(struct fake *f, const char *key, int64_t value);
/* The meta value under key (0 if absent). */
int64_t fake_meta(struct fake *f, const char *key);

/* One store_set_meta call of a key: the value, what it returned, and
 * whether it ran on the test's thread (the loop). */
struct fake_write {
    int64_t value;
    int err;
    bool on_loop;
};

/* The store_set_meta calls of key that returned, oldest first: copies up
 * to max of them into w and returns how many there were. */
size_t fake_writes(struct fake *f, const char *key, struct fake_write *w,
                   size_t max);

/* The number of changes of each store_apply that committed, oldest
 * first: copies up to max into sizes and returns how many there were. */
size_t fake_applied(struct fake *f, size_t *sizes, size_t max);

/* Whether a committed change put session's row at owner, token and
 * expiry_ns (any expiry when expiry_ns is -1). Owner "" is a release. */
bool fake_committed(struct fake *f, const char *session, const char *owner,
                    uint64_t token, int64_t expiry_ns);
/* Whether a committed change gave session to owner with token and a
 * sync that began after that commit ended succeeded. */
bool fake_synced(struct fake *f, const char *session, const char *owner,
                 uint64_t token);

/* Gates that timed out, and calls that overlapped another (store_sync
 * apart): both must stay 0. */
unsigned fake_timeouts(struct fake *f);
unsigned fake_overlaps(struct fake *f);

#endif
