/*
 * Storage: persists the lease engine's changes.
 *
 * A store is used by one thread at a time (the daemon's loop, or its
 * worker while a commit is in flight; never both), except store_sync().
 * Every write is conditional: a change applies only if the stored row
 * still has the owner and token the engine saw (its expiry may be older:
 * the daemon does not write renewals), and the whole batch is one
 * transaction that commits or leaves nothing behind.
 *
 * Functions return 0 or a negative enum store_err; store_errmsg() says
 * why in words.
 */
#ifndef LEASED_STORE_H
#define LEASED_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine.h"
#include "store_err.h"

struct store;

/* Opens (creating if missing) the SQLite database at path. path is
 * borrowed. busy_timeout_ms bounds how long a commit waits for another
 * process's lock. On failure *out is NULL and errmsg (errmsg_len bytes)
 * says why. */
enum store_err store_open(const char *path, int busy_timeout_ms,
                          struct store **out, char *errmsg, size_t errmsg_len);

/* Closes the database. Accepts NULL. */
void store_close(struct store *s);

/* Calls row_cb for every stored row (strings valid during the call only),
 * then sets *floor to the stored token floor. A non-zero return of row_cb
 * stops the scan and is returned. */
enum store_err store_load(struct store *s,
                          int (*row_cb)(void *arg, const struct lease_row *row),
                          void *arg, uint64_t *floor);

/* Applies n changes in one transaction and commits it: it survives a
 * crash of the process, but not a power loss until store_sync(). Deleted
 * rows raise the stored floor. On any error nothing is applied. */
enum store_err store_apply(struct store *s, const struct engine_change *chgs,
                           size_t n);

/* A change of a lease as a watcher sees it (leased.v1's Watch), with
 * the revision its writer gave it. The kinds are the proto's numbers. */
enum store_event_kind {
    STORE_GRANTED = 1, /* a new holder: lease is the new lease */
    STORE_RELEASED,    /* lease, the one that ended */
    STORE_EXPIRED,
    STORE_REVOKED,
};

struct store_event {
    uint64_t revision;
    enum store_event_kind kind;
    struct lease_row lease; /* strings borrowed */
};

/* store_apply, and in the same transaction the events evs[0..nevs)
 * (revisions rising, above every stored one); then only the last `keep`
 * revisions stay (those up to evs' last minus keep are deleted). */
enum store_err store_apply_events(struct store *s,
                                  const struct engine_change *chgs, size_t n,
                                  const struct store_event *evs, size_t nevs,
                                  uint64_t keep);

/* Calls ev_cb for every stored event, oldest first (strings valid during
 * the call only); a non-zero return stops the scan and is returned. */
enum store_err store_load_events(struct store *s,
                                 int (*ev_cb)(void *arg,
                                              const struct store_event *ev),
                                 void *arg);

/* Makes every commit that completed before the call durable (fdatasync
 * of the WAL). Unlike the other calls it may run on one thread while
 * another thread uses the store. Returns STORE_OK, or STORE_ESYNC with
 * errno set; after an error it is unknown whether they are on disk, and
 * the store must not be trusted any more (close it; a new process reads
 * what the disk really holds). */
enum store_err store_sync(struct store *s);

/* Lowers every stored expiry later than cap_ns to cap_ns, in one
 * committed transaction (not synced: a start after a crash caps again),
 * and sets *capped to the number of rows changed. At start, with cap_ns
 * the end of the restart quarantine: a wall clock stepped back across a
 * restart then cannot make a stored expiry outlive the quarantine. */
enum store_err store_cap_expiries(struct store *s, int64_t cap_ns,
                                  size_t *capped);

/* For a restore of an older backup: raises every row's token and the
 * token floor to at least floor (1..2^62), durably, in one
 * transaction, so that every token given from now on is above floor.
 * *raised is the number of rows changed. When the floor was below floor
 * (a restore, not the same flag again), the events kept are forgotten
 * and 'revision_floor' set 10^9 past every revision kept before: the
 * backup's revisions may have gone to other changes since it was taken,
 * and a watcher that saw them must read again. */
enum store_err store_raise_tokens(struct store *s, uint64_t floor,
                                  size_t *raised);

/* Reads the integer meta value under key (*value = 0 if absent), or
 * writes it durably (commit and sync: STORE_ESYNC as store_sync). key is
 * borrowed. */
enum store_err store_get_meta(struct store *s, const char *key, int64_t *value);
enum store_err store_set_meta(struct store *s, const char *key, int64_t value);

/* Calls row_cb for up to limit rows with an owner (released ones are
 * left out) whose session starts with prefix and sorts after `after`
 * (bytewise; "" for the start), in session order, as committed. Strings
 * are valid during the call only. row_cb returns 0 to go on, 1 to stop
 * (the list then returns STORE_OK), or a negative enum store_err, which
 * stops the list and is returned. Uses a connection of its own: it may
 * run on one thread while another commits, one list at a time; its
 * errors are told by store_list_errmsg(). */
enum store_err store_list(struct store *s, const char *prefix,
                          size_t prefix_len, const char *after,
                          size_t after_len, size_t limit,
                          int (*row_cb)(void *arg, const struct lease_row *row),
                          void *arg);
const char *store_list_errmsg(const struct store *s);

/* A consistent copy of the whole database (SQLite's serialization of it:
 * the bytes of a database file, as of one read transaction) into *out,
 * *len bytes, to free with store_snapshot_free(). Uses store_list()'s
 * connection, and so its rules (a thread of its own beside commits, one
 * at a time with lists) and its store_list_errmsg(). */
enum store_err store_snapshot(struct store *s, void **out, size_t *len);
void store_snapshot_free(void *p);

/* The reason of the last error, for logs. */
const char *store_errmsg(const struct store *s);

#endif
