/*
 * The PostgreSQL store: the database of leased's shared mode, where any
 * number of leased replicas share one database and the database decides.
 *
 * Unlike the SQLite store (store.h), this one does not persist what an
 * engine in memory decided: the rules of Acquire, Renew and Release run
 * inside the database, as SQL functions evaluated against the stored row
 * with the database's clock, so that every replica agrees on who holds
 * what and until when. The schema and those functions are in pgsql.c.
 *
 * One connection, used by one thread at a time. Batches of lease calls go
 * through a pipeline without blocking (pgstore_send() below); every other
 * call blocks for at most the timeout given at open. Calls return
 * STORE_OK or a negative enum store_err; pgstore_errmsg() says why in
 * one line, never with a password in it.
 */
#ifndef LEASED_POSTGRES_H
#define LEASED_POSTGRES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine.h"
#include "rules.h"
#include "store.h"
#include "store_err.h"

struct pgstore_options {
    const char *conninfo; /* anything libpq takes; borrowed for the
                             store's life */
    int64_t ttl_ns;       /* must be the one stored (the first replica
                             stores its own) */
    int64_t max_skew_ns;  /* between database hosts' clocks */
    int timeout_ms;       /* the most one call may take */
};

struct pgstore;

/* Checks o->conninfo (a clear error for one libpq cannot parse), then
 * connects as pgstore_connect(). On failure *out is NULL and errmsg (len
 * bytes) says why; the return value says which kind of failure. */
enum store_err pgstore_open(const struct pgstore_options *o,
                            struct pgstore **out, char *errmsg, size_t len);

/* What a connection found. */
struct pgstore_primary {
    /* The primary is not the one the database last saw, or not the one
     * this store's last connection saw (a failover, or a restart of the
     * database): takeovers of leases that were held wait until the
     * quarantine stored with the first replica to see it ends. */
    bool changed;
    int64_t started_us; /* the primary's pg_postmaster_start_time() */
    int64_t quarantine_remaining_ns; /* 0 when none */
};

/* (Re)connects, closing any connection first: creates the schema if the
 * database has none (once, whatever the number of replicas starting),
 * checks its version and TTL, and compares the primary with the one the
 * database last saw (see struct pgstore_primary; may be NULL). */
enum store_err pgstore_connect(struct pgstore *p,
                               struct pgstore_primary *primary);

/* Closes the connection and frees the store. Accepts NULL. */
void pgstore_close(struct pgstore *p);

/* The steps of a Wait in the database's line (pgsql.c): join it (an
 * Acquire that, refused, joins the line), look again (at the time its
 * lease may end), leave (the call ended). */
enum pgstore_line {
    PGSTORE_LINE_NONE,
    PGSTORE_LINE_JOIN = 5,
    PGSTORE_LINE_LOOK = 6,
    PGSTORE_LINE_LEAVE = 7,
};

/* The codes of a step, beside enum rules_code's: in line (expiry_ns:
 * when the lease may end), and not in line (granted, and told through
 * pgstore_notified(); or, after a leave, gone: RULES_NOOP). */
#define PGSTORE_IN_LINE 5
#define PGSTORE_NOT_IN_LINE 6

/* One lease call and its outcome. Strings are borrowed. */
struct pgstore_call {
    enum rules_op op;
    enum pgstore_line line; /* a Wait's step: op is RULES_ACQUIRE, token
                               the call's number at this replica */
    const char *session;
    size_t session_len;
    const char *owner;
    size_t owner_len;
    uint64_t token; /* Renew, Release */

    /* Set when pgstore_done() gives the batch back with STORE_OK: */
    int code;          /* enum rules_code */
    uint64_t granted;  /* the lease's token (RULES_OK) */
    int64_t expiry_ns; /* its expiry on the database's clock */
    unsigned flags;    /* enum rules_flag */
};

/* --- Deciding: batches in a pipeline, without blocking --------------
 *
 * The caller watches pgstore_socket() (readable always; writable while
 * pgstore_flush() says some is left) and sends batches, up to
 * PGSTORE_PIPELINE_MAX in flight: the database decides each right after
 * the one ahead of it, in the order sent, so calls on one session are
 * decided in their order whichever batch they are in. None of these
 * calls waits for the network.
 *
 * STORE_EDOWN from any of them means the connection broke, went out of
 * step or missed a batch's deadline (the timeout given at open, from its
 * send; pgstore_done() checks it, so call that now and then while
 * batches are in flight): whether the batches in flight committed is
 * unknown. The caller
 * stops watching the socket, then calls pgstore_disconnect(), which drops
 * them, and pgstore_connect() again. */
#define PGSTORE_PIPELINE_MAX 4

/* Sends calls[0..n) (n >= 1; borrowed until pgstore_done() gives them
 * back) to be decided in one transaction. Calls on one session are
 * decided in their order in calls[]; rows are locked in session order,
 * so that batches of several connections never deadlock. */
enum store_err pgstore_send(struct pgstore *p, struct pgstore_call *calls,
                            size_t n);

/* Writes what is queued for the socket: 0 when all is written, 1 when
 * some is left (wait until the socket is writable), or STORE_EDOWN. */
int pgstore_flush(struct pgstore *p);

/* Takes what the socket has (call it when it is readable). */
int pgstore_read(struct pgstore *p);

/* The oldest batch in flight, once its answer is all there: returns 1,
 * *calls the array it was sent with, and *err its outcome: STORE_OK,
 * the transaction committed (durable as the database's settings make
 * it: synchronous_commit) and every call is decided, *db_now_ns the
 * database's clock during it (0 when nothing had to be sent); or
 * STORE_EFAIL, nothing was applied. Returns 0 while its answer is not
 * all there, or STORE_EDOWN. */
int pgstore_done(struct pgstore *p, struct pgstore_call **calls, int *err,
                 int64_t *db_now_ns);

/* The replica's listening connection (pgstore_listen()) that the Waits
 * a batch sends from now on name; 0, 0 for none. */
void pgstore_set_listener(struct pgstore *p, int32_t key, int32_t pid);

/* The connection's socket, -1 when there is none. */
int pgstore_socket(const struct pgstore *p);

/* Closes the connection (if any), dropping the batches in flight. */
void pgstore_disconnect(struct pgstore *p);

/* How many warnings that change no outcome (a trigger's, transaction ID
 * wraparound coming near) the database sent since the last call, with
 * the last one's message in msg[0..len) (without the password; msg is
 * left alone when there is none). Only from the thread that has the
 * connection. */
uint64_t pgstore_warnings(struct pgstore *p, char *msg, size_t len);

/* --- Blocking calls: only while no batch is in flight ------------------ */

/* Reads one session's lease: *found is false when there is none or it is
 * released. row's strings are valid until the next call on p. */
enum store_err pgstore_get(struct pgstore *p, const char *session,
                           size_t session_len, struct lease_row *row,
                           bool *live, bool *found);

/* Calls row_cb for up to limit held leases whose session starts with
 * prefix and sorts after `after` (bytewise), in session order. Strings
 * are valid during the call only. row_cb returns 0 to go on, 1 to stop
 * (the list then returns STORE_OK), or a negative enum store_err, which
 * stops the list and is returned. */
enum store_err
pgstore_list(struct pgstore *p, const char *prefix, size_t prefix_len,
             const char *after, size_t after_len, size_t limit,
             int (*row_cb)(void *arg, const struct lease_row *row, bool live),
             void *arg);

/* An operator's Revoke of session: ends its lease whoever holds it (token
 * 0), or only while its token is token, as a Release would. *found is
 * false when nobody holds it; otherwise row is the lease as it was
 * (strings valid until the next call on p) and *revoked says whether it
 * ended (false: its token is another). */
enum store_err pgstore_revoke(struct pgstore *p, const char *session,
                              size_t session_len, uint64_t token,
                              struct lease_row *row, bool *found,
                              bool *revoked);

struct pgstore_stats {
    uint64_t live, entries, high_water;
    int64_t quarantine_remaining_ns;
};

enum store_err pgstore_stats(struct pgstore *p, struct pgstore_stats *st);

/* Garbage collection: deletes up to max rows that have been expired or
 * released for longer than a TTL (never one a quarantine covers), and
 * raises the stored token floor to their tokens. One replica at a time
 * collects; the others return at once with nothing done. *collected:
 * rows deleted; *expired: of those, leases still held when they ran out. */
enum store_err pgstore_collect(struct pgstore *p, size_t max, size_t *collected,
                               size_t *expired);

/* For a move from the SQLite store: writes rows[0..n) as they are
 * (owner, token, expiry) into a database that holds no lease yet, raises
 * the token floor to at least floor, and starts a quarantine of
 * quarantine_ns on the database's clock during which the held ones count
 * as live (their holders may still be renewing elsewhere), all in one
 * transaction. STORE_ECONFIG when the database holds leases. */
enum store_err pgstore_import(struct pgstore *p, const struct lease_row *rows,
                              size_t n, uint64_t floor, int64_t quarantine_ns);

/* After a restore of an older backup of the database: raises every
 * stored token and the token floor to at least floor, and starts a
 * quarantine of TTL + maximum skew during which the leases held in the
 * backup count as live, in one transaction that no batch overlaps. Every
 * token given from then on is above floor. *raised: rows whose token
 * was raised. When the floor was below floor (a restore, not the same
 * flag again), Watch's events are deleted and their revisions moved on
 * (pgsql.h). */
enum store_err pgstore_raise_tokens(struct pgstore *p, uint64_t floor,
                                    size_t *raised);

/* --- Listening: the replica's connection for its Waits' grants -------
 *
 * A connection that decides nothing: it holds advisory lock (*key, *pid)
 * for as long as it is open, which keeps its Waits in their lines, and
 * hears of their grants. Blocking; right after pgstore_connect(). */
enum store_err pgstore_listen(struct pgstore *p, int32_t *key, int32_t *pid);

/* Takes what the listening connection's socket has (call it when it is
 * readable) and calls granted(arg, call, token, expiry_ns, flags) for
 * each grant it heard of; *events is set when new events were stored
 * (see "Events"). STORE_OK, or STORE_EDOWN (the connection is lost: so
 * are the grants it had not heard of yet). */
int pgstore_notified(struct pgstore *p,
                     void (*granted)(void *arg, uint64_t call, uint64_t token,
                                     int64_t expiry_ns, unsigned flags),
                     void *arg, bool *events);

/* --- Events: the changes Watch tells (blocking calls) -----------------
 *
 * Every change of owner is stored with the transaction that made it, as
 * an event with the next revision (in commit order across replicas), and
 * the listening connections hear that there are new ones. */

/* Passes up to max events after revision `after` to ev_cb, in order
 * (strings valid during the call only; a non-zero return stops it:
 * STORE_ENOMEM), and the newest revision stored into *top (the events
 * after `after` may have been deleted: the first one passed is then
 * not after + 1). */
enum store_err pgstore_events(struct pgstore *p, uint64_t after, size_t max,
                              int (*ev_cb)(void *arg,
                                           const struct store_event *ev),
                              void *arg, uint64_t *top);

/* Tells up to max expiries, as they happen: held leases past their
 * expiry, not told yet, become EXPIRED events. One replica at a time
 * tells; the others return at once. */
enum store_err pgstore_tell(struct pgstore *p, size_t max);

/* Deletes the events but the last keep revisions. */
enum store_err pgstore_compact(struct pgstore *p, uint64_t keep);

/* The reason of the last error, for logs and replies. */
const char *pgstore_errmsg(const struct pgstore *p);

#endif
