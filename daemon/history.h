/*
 * The last changes of leases, for Watch (leased.v1.Leases/Watch): the
 * last `capacity` events that are durable, in the order of their
 * revisions, which follow each other without a gap. The loop appends
 * each event once the disk holds it; watchers on the completion-queue
 * thread read from the revision they have seen. Both under one mutex,
 * held by a reader only while it encodes what it read.
 *
 * The embedded mode keeps the same events in its store (storage/store.h,
 * store_apply_events) and loads them here at start, so a watcher that
 * comes back after a restart with its last revision finds what followed
 * it, or learns that it is gone.
 */
#ifndef LEASED_HISTORY_H
#define LEASED_HISTORY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store.h"

struct history;

/* capacity: how many events it keeps (>= 1). NULL when out of memory. */
struct history *history_create(size_t capacity);
void history_destroy(struct history *h); /* accepts NULL */

/* Whether a mode serves Watch: set by the mode at open, once the stored
 * events are loaded. Until then (and in a mode without it) Watch is
 * answered UNIMPLEMENTED. */
void history_set_served(struct history *h);
bool history_served(struct history *h);

/* Called (from the appending thread, with no lock held) after events
 * were appended; set once, before any append that it must hear of. */
void history_set_wake(struct history *h, void (*wake)(void *arg), void *arg);

/* Appends copies of evs[0..n), whose revisions follow the newest kept
 * (the first one after a start may be any), dropping the oldest beyond
 * capacity, then calls the wake function. Returns -1 (nothing appended)
 * when out of memory or when a revision does not follow. */
int history_append(struct history *h, const struct store_event *evs, size_t n);

/* For a writer that commits before it syncs (the embedded mode), on one
 * thread: history_stage() copies evs[0..n), committed by commit number
 * `commit`, and history_publish() appends, in order, every staged event
 * whose commit is `synced` or below, as history_append() would (then
 * they are on disk). Staging returns -1 (nothing staged) when out of
 * memory; publishing, when a revision does not follow (a bug). */
int history_stage(struct history *h, const struct store_event *evs, size_t n,
                  uint64_t commit);
int history_publish(struct history *h, uint64_t synced);

/* With no event kept: the next one's revision follows `revision`, and
 * every revision up to it counts as no longer kept (a store whose
 * revisions were moved on at a restore). */
void history_start_after(struct history *h, uint64_t revision);

/* For a copy of the events of a store that others write (the shared
 * mode's, of the database's): drops every event kept, and the next one's
 * revision follows `revision` (every revision up to it counts as no
 * longer kept), then wakes the watchers. For a copy that found the
 * events after its newest gone, or the store's revisions behind them. */
void history_restart(struct history *h, uint64_t revision);

/* A copy may lag its store: a revision above its newest may be the
 * store's already. The writer marks the history so (before it is
 * served); a reader that finds itself ahead then asks: history_ask()
 * gives it a ticket (0 when the history is no copy: it is ahead), and
 * once history_answered() says that a read of the store that began after
 * the ticket was given was appended, a reader still ahead is ahead of
 * the store. The writer takes history_asked() before a read of the
 * store, and history_answer() with it once the read is appended (which
 * wakes the watchers). */
void history_set_copy(struct history *h);
uint64_t history_ask(struct history *h);
bool history_answered(struct history *h, uint64_t ticket);
uint64_t history_asked(struct history *h);
void history_answer(struct history *h, uint64_t ticket);

/* The newest revision (0: none yet). */
uint64_t history_newest(struct history *h);

/* Which events a watcher wants: one session's, or a prefix's. */
struct history_filter {
    const char *key;
    size_t key_len;
    bool prefix;
};

enum history_read {
    HISTORY_READ,      /* *seen is the last revision looked at */
    HISTORY_COMPACTED, /* the revision after `after` is no longer kept */
    HISTORY_AHEAD,     /* after is above the newest revision */
};

/* Looks at the events after revision `after`, in order, and passes up
 * to max of those f matches to fn (events valid during the call only,
 * which is made with the lock held: it must not call history_*), even
 * none; *seen is the last revision looked at (no further than the last
 * event passed when max of them were), *oldest the oldest kept (0:
 * none). */
enum history_read history_read(struct history *h, uint64_t after,
                               const struct history_filter *f, size_t max,
                               void (*fn)(void *arg,
                                          const struct store_event *const *evs,
                                          size_t n, uint64_t seen),
                               void *arg, uint64_t *seen, uint64_t *oldest);

size_t history_capacity(const struct history *h);

/* Passes the session of each event after revision `after` to fn (with
 * the lock held: fn must not call history_*), and returns the newest
 * revision; HISTORY_COMPACTED (fn not called) when the event after
 * `after` is no longer kept. For a reader that wakes only the watchers
 * of the sessions that changed. */
enum history_read history_sessions(struct history *h, uint64_t after,
                                   void (*fn)(void *arg, const char *session,
                                              size_t len),
                                   void *arg, uint64_t *newest);

/* The memory the events take, in bytes (for tests and benchmarks). */
size_t history_bytes(struct history *h);

#endif
