/*
 * A mode: the loop side of leased, which decides the lease and admin calls
 * the front end hands over, stores what they change, and answers them.
 * Two modes sit behind this one interface, as redis's event backends sit
 * behind ae.c:
 *
 *   mode_embedded.c  SQLite in a data directory: an engine in memory
 *                    decides, batches are committed off the loop and
 *                    synced before their answers (group commit);
 *   mode_shared.c    PostgreSQL: the database decides, for any number of
 *                    replicas; batches go through each connection's
 *                    pipeline.
 *
 * main.c picks a table (struct mode_ops) and talks to the mode through
 * mode_arrive(), mode_submit() and mode_close() alone; the mode talks back
 * through the hooks. What both modes do alike is written once, in mode.c:
 * the queue of calls, the counters that keep one session's calls in order,
 * the mapping of a rule's outcome to a reply, the admin answers, the
 * stats and gauges, storage health, and closing.
 *
 * Everything here runs on the loop's thread, but mode_arrive(), which
 * the front end calls on its own thread as each call arrives: a mode
 * that decides some calls there (the embedded one: a renewal) locks what
 * they share with the loop.
 *
 * Adding a third mode: a file with its own struct that starts with a
 * struct mode, an open function that fills it (mode_init()) from the
 * configuration, a submit and a destroy (an arrive if it decides some
 * calls on the front end's thread, else NULL), and its table here.
 */
#ifndef LEASED_MODE_H
#define LEASED_MODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "config.h"
#include "request.h"
#include "rules.h"
#include "siphash.h"

struct engine_change;
struct history;
struct lease_row;
struct mode;
struct pgstore;
struct store;

/* What a mode calls, on the loop, with arg. */
struct mode_hooks {
    /* A request is done: send its reply (exactly once per request). */
    void (*reply)(void *arg, struct request *req);
    /* Storage started failing (false) or works again (true): health. */
    void (*storage)(void *arg, bool ok);
    /* How many new requests should wait before they reach the mode (see
     * frontend_want_requests()); NULL: the default, each. */
    void (*wanted)(void *arg, size_t at);
    /* A sync failed (why borrowed for the call): the caller must end the
     * process without touching the mode again. */
    void (*fatal)(void *arg, const char *why);
    void *arg;
    /* Where a mode that serves Watch puts each change once durable (and
     * the events it kept at its last run, at open), then marks it served
     * (history.h). */
    struct history *history;
};

struct mode_ops {
    const char *name; /* the store it uses, for the logs */
    /* Opens the store as cfg says (cfg borrowed, and must outlive the
     * mode), and makes the mode on loop: *out, or -1 with errmsg (len
     * bytes) set and nothing left open. */
    int (*open)(uv_loop_t *loop, const struct config *cfg,
                const struct mode_hooks *hooks, struct mode **out,
                char *errmsg, size_t len);
    /* NULL, or decides req at once on the calling thread (mode_arrive):
     * true when it did. */
    bool (*arrive)(struct mode *m, struct request *req);
    /* Takes a list of requests (linked by ->next), oldest first. */
    void (*submit)(struct mode *m, struct request *list);
    /* mode_close() was called: stop what is due, and call
     * mode_closed() once nothing is in flight (maybe at once). */
    void (*close)(struct mode *m);
    /* Frees the mode's own parts (its timers are closed). */
    void (*destroy)(struct mode *m);
    /* NULL, or: Waits it has ended (mode_cancelled()). */
    void (*cancelled)(struct mode *m);
    /* NULL, or: leased is draining (mode_drain()). */
    void (*drain)(struct mode *m);
};

extern const struct mode_ops mode_embedded;
extern const struct mode_ops mode_shared;

/* Makes the embedded mode over store (taken: closed by the mode, or at
 * once on failure), loading every stored lease. ttl_ns is the lease
 * lifetime. NULL with errmsg set on failure. (mode_embedded's open, and
 * the unit tests over a fake store.) */
struct mode *mode_embedded_create(uv_loop_t *loop, struct store *store,
                                  int64_t ttl_ns,
                                  const struct mode_hooks *hooks,
                                  char *errmsg, size_t len);

/* The most connections a shared mode takes. */
#define MODE_MAX_CONNECTIONS 16

/* The shared mode's listening connection (Waits): a connected store
 * that pgstore_listen() gave key and pid. */
struct mode_listener {
    struct pgstore *db;
    int32_t key, pid;
};

/* Makes the shared mode over n (1..MODE_MAX_CONNECTIONS) connected
 * stores dbs[0..n) and listening connection l (NULL: none, and Wait is
 * answered UNIMPLEMENTED), all taken: closed by the mode, or at once on
 * failure. NULL when out of memory. (mode_shared's open, and the unit
 * tests over a fake database.) */
struct mode *mode_shared_create(uv_loop_t *loop, struct pgstore *const *dbs,
                                size_t n, const struct mode_listener *l,
                                int64_t ttl_ns, const struct mode_hooks *hooks);

/* Opens n connections to cfg's PostgreSQL (dbs[0..n)), the schema made
 * or checked by the first, which also applies --raise-token-floor.
 * Returns 0, or -1 with errmsg set (naming the flag) and none open. */
int mode_shared_connect(const struct config *cfg, struct pgstore **dbs,
                        size_t n, char *errmsg, size_t len);

/* A call arrived (any thread; before mode_close()): true when the mode
 * decided it at once, with no wait for the loop or the disk (req's reply
 * is set: the caller sends it; only calls that change no owner, so
 * nothing to audit); false when it must be submitted. Every call goes
 * through here first, in the order the calls arrived, and those it did
 * not decide go to mode_submit() in that order. */
bool mode_arrive(struct mode *m, struct request *req);

/* Hands a list of requests (linked by ->next) over, on the loop; not
 * after mode_close(). */
void mode_submit(struct mode *m, struct request *list);

/* Waits for what is in flight, closes the store and every handle, frees
 * the mode, then calls done(arg). No request may be submitted after. */
void mode_close(struct mode *m, void (*done)(void *arg), void *arg);

/* On the loop: the calls of some Waits the mode has ended (the request's
 * `ended` is set): those waiting in line leave it at once, answered
 * CANCELLED, and are never granted. */
void mode_cancelled(struct mode *m);

/* On the loop, as leased begins to drain: every Wait in line is
 * answered UNAVAILABLE "draining" (its caller may wait at another
 * replica), and a Wait decided from now on is answered at once. */
void mode_drain(struct mode *m);

/* Where the mode keeps the leases, for the `started` line: the data
 * directory, or "-". */
const char *mode_where(const struct mode *m);

/* --- For the modes' files -------------------------------------------- */

struct mode_queue {
    struct request *head, *tail;
};

void mode_push(struct mode_queue *q, struct request *r);
struct request *mode_pop(struct mode_queue *q);
/* Puts the list front[..] (linked, last element front_tail) before q's
 * head. */
void mode_push_front(struct mode_queue *q, struct mode_queue *front);

/* Counters of the lease calls ahead of a new one, per session's hash
 * (two sessions may share one: then a call waits when it need not): the
 * calls arrived and not yet decided (embedded) or in flight (shared). */
#define MODE_ORDER_SLOTS 16384

struct mode {
    const struct mode_ops *ops;
    uv_loop_t *loop;
    struct mode_hooks hooks;
    int64_t ttl_ns;
    int64_t start_mono_ns;
    const char *where;
    bool storage_failing;
    struct siphash_key order_key;
    uint32_t order[MODE_ORDER_SLOTS];
    uv_timer_t timer; /* the mode's tick, started by mode_start_timer() */
    void (*tick)(struct mode *m);
    uv_timer_t wake; /* a one-off wake-up, mode_wake_after() */
    void (*on_wake)(struct mode *m);
    int timers_open;
    bool draining; /* mode_drain() was called */
    bool closing;
    void (*done)(void *arg);
    void *done_arg;
};

/* --raise-token-floor's outcome: ok, rows raised (logged), or why not
 * (into errmsg, len bytes). Returns 0 when ok, else -1. */
int mode_floor_raised(const struct config *cfg, bool ok, size_t rows,
                      const char *why, char *errmsg, size_t len);

/* Fills the common part of a new mode (zeroed before). */
void mode_init(struct mode *m, const struct mode_ops *ops, uv_loop_t *loop,
               const struct mode_hooks *hooks, int64_t ttl_ns);

/* Starts m's tick: on_tick every every_ms. */
void mode_start_timer(struct mode *m, uint64_t every_ms,
                      void (*on_tick)(struct mode *m));

/* Calls fn(m) once, after_ms from now, instead of any wake-up set
 * before. */
void mode_wake_after(struct mode *m, uint64_t after_ms,
                     void (*fn)(struct mode *m));

/* Nothing is in flight any more while closing: closes the timers, then
 * destroys the mode and calls the done callback. Once. */
void mode_closed(struct mode *m);

/* Sets req->order_slot for req's session. */
void mode_order_slot(struct mode *m, struct request *req);

/* Answers req, or every request of a list (linked by ->next). */
void mode_answer(struct mode *m, struct request *req);
void mode_answer_list(struct mode *m, struct request *list);

/* Storage failing or working: the gauge and the storage hook, when it
 * changes. */
void mode_set_failing(struct mode *m, bool failing);

/* req, a Wait whose call ended (its `ended`), gets CANCELLED. */
void mode_ended(struct request *req);

/* req gets UNAVAILABLE, why its reason. */
void mode_refuse(struct request *req, const char *why);

/* What a takeover, a renewal or an end of a lease did, for the counters
 * (enum rules_flag, rules.h). */
void mode_count(unsigned flags);

/* Sets req's reply from the outcome of a lease call (Acquire, Renew,
 * Release) under the rules: its code, the lease's token
 * and expiry (RULES_OK), flags an enum rules_flag set (not counted
 * here: a mode counts what it stored). */
void mode_decided(struct mode *m, struct request *req,
                  enum rules_code code, uint64_t token, int64_t expiry_ns,
                  unsigned flags);

/* Sets the reply of an admin call before it is run: OK, and an answer
 * with room for what its op returns. Returns -1 (req refused, to be
 * answered) when out of memory. */
int mode_admin_start(struct request *req);

/* Get's answer: row (NULL: no lease, or released), live or not. */
void mode_admin_get(struct request *req, const struct lease_row *row,
                    bool live);

/* Revoke's answer: row, the lease as it was (NULL: nobody held it), and
 * whether it ended (false: its token is another than req->token). */
void mode_admin_revoked(struct request *req, const struct lease_row *row,
                        bool revoked);

/* The counts of the leases as the store has them. */
struct mode_counts {
    uint64_t live, entries, high_water;
    int64_t quarantine_remaining_ns;
};

/* Stats from c and the counters. */
void mode_admin_stats(const struct mode *m, struct request *req,
                      const struct mode_counts *c);

/* The gauges from c (the live count only when live_known). */
void mode_set_gauges(const struct mode_counts *c, bool live_known);

#endif
