/*
 * The shared mode (see mode.h): a replica over PostgreSQL. It keeps no
 * lease state: it hands each batch of calls to the database, which
 * decides (see storage/postgres.h), and answers once the batch's
 * transaction has committed.
 *
 * The replica has a few connections to the database (--postgres-
 * connections), each a `slot`. Lease calls go in batches, one
 * transaction each (group commit over the network), through the
 * connection's pipeline: the loop sends a batch and watches the socket
 * for its answer, and a second batch waits at the database behind the
 * one it is deciding, so the database starts it the moment the first
 * commits, with no thread between the loop and the network. Lease calls
 * that arrive while every pipeline is full wait (in the front end's
 * hand-off, which then does not wake the loop for each, and in
 * `leases`), and the next batch takes all of them (up to MAX_BATCH).
 *
 * The calls of one session are decided in the order they arrived: while
 * a session has calls in flight on one connection, its later calls go
 * on the same one (whose pipeline decides in the order sent) or wait.
 * A reply leaves only once its batch's commit returned, so an OK is as
 * durable as the database makes a commit (with a synchronous standby: on
 * two hosts). The database locks rows in session order in each batch, so
 * batches of several connections and replicas never deadlock.
 *
 * Everything else a connection does (admin calls, garbage collection,
 * (re)connecting) is a blocking job on a worker thread, on a connection
 * with no batch in flight, whose socket the loop does not watch
 * meanwhile: the connection is then the worker's. A slot's life is one
 * state machine (core/sm.h):
 *
 *   DOWN --> CONNECTING --> READY <--> ADMIN, COLLECTING
 *     ^          |            |            |
 *     +----------+------------+------------+  (lost, or failed to connect)
 *
 * READY is the loop's (batches go only there); the three others are a
 * job's, on the worker.
 * Admin calls take turns with the batches, one per drained pipeline, so
 * that neither starves the other, and so does a due collection.
 *
 * When a connection is lost (a broken socket, a missed deadline), the
 * batches in flight on it get UNAVAILABLE (their commits may or may not
 * have happened: the client retries, which the rules make safe), and the
 * slot reconnects, at once and then with a backoff up to a second, and
 * so do the idle ones; those a job or batches have are doubted until the
 * job or a batch is back.
 * While no slot is connected (and undoubted), health says NOT_SERVING,
 * before the lost batches are answered, and every call is answered
 * UNAVAILABLE at once instead of waiting. A reconnection that
 * finds a different primary (failover, or the database restarted) is
 * logged and counted once per replica; the database itself holds the
 * quarantine every replica honours.
 *
 * A Wait waits in the database's line of its session, one line for every
 * replica; the replica has one more connection, its listening one, that
 * keeps its waiters' places and hears of their grants (see "Waits"
 * below). The same connection keeps the replica's copy of the events
 * Watch tells, which the database stores (see "Events" below).
 *
 * The database's clock decides expiry. Each batch also reads it, and each
 * slot compares its progress with the monotonic clock's between batches:
 * a jump of more than CLOCK_STEP_NS (beyond what the two round trips can
 * explain) is a step of the database host's wall clock, logged and
 * counted.
 */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "admin.h"
#include "clock.h"
#include "history.h"
#include "log.h"
#include "metrics.h"
#include "mode.h"
#include "nanotime.h"
#include "pg_feed.h"
#include "postgres.h"
#include "rules.h"
#include "sm.h"

#define MAX_BATCH 1024
#define PIPELINE 2 /* batches in flight on a connection */
#define TICK_MS 100
#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 1000
#define COLLECT_MAX 1024
#define COLLECT_MIN_MS 1000
#define COLLECT_MAX_MS 30000
#define CLOCK_STEP_NS INT64_C(1000000000)
#define LINE_BUCKETS 4096
#define LOOK_SLACK_NS INT64_C(1000000) /* after a lease's end, a look */
#define LINE_RETRY_NS (BACKOFF_MIN_MS * INT64_C(1000000))
#define EVENTS_MAX 1024 /* read at a time, and half the history at most */
#define READ_MS 20      /* events read this often at most */
#define TELL_MS 250     /* while it has watchers, expiries told this often */
#define TELL_MAX 1024
#define COMPACT_MS 1000

static_assert(PIPELINE <= PGSTORE_PIPELINE_MAX, "the store's pipeline");
static_assert(MODE_MAX_CONNECTIONS <= UINT8_MAX, "inflight_on");
/* --postgres-connections fills an array of this many. */
static_assert(CONFIG_MAX_PG_CONNECTIONS <= MODE_MAX_CONNECTIONS,
              "--postgres-connections takes more than a replica has room for");

enum slot_state {
    SLOT_DOWN,       /* no connection; the next attempt at next_connect_ms */
    SLOT_CONNECTING, /* a job: connecting */
    SLOT_READY,      /* connected, the loop's: batches in flight or none */
    SLOT_ADMIN,      /* a job: an admin call */
    SLOT_COLLECTING, /* a job: garbage collection */
    SLOT_EVENTS,     /* a job of the listening connection's: events */
    SLOT_NSTATES
};

static const struct sm_conf slot_states[SLOT_NSTATES] = {
    [SLOT_DOWN] = {"DOWN", 0, SM_TO(SLOT_CONNECTING)},
    [SLOT_CONNECTING] = {"CONNECTING", 0,
                         SM_TO(SLOT_READY) | SM_TO(SLOT_DOWN)},
    [SLOT_READY] = {"READY", SM_INITIAL,
                    SM_TO(SLOT_ADMIN) | SM_TO(SLOT_COLLECTING) |
                        SM_TO(SLOT_EVENTS) | SM_TO(SLOT_DOWN)},
    [SLOT_ADMIN] = {"ADMIN", 0, SM_TO(SLOT_READY)},
    [SLOT_COLLECTING] = {"COLLECTING", 0, SM_TO(SLOT_READY)},
    [SLOT_EVENTS] = {"EVENTS", 0, SM_TO(SLOT_READY)},
};

struct replica;

/* A batch in flight: its requests, in order, and their calls. */
struct batch {
    struct request *list;
    struct pgstore_call *calls; /* MAX_BATCH, one per request */
    size_t ncalls;
    int64_t sent_ns;   /* monotonic */
    int64_t db_now_ns; /* the database's clock as it decided */
};

/* One connection to the database. */
struct slot {
    struct replica *r;
    struct pgstore *db;
    /* Its pipeline, oldest first. */
    struct batch batches[PIPELINE];
    size_t first, nbatches;
    uv_poll_t *poll; /* its socket, while READY */
    bool writing;    /* the poll waits for writable too */

    struct sm sm; /* enum slot_state */
    /* Another connection was lost while a job or batches had this one:
     * most likely lost too, so not counted as serving until the job or a
     * batch is back. */
    bool doubted;
    /* The job on the worker, and what it left. */
    uv_work_t work;
    struct request *admin; /* SLOT_ADMIN */
    int err;
    char errmsg[256];
    size_t collected, expired;
    struct pgstore_stats stats;
    struct pgstore_primary primary;

    int32_t listen_key, listen_pid; /* the listener's, once connected */
    int backoff_ms;
    int64_t next_connect_ms;
    /* The database clock's offset from the monotonic one at the last
     * batch, and that batch's round trip. */
    bool have_offset;
    int64_t offset_ns, offset_rtt_ns;
};

struct replica {
    /* The common part; its order counters count the lease calls in
     * flight, and inflight_on says on which slot. */
    struct mode base;
    struct mode_queue leases, admins;
    uint8_t inflight_on[MODE_ORDER_SLOTS];
    struct slot slots[MODE_MAX_CONNECTIONS];
    size_t nslots;
    bool admin_turn; /* the next job is an admin call's, if one waits */
    bool collecting; /* a slot is collecting garbage */
    int64_t next_collect_ms;
    struct pgstore_stats last_stats; /* the last the database gave */
    int64_t primary_seen_us; /* the primary start last logged as new */
    struct log_limit fail_log, warn_log;
    /* Waits (see "Waits" below): the listening connection (none in the
     * unit tests' replicas), its lock while it is READY (0, 0 when not),
     * how many times it was lost, and this replica's Waits in the
     * database's lines, by number. */
    struct slot listener;
    bool has_listener;
    int32_t line_key, line_pid;
    uint32_t line_gen;
    uint64_t next_call;
    struct request *line[LINE_BUCKETS];
    size_t nline, njoined; /* in the table; of those, in a line for sure */
    int64_t look_due_ns;   /* the wake-up set (monotonic), 0 when none */
    /* Events (see "Events" below): the copy (NULL: none kept), whether
     * a read is due, and when to tell expiries, compact or try again;
     * the listening connection's job: what it does, and what it read. */
    struct history *history;
    bool events_due;
    int64_t next_read_ms, next_tell_ms, next_compact_ms, events_retry_ms;
    bool feed_tell, feed_compact, feed_more;
    uint64_t feed_after, feed_ticket;
    size_t feed_max;
    struct feed feed;
};

static size_t slot_index(const struct slot *sl)
{
    return (size_t)(sl - sl->r->slots);
}

/* Only READY has batches and a watched socket; a job has the connection
 * to itself; an admin job, its call. */
static bool slot_invariant(const struct sm *sm, int prev)
{
    const struct slot *sl = container_of(sm, struct slot, sm);
    (void)prev;
    enum slot_state st = (enum slot_state)sm_state(sm);
    if (st == SLOT_READY)
        return sl->admin == NULL && sl->nbatches <= PIPELINE;
    return sl->poll == NULL && sl->nbatches == 0 &&
           (sl->admin != NULL) == (st == SLOT_ADMIN);
}

/* Whether sl is connected, as far as the loop knows. */
static bool connected(const struct slot *sl)
{
    int st = sm_state(&sl->sm);
    return st != SLOT_DOWN && st != SLOT_CONNECTING;
}

static bool ready(const struct slot *sl)
{
    return sm_state(&sl->sm) == SLOT_READY;
}

/* Whether a job on the worker has sl's connection. */
static bool working(const struct slot *sl)
{
    return !ready(sl) && sm_state(&sl->sm) != SLOT_DOWN;
}

static bool serving(const struct replica *r)
{
    return !r->base.storage_failing;
}

/* Some slot is connected, or none is any more: tell the owner (health). */
static void update_serving(struct replica *r)
{
    bool any = false;
    for (size_t i = 0; i < r->nslots; i++)
        any = any || (connected(&r->slots[i]) && !r->slots[i].doubted);
    mode_set_failing(&r->base, !any);
}

/* --- Watching a connection's socket ------------------------------------ */

static void on_poll(uv_poll_t *h, int status, int events);

static void free_handle(uv_handle_t *h)
{
    free(h);
}

/* Stops watching sl's socket: before the connection is closed, or given
 * to a job. uv_close() forgets the descriptor at once (the handle is
 * freed later), so it may be closed then. */
static void unwatch(struct slot *sl)
{
    if (sl->poll == NULL)
        return;
    uv_close((uv_handle_t *)sl->poll, free_handle);
    sl->poll = NULL;
}

/* Watches sl's socket for readable, and writable when some of what was
 * sent is left to write. */
static int watch(struct slot *sl, bool writing)
{
    if (sl->poll == NULL) {
        uv_poll_t *h = malloc(sizeof(*h));
        if (h == NULL)
            return UV_ENOMEM;
        int rc = uv_poll_init(sl->r->base.loop, h, pgstore_socket(sl->db));
        if (rc != 0) {
            free(h);
            return rc;
        }
        h->data = sl;
        sl->poll = h;
    } else if (writing == sl->writing) {
        return 0;
    }
    sl->writing = writing;
    return uv_poll_start(sl->poll,
                         UV_READABLE | (writing ? UV_WRITABLE : 0), on_poll);
}

/* --- Losing a connection ----------------------------------------------- */

/* Closes sl's connection (the loop's: no job runs on it) and has it
 * reconnect at once. */
static void disconnect(struct slot *sl)
{
    unwatch(sl);
    pgstore_disconnect(sl->db);
    sm_move(&sl->sm, SLOT_DOWN);
    sl->doubted = false; /* down, which says more */
    sl->next_connect_ms = nanotime_mono_ms();
    sl->backoff_ms = BACKOFF_MIN_MS;
}

/* A job or a batch failed, sl->errmsg says why: count it, log it (at
 * most a line a second). After a lost connection (sl->err STORE_EDOWN),
 * the idle ones reconnect too, whose connections are most likely lost
 * as well (the server died) but would not say so before their next use,
 * and those a job or batches have are doubted until one is back. */
static void failed(struct slot *sl, const char *what)
{
    struct replica *r = sl->r;
    atomic_fetch_add(&metrics.pg_errors, 1);
    uint64_t held;
    char why[256];
    log_quotable(why, sizeof(why), sl->errmsg, strlen(sl->errmsg));
    if (log_limit_pass(&r->fail_log, clock_mono_ns(), &held))
        log_warn("database_failed", "during=%s error=\"%s\" not_logged=%llu",
                 what, why, (unsigned long long)held);
    if (sl->err != STORE_EDOWN || !ready(sl))
        return;
    for (size_t i = 0; i < r->nslots; i++) {
        struct slot *o = &r->slots[i];
        if (o == sl || (ready(o) && o->nbatches == 0))
            disconnect(o);
        else if (connected(o))
            o->doubted = true;
    }
    update_serving(r);
}

/* Something the loop did on sl failed with err (why: NULL for the
 * store's reason): as failed(). */
static void loop_failed(struct slot *sl, int err, const char *why,
                        const char *what)
{
    snprintf(sl->errmsg, sizeof(sl->errmsg), "%s",
             why != NULL ? why : pgstore_errmsg(sl->db));
    sl->err = err;
    failed(sl, what);
}

/* Takes the oldest batch in flight on sl off its pipeline. */
static struct batch *pop_batch(struct slot *sl)
{
    struct batch *b = &sl->batches[sl->first];
    sl->first = (sl->first + 1) % PIPELINE;
    sl->nbatches--;
    return b;
}

static void answer(struct slot *sl, struct batch *b, bool ok);

/* sl's connection broke while the loop drove it (why: NULL for the
 * store's reason): it is closed, with the others it most likely shares
 * the fate of, and then every batch in flight on it is answered, lost:
 * in that order, so that a caller told UNAVAILABLE already finds health
 * NOT_SERVING when no connection is left. */
static void lost(struct slot *sl, const char *why)
{
    assert(ready(sl)); /* so failed() closes it */
    struct batch gone[PIPELINE]; /* off the slot: a closed one has none */
    size_t n = 0;
    while (sl->nbatches > 0) {
        struct batch *b = pop_batch(sl);
        gone[n++] = *b;
        b->list = NULL;
    }
    loop_failed(sl, STORE_EDOWN, why, "batch");
    for (size_t i = 0; i < n; i++)
        answer(sl, &gone[i], false);
}

/* --- Batches, on the loop ---------------------------------------------- */

static enum rules_op rules_op_of(enum request_op op)
{
    switch (op) {
    case OP_ACQUIRE:
    case OP_WAIT: /* an Acquire that waits in line: its steps' op */
        return RULES_ACQUIRE;
    case OP_RENEW:
        return RULES_RENEW;
    case OP_RELEASE:
        return RULES_RELEASE;
    default:
        abort(); /* only lease calls are batched */
    }
}

/* --- Waits: the database's lines ---------------------------------------
 *
 * A Wait goes to the database as an Acquire that, refused because
 * another holds the lease, joins its session's line there
 * (PGSTORE_LINE_JOIN). From then on it is in this replica's table
 * `line`, and the database grants it: a release, a revoke, or the first
 * call after the lease's end hands the lease to the first in line, and
 * tells this replica's listening connection, whose advisory lock keeps
 * the line's places of this replica's Waits; on_granted() answers it.
 * An expiry is nobody's call: the replica looks again
 * (PGSTORE_LINE_LOOK) when the lease may end, as the database said at
 * the last step, which hands the lease over if it did. A Wait whose
 * call ended leaves (PGSTORE_LINE_LEAVE); one the database granted
 * meanwhile is granted (its answer says so).
 *
 * Losing the listening connection loses the places (the lock goes with
 * the connection) and any grant not yet heard of: every Wait in the
 * table is answered UNAVAILABLE, and its caller waits again, at the end
 * of a line (a grant made meanwhile is its owner's: an Acquire or Wait
 * of that owner gets it back). So does a drain, which closes it first.
 *
 * A Wait in the table is idle (its next step, `line_step`, due at
 * `line_look_ns`) or busy (that step in a batch, or queued for one);
 * one that lost its place is out of the table, and answered once its
 * step comes back (`line_gen` tells it).
 */

static void after_event(struct replica *r);
static void on_look(struct mode *m);

static bool listening(const struct replica *r)
{
    return r->line_key != 0;
}

/* Shows how many Waits are in a line, for sure (leased_waiting_calls):
 * not those whose join is under way. */
static void count_waiting(const struct replica *r)
{
    atomic_store(&metrics.waiting_calls, (int64_t)r->njoined);
}

static void line_add(struct replica *r, struct request *req)
{
    struct request **b = &r->line[req->line_call % LINE_BUCKETS];
    req->line_next = *b;
    *b = req;
    r->nline++;
    count_waiting(r);
}

/* The Wait numbered call in the table, or NULL; taken out when take. */
static struct request *line_find(struct replica *r, uint64_t call, bool take)
{
    for (struct request **p = &r->line[call % LINE_BUCKETS]; *p != NULL;
         p = &(*p)->line_next) {
        struct request *req = *p;
        if (req->line_call != call)
            continue;
        if (take) {
            *p = req->line_next;
            req->line_next = NULL;
            r->nline--;
            r->njoined -= req->line_joined;
            count_waiting(r);
        }
        return req;
    }
    return NULL;
}

/* Whether req (a Wait) still has its place: the listening connection it
 * joined by is the one there is. */
static bool placed(const struct replica *r, const struct request *req)
{
    return listening(r) && req->line_gen == r->line_gen;
}

/* Sets the wake-up for due_ns (monotonic) unless one is set for
 * earlier. */
static void look_at(struct replica *r, int64_t due_ns)
{
    if (r->look_due_ns != 0 && r->look_due_ns <= due_ns)
        return;
    r->look_due_ns = due_ns;
    int64_t now = clock_mono_ns();
    uint64_t ms =
        due_ns > now ? (uint64_t)((due_ns - now + 999999) / 1000000) : 0;
    mode_wake_after(&r->base, ms, on_look);
}

/* Queues req's step (its line_step) for a batch. */
static void line_send(struct replica *r, struct request *req)
{
    req->line_busy = true;
    req->next = NULL;
    mode_push(&r->leases, req);
}

/* req, idle in the table, takes step at due_ns. */
static void line_idle(struct replica *r, struct request *req,
                      enum pgstore_line step, int64_t due_ns)
{
    req->line_busy = false;
    req->line_step = (uint8_t)step;
    req->line_look_ns = due_ns;
    if (due_ns != INT64_MAX)
        look_at(r, due_ns);
}

/* The call of req (in the table) ended: it leaves its line, answered
 * CANCELLED once out of it (unless granted first). */
static void line_leave(struct replica *r, struct request *req)
{
    mode_ended(req);
    req->line_step = PGSTORE_LINE_LEAVE;
    line_send(r, req);
}

/* Answers req, which lost its place (or never had one): its grant if
 * one came, else why not. */
static void line_dropped(struct replica *r, struct request *req,
                         const char *why)
{
    req->line_busy = false;
    if (!req->line_granted) {
        if (atomic_load(&req->ended))
            mode_ended(req);
        else
            mode_refuse(req, r->base.draining ? "draining" : why);
    }
    req->next = NULL;
    mode_answer(&r->base, req);
}

/* The database granted the Wait numbered call (the listening connection
 * heard it). */
static void on_granted(void *arg, uint64_t call, uint64_t token,
                       int64_t expiry_ns, unsigned flags)
{
    struct replica *r = arg;
    struct request *req = line_find(r, call, false);
    if (req == NULL || req->line_granted)
        return; /* not ours any more: the call was answered */
    mode_decided(&r->base, req, RULES_OK, token, expiry_ns, flags);
    mode_count(flags);
    req->line_granted = true;
    if (req->line_busy)
        return; /* answered when its step comes back */
    line_find(r, call, true);
    req->next = NULL;
    mode_answer(&r->base, req);
}

/* The listening connection is gone (why): so are the places of every
 * Wait in the table, which are answered (the busy ones when their steps
 * come back). */
static void lose_places(struct replica *r, const char *why)
{
    r->line_key = r->line_pid = 0;
    r->line_gen++;
    for (size_t i = 0; i < LINE_BUCKETS; i++) {
        struct request *req = r->line[i], *next;
        r->line[i] = NULL;
        for (; req != NULL; req = next) {
            next = req->line_next;
            req->line_next = NULL;
            if (!req->line_busy)
                line_dropped(r, req, why);
        }
    }
    r->nline = r->njoined = 0;
    count_waiting(r);
}

/* A step of req came back from a batch (ok: decided as c says, at
 * db_now_ns on the database's clock; else its outcome is unknown). */
static void line_answered(struct replica *r, struct request *req, bool ok,
                          const struct pgstore_call *c, int64_t db_now_ns)
{
    enum pgstore_line step = req->line_step;
    bool in_table = placed(r, req);
    if (ok && step == PGSTORE_LINE_JOIN && c->code == RULES_OK) {
        /* Granted at once, as an Acquire: it never joined. */
        if (in_table)
            line_find(r, req->line_call, true);
        req->line_busy = false;
        mode_count(c->flags);
        mode_decided(&r->base, req, RULES_OK, c->granted, c->expiry_ns,
                     c->flags);
        mode_answer(&r->base, req);
        return;
    }
    if (!in_table) {
        line_dropped(r, req,
                     ok ? "the replica lost its database "
                          "connection, and with it the place in "
                          "line"
                        : "storage unavailable");
        return;
    }
    if (req->line_granted) {
        line_find(r, req->line_call, true);
        line_dropped(r, req, NULL); /* answers the grant */
        return;
    }
    int64_t now = clock_mono_ns();
    if (!ok) {
        /* The same step again, a little later; a join that may or may
         * not have happened leaves, to be sure. */
        if (step == PGSTORE_LINE_JOIN) {
            mode_refuse(req, "storage unavailable");
            step = PGSTORE_LINE_LEAVE;
        }
        line_idle(r, req, step, now + LINE_RETRY_NS);
        return;
    }
    if (c->code == PGSTORE_IN_LINE && step != PGSTORE_LINE_LEAVE) {
        if (!req->line_joined) {
            req->line_joined = true;
            r->njoined++;
            count_waiting(r);
        }
        if (atomic_load(&req->ended)) {
            line_leave(r, req);
            return;
        }
        int64_t left = c->expiry_ns - db_now_ns;
        line_idle(r, req, PGSTORE_LINE_LOOK,
                  now + (left > 0 ? left : 0) + LOOK_SLACK_NS);
    } else if (c->code == PGSTORE_NOT_IN_LINE) {
        /* Granted: on_granted() answers it. */
        line_idle(r, req, PGSTORE_LINE_LOOK, INT64_MAX);
    } else { /* out of line (a leave): answered as set */
        line_find(r, req->line_call, true);
        req->line_busy = false;
        req->next = NULL;
        mode_answer(&r->base, req);
    }
}

/* The wake-up: the Waits whose step is due take it. */
static void on_look(struct mode *m)
{
    struct replica *r = (struct replica *)m;
    r->look_due_ns = 0;
    int64_t now = clock_mono_ns(), next = 0;
    for (size_t i = 0; i < LINE_BUCKETS; i++)
        for (struct request *req = r->line[i]; req != NULL;
             req = req->line_next) {
            if (req->line_busy || req->line_look_ns == INT64_MAX)
                continue;
            if (req->line_look_ns <= now)
                line_send(r, req);
            else if (next == 0 || req->line_look_ns < next)
                next = req->line_look_ns;
        }
    if (next != 0)
        look_at(r, next);
    after_event(r);
}

/* The Waits whose calls ended leave their lines (the busy ones when
 * their steps come back). */
static void shared_cancelled(struct mode *m)
{
    struct replica *r = (struct replica *)m;
    for (size_t i = 0; i < LINE_BUCKETS; i++)
        for (struct request *req = r->line[i]; req != NULL;
             req = req->line_next)
            if (!req->line_busy && atomic_load(&req->ended))
                line_leave(r, req);
    after_event(r);
}

/* Warnings the database sent on sl's connection that change no outcome
 * (transaction ID wraparound coming near, a trigger's): counted, and
 * logged (at most a line a second) for the operator. */
static void note_warnings(struct slot *sl)
{
    char msg[256], quoted[256];
    uint64_t n = pgstore_warnings(sl->db, msg, sizeof(msg)), held;
    if (n == 0)
        return;
    atomic_fetch_add(&metrics.pg_warnings, n);
    if (!log_limit_pass(&sl->r->warn_log, clock_mono_ns(), &held))
        return;
    log_quotable(quoted, sizeof(quoted), msg, strlen(msg));
    log_warn("database_warning", "message=\"%s\" not_logged=%llu", quoted,
             (unsigned long long)held);
}

/* A step of the database host's wall clock: its clock moved unlike the
 * monotonic one between two batches on one connection, by more than the
 * round trips explain. */
static void check_clock(struct slot *sl, int64_t sent_ns, int64_t done_ns,
                        int64_t db_now_ns)
{
    if (db_now_ns == 0)
        return; /* nothing was sent */
    int64_t rtt = done_ns - sent_ns;
    int64_t offset = db_now_ns - done_ns;
    if (sl->have_offset) {
        int64_t moved = offset - sl->offset_ns;
        int64_t slack = CLOCK_STEP_NS + rtt + sl->offset_rtt_ns;
        if (moved > slack || moved < -slack) {
            atomic_fetch_add(&metrics.pg_clock_steps, 1);
            log_warn("database_clock_step", "by_ms=%lld",
                     (long long)(moved / 1000000));
        }
    }
    sl->have_offset = true;
    sl->offset_ns = offset;
    sl->offset_rtt_ns = rtt;
}

/* Answers b's requests: from their calls when ok, else UNAVAILABLE. */
static void answer(struct slot *sl, struct batch *b, bool ok)
{
    struct replica *r = sl->r;
    size_t i = 0;
    for (struct request *req = b->list, *next; req != NULL;
         req = next, i++) {
        next = req->next;
        req->next = NULL;
        assert(r->base.order[req->order_slot] > 0);
        r->base.order[req->order_slot]--;
        const struct pgstore_call *c = &b->calls[i];
        req->needs_sync = false;
        if (req->op == OP_WAIT) {
            line_answered(r, req, ok, c, b->db_now_ns);
            continue;
        }
        if (ok) {
            if (c->code == RULES_OK)
                mode_count(c->flags);
            mode_decided(&r->base, req, c->code, c->granted, c->expiry_ns,
                         c->flags);
        } else {
            mode_refuse(req, "storage unavailable");
        }
        mode_answer(&r->base, req);
    }
    b->list = NULL;
}

/* The oldest batch in flight on sl came back with err. */
static void batch_done(struct slot *sl, int err, int64_t db_now_ns)
{
    struct batch *b = pop_batch(sl);
    b->db_now_ns = db_now_ns;
    if (sl->doubted) { /* it answered: counted again */
        sl->doubted = false;
        update_serving(sl->r);
    }
    if (err == STORE_OK) {
        int64_t done_ns = clock_mono_ns();
        metrics_observe(&metrics.pg_round_trip_seconds,
                        (double)(done_ns - b->sent_ns) / 1e9);
        metrics_observe(&metrics.pg_batch_calls, (double)b->ncalls);
        check_clock(sl, b->sent_ns, done_ns, db_now_ns);
    } else {
        loop_failed(sl, err, NULL, "batch");
    }
    answer(sl, b, err == STORE_OK);
}

/* Answers the batches whose answers are all there; STORE_EDOWN when
 * the connection is lost. */
static int drain(struct slot *sl)
{
    for (;;) {
        struct pgstore_call *calls;
        int err;
        int64_t db_now_ns;
        int rc = pgstore_done(sl->db, &calls, &err, &db_now_ns);
        if (rc <= 0)
            return rc;
        assert(calls == sl->batches[sl->first].calls);
        batch_done(sl, err, db_now_ns);
    }
}

/* Writes what is left of what was sent on sl, and watches its socket
 * accordingly; false when the connection is lost. */
static bool flush(struct slot *sl)
{
    int rc = pgstore_flush(sl->db);
    if (rc < 0)
        lost(sl, NULL);
    else if (watch(sl, rc == 1) != 0)
        lost(sl, "cannot watch the connection's socket");
    return rc >= 0 && ready(sl);
}

/* Takes what sl's socket has (if read), answers the batches whose
 * answers are all there and notes the warnings that came; a broken
 * connection loses the batches in flight. */
static void take_answers(struct slot *sl, bool read)
{
    int rc = read ? pgstore_read(sl->db) : STORE_OK;
    if (rc == STORE_OK)
        rc = drain(sl);
    note_warnings(sl);
    if (rc < 0)
        lost(sl, NULL);
}

/* The listening connection is lost (sl->errmsg says why, during what):
 * so are the places in line; it reconnects. */
static void listener_down(struct replica *r, const char *what)
{
    struct slot *sl = &r->listener;
    sl->err = STORE_EDOWN;
    lose_places(r, "the replica lost its database connection, and with it "
                   "the place in line");
    disconnect(sl);
    failed(sl, what); /* logged; the other connections left alone */
}

/* The listening connection's socket: grants and news of events, or the
 * connection lost. */
static void listener_poll(struct replica *r, int status)
{
    struct slot *sl = &r->listener;
    int rc = status < 0 ? STORE_EDOWN
                        : pgstore_notified(sl->db, on_granted, r,
                                           &r->events_due);
    if (rc == STORE_OK)
        return;
    snprintf(sl->errmsg, sizeof(sl->errmsg), "%s",
             status < 0 ? "the connection's socket failed"
                        : pgstore_errmsg(sl->db));
    listener_down(r, "listen");
}

/* --- Events: the replica's copy of the database's --------------------
 *
 * The database stores every change of owner as an event, with a revision
 * in commit order (storage/pgsql.c, leased_record), and tells the
 * listening connections that there are new ones. This replica's history
 * (history.h) is a copy of the last of them, which Watch streams read as
 * in the embedded mode: the listening connection reads what follows its
 * newest in a job (pg_feed.h), when told of new ones, once connected
 * again (it may have missed some), and when a watcher finds itself ahead
 * of the copy (history_ask: the copy may be behind the database). So a
 * change is told by every replica, with the same revision, a round trip
 * after its commit.
 *
 * Expiries are nobody's call: while the replica has watchers, the same
 * job tells them every TELL_MS (pgstore_tell; one replica at a time
 * does), so each is told within TELL_MS, a tick and two round trips;
 * collection tells the others before it deletes their rows. The job also
 * deletes the events past the last --watch-history (COMPACT_MS).
 */

/* Whether the listening connection has events work: the rest of a read
 * that stopped at feed_max events, a read due (at most every READ_MS:
 * under load, a read for every batch or two, back to back, cost the
 * replicas a third of their lease calls; a read put off is made at the
 * next event of the loop, a tick at the latest), expiries to tell, or
 * events to delete. */
static bool events_wanted(const struct replica *r)
{
    if (r->history == NULL || !ready(&r->listener) || r->base.draining)
        return false;
    int64_t now = nanotime_mono_ms();
    if (now < r->events_retry_ms)
        return false;
    return r->feed_more || (r->events_due && now >= r->next_read_ms) ||
           now >= r->next_compact_ms ||
           (atomic_load(&metrics.watch_streams) > 0 && now >= r->next_tell_ms);
}

static void start(struct slot *sl, enum slot_state job);

static void start_events(struct replica *r)
{
    int64_t now = nanotime_mono_ms();
    r->feed_tell =
        atomic_load(&metrics.watch_streams) > 0 && now >= r->next_tell_ms;
    if (r->feed_tell)
        r->next_tell_ms = now + TELL_MS;
    r->feed_compact = now >= r->next_compact_ms;
    if (r->feed_compact)
        r->next_compact_ms = now + COMPACT_MS;
    r->events_due = false;
    r->next_read_ms = now + READ_MS;
    r->feed_after = history_newest(r->history);
    r->feed_ticket = history_asked(r->history); /* answered by this read */
    start(&r->listener, SLOT_EVENTS);
}

/* The job, on the worker. */
static void run_events(struct slot *sl)
{
    struct replica *r = sl->r;
    sl->err = STORE_OK;
    if (r->feed_tell)
        sl->err = pgstore_tell(sl->db, TELL_MAX);
    if (sl->err == STORE_OK && r->feed_compact)
        sl->err = pgstore_compact(sl->db, history_capacity(r->history));
    if (sl->err == STORE_OK)
        sl->err = pgstore_events(sl->db, r->feed_after, r->feed_max,
                                 feed_add, &r->feed, &r->feed.top);
}

/* The job came back: what it read goes into the copy. */
static void events_done(struct slot *sl)
{
    struct replica *r = sl->r;
    sm_move(&sl->sm, SLOT_READY);
    if (sl->err == STORE_OK &&
        feed_apply(&r->feed, r->history, r->feed_after) != 0) {
        sl->err = STORE_ENOMEM;
        snprintf(sl->errmsg, sizeof(sl->errmsg),
                 "out of memory for Watch's events");
    }
    bool more = r->feed.n == r->feed_max;
    feed_clear(&r->feed);
    r->feed_more = more && sl->err == STORE_OK;
    if (sl->err == STORE_EDOWN) {
        listener_down(r, "events");
        return;
    }
    if (sl->err != STORE_OK) { /* the copy unchanged: again, later */
        failed(sl, "events");
        r->events_due = true;
        r->events_retry_ms = nanotime_mono_ms() + BACKOFF_MAX_MS;
        return;
    }
    /* A question is answered by a read that reached the newest. */
    if (!more)
        history_answer(r->history, r->feed_ticket);
    if (r->base.draining)
        disconnect(sl); /* see shared_drain() */
}

static void on_poll(uv_poll_t *h, int status, int events)
{
    struct slot *sl = h->data;
    struct replica *r = sl->r;
    if (sl == &r->listener)
        listener_poll(r, status);
    else if (status < 0)
        lost(sl, "the connection's socket failed");
    else if (!(events & UV_WRITABLE) || flush(sl))
        take_answers(sl, events & UV_READABLE);
    after_event(r);
}

/* --- Jobs, on the worker ---------------------------------------------- */

static int list_row(void *arg, const struct lease_row *row, bool live)
{
    int rc = admin_page_add(arg, row, live);
    return rc >= 0 ? rc : STORE_ENOMEM;
}

/* An operator's Revoke, decided by the database: the lease it ended into
 * req->admin, or why nothing ended. */
static void run_revoke(struct slot *sl, struct request *req)
{
    struct lease_row row;
    bool found = false, revoked = false;
    sl->err = pgstore_revoke(sl->db, req->session, req->session_len,
                             req->token, &row, &found, &revoked);
    if (sl->err == STORE_OK)
        mode_admin_revoked(req, found ? &row : NULL, revoked);
}

static void run_admin(struct slot *sl)
{
    struct request *req = sl->admin;
    struct lease_row row;
    bool live = false, found = false;
    switch (req->op) {
    case OP_GET:
        sl->err = pgstore_get(sl->db, req->session, req->session_len, &row,
                              &live, &found);
        if (sl->err == STORE_OK)
            mode_admin_get(req, found ? &row : NULL, live);
        break;
    case OP_LIST:
        sl->err = pgstore_list(sl->db, req->session, req->session_len,
                               req->page_token, req->page_token_len,
                               req->page_size + 1, list_row, req);
        break;
    case OP_STATS:
        sl->err = pgstore_stats(sl->db, &sl->stats);
        break;
    case OP_REVOKE:
        run_revoke(sl, req);
        break;
    case OP_SNAPSHOT: /* the database's to back up, not a replica's */
        req->status = REPLY_HELD; /* FAILED_PRECONDITION */
        snprintf(req->reason, sizeof(req->reason),
                 "the leases are in PostgreSQL: back them up with its own "
                 "tools (pg_dump; docs/ha.md)");
        break;
    default:
        abort();
    }
}

static void run_job(uv_work_t *w)
{
    struct slot *sl = w->data;
    switch ((enum slot_state)sm_state(&sl->sm)) {
    case SLOT_ADMIN:
        run_admin(sl);
        break;
    case SLOT_COLLECTING:
        sl->err = pgstore_collect(sl->db, COLLECT_MAX, &sl->collected,
                                  &sl->expired);
        if (sl->err == STORE_OK)
            sl->err = pgstore_stats(sl->db, &sl->stats);
        break;
    case SLOT_CONNECTING:
        sl->err = pgstore_connect(sl->db, &sl->primary);
        if (sl->err == STORE_OK && sl == &sl->r->listener)
            sl->err = pgstore_listen(sl->db, &sl->listen_key, &sl->listen_pid);
        break;
    case SLOT_EVENTS:
        run_events(sl);
        break;
    case SLOT_DOWN:
    case SLOT_READY:
    case SLOT_NSTATES:
        abort(); /* no job */
    }
    /* A List's row callback fails with ENOMEM of its own, which the
     * store's message does not say. */
    snprintf(sl->errmsg, sizeof(sl->errmsg), "%s",
             sl->err == STORE_OK       ? ""
             : sl->err == STORE_ENOMEM ? "out of memory"
                                       : pgstore_errmsg(sl->db));
}

/* --- Jobs, back on the loop -------------------------------------------- */

static struct mode_counts counts(const struct pgstore_stats *st)
{
    return (struct mode_counts){
        .live = st->live,
        .entries = st->entries,
        .high_water = st->high_water,
        .quarantine_remaining_ns = st->quarantine_remaining_ns,
    };
}

static void admin_done(struct slot *sl)
{
    struct replica *r = sl->r;
    struct request *req = sl->admin;
    sl->admin = NULL;
    sm_move(&sl->sm, SLOT_READY);
    if (sl->err != STORE_OK) {
        failed(sl, "admin");
        mode_refuse(req, "storage unavailable");
    } else if (req->op == OP_STATS) {
        r->last_stats = sl->stats;
        struct mode_counts c = counts(&sl->stats);
        mode_admin_stats(&r->base, req, &c);
    }
    mode_answer(&r->base, req);
}

static void collect_done(struct slot *sl)
{
    struct replica *r = sl->r;
    r->collecting = false;
    if (sl->err != STORE_OK) {
        failed(sl, "collect");
        return;
    }
    atomic_fetch_add(&metrics.expiries, sl->expired);
    r->last_stats = sl->stats;
    struct mode_counts c = counts(&sl->stats);
    mode_set_gauges(&c, true);
    if (sl->collected > 0)
        log_debug("collected", "rows=%zu", sl->collected);
}

static void connect_done(struct slot *sl)
{
    struct replica *r = sl->r;
    if (sl->err != STORE_OK) {
        sm_move(&sl->sm, SLOT_DOWN);
        failed(sl, "connect");
        sl->next_connect_ms = nanotime_mono_ms() + sl->backoff_ms;
        sl->backoff_ms = sl->backoff_ms * 2 > BACKOFF_MAX_MS
                             ? BACKOFF_MAX_MS
                             : sl->backoff_ms * 2;
        return;
    }
    sl->have_offset = false; /* another server, maybe another clock */
    /* Every connection of the replica sees the change: say it once. */
    if (sl->primary.changed && sl->primary.started_us != r->primary_seen_us) {
        r->primary_seen_us = sl->primary.started_us;
        atomic_fetch_add(&metrics.pg_failovers, 1);
        log_warn("database_primary_changed",
                 "quarantine_ms=%lld reason=\"a failover, or the database "
                 "restarted: leases held before wait for the quarantine\"",
                 (long long)(sl->primary.quarantine_remaining_ns / 1000000));
    }
    sm_move(&sl->sm, SLOT_READY);
    if (sl == &r->listener) {
        log_info("database_connected", "connection=listening");
        if (r->base.draining) {
            disconnect(sl); /* no more Waits: see shared_drain() */
            return;
        }
        r->line_key = sl->listen_key;
        r->line_pid = sl->listen_pid;
        r->events_due = true; /* it may have missed some */
        return;
    }
    log_info("database_connected", "connection=%zu", slot_index(sl) + 1);
    update_serving(r);
}

static void job_done(uv_work_t *w, int status)
{
    struct slot *sl = w->data;
    struct replica *r = sl->r;
    if (status != 0) { /* cancelled: never, as nothing cancels it */
        sl->err = STORE_EFAIL;
        snprintf(sl->errmsg, sizeof(sl->errmsg), "the job was cancelled");
    }
    bool doubted = sl->doubted;
    sl->doubted = false;
    /* The connection is the loop's again (a lost one is then closed). */
    switch ((enum slot_state)sm_state(&sl->sm)) {
    case SLOT_ADMIN:
        admin_done(sl);
        break;
    case SLOT_COLLECTING:
        sm_move(&sl->sm, SLOT_READY);
        collect_done(sl);
        break;
    case SLOT_CONNECTING:
        connect_done(sl);
        break;
    case SLOT_EVENTS:
        events_done(sl);
        break;
    case SLOT_DOWN:
    case SLOT_READY:
    case SLOT_NSTATES:
        abort(); /* no job */
    }
    note_warnings(sl);
    if (ready(sl) && watch(sl, false) != 0)
        loop_failed(sl, STORE_EDOWN,
                    "cannot watch the connection's socket", "watch");
    if (doubted)
        update_serving(r); /* counted again, if its job went well */
    /* What the listening connection heard during the job. */
    if (sl == &r->listener && ready(sl))
        listener_poll(r, 0);
    after_event(r);
}

/* Gives sl's connection to a job on the worker (its state: which). */
static void start(struct slot *sl, enum slot_state job)
{
    unwatch(sl);
    sm_move(&sl->sm, job);
    uv_queue_work(sl->r->base.loop, &sl->work, run_job, job_done);
}

/* --- Giving work to the connections ------------------------------------ */

/* Without a connection, nothing waits: every call is answered at once,
 * UNAVAILABLE, but Stats, which says that storage is failing (with the
 * database's counts as last seen). */
static void refuse_all(struct replica *r)
{
    struct request *req;
    while ((req = mode_pop(&r->leases)) != NULL ||
           (req = mode_pop(&r->admins)) != NULL) {
        if (req->op == OP_WAIT && req->line_step != PGSTORE_LINE_JOIN) {
            /* In the table: its step waits for a connection, unless its
             * grant came or its place is gone. */
            bool in_table = placed(r, req);
            if (in_table && !req->line_granted) {
                line_idle(r, req, req->line_step,
                          clock_mono_ns() + LINE_RETRY_NS);
                continue;
            }
            if (in_table)
                line_find(r, req->line_call, true);
            line_dropped(r, req, "storage unavailable");
            continue;
        }
        if (req->op == OP_STATS && mode_admin_start(req) == 0) {
            struct mode_counts c = counts(&r->last_stats);
            mode_admin_stats(&r->base, req, &c);
        } else {
            mode_refuse(req, "storage unavailable");
        }
        mode_answer(&r->base, req);
    }
}

/* Whether Wait req's step can go in a batch now; if not, it is
 * answered: a Wait joins only by a listening connection, and takes its
 * other steps only while in the place that connection kept. */
static bool line_sendable(struct replica *r, struct request *req)
{
    if (req->line_step == PGSTORE_LINE_JOIN) {
        if (!listening(r)) {
            line_dropped(r, req,
                         "not listening to the database: wait "
                         "again");
            return false;
        }
        req->line_gen = r->line_gen;
        line_add(r, req); /* before its grant may be heard of */
        return true;
    }
    if (placed(r, req))
        return true;
    line_dropped(r, req,
                 "the replica lost its database connection, and "
                 "with it the place in line");
    return false;
}

/* Takes the lease calls waiting (up to MAX_BATCH) into batch b for slot
 * sl, but for those whose session has calls in flight on another slot:
 * they wait, in order, in front of the queue (the counters change only
 * once the batch is made, so a session's calls all go, or all wait).
 * Returns false when the batch is empty. */
static bool take_batch(struct replica *r, struct slot *sl, struct batch *b)
{
    uint8_t on = (uint8_t)slot_index(sl);
    struct mode_queue wait = {NULL, NULL};
    struct request **tail = &b->list;
    b->list = NULL;
    b->ncalls = 0;
    while (b->ncalls < MAX_BATCH && r->leases.head != NULL) {
        struct request *req = mode_pop(&r->leases);
        if (r->base.order[req->order_slot] > 0 &&
            r->inflight_on[req->order_slot] != on) {
            mode_push(&wait, req);
            continue;
        }
        if (req->op == OP_WAIT && !line_sendable(r, req))
            continue; /* answered */
        b->calls[b->ncalls++] = (struct pgstore_call){
            .op = rules_op_of(req->op),
            .line = (enum pgstore_line)req->line_step,
            .session = req->session,
            .session_len = req->session_len,
            .owner = req->owner,
            .owner_len = req->owner_len,
            .token = req->op == OP_WAIT ? req->line_call : req->token,
        };
        *tail = req;
        tail = &req->next;
    }
    mode_push_front(&r->leases, &wait);
    for (struct request *req = b->list; req != NULL; req = req->next) {
        r->base.order[req->order_slot]++;
        r->inflight_on[req->order_slot] = on;
    }
    return b->ncalls > 0;
}

/* Sends the next batch on sl; false when there was none, or it could not
 * be sent (its calls are answered then). */
static bool send_batch(struct replica *r, struct slot *sl)
{
    struct batch *b = &sl->batches[(sl->first + sl->nbatches) % PIPELINE];
    if (!take_batch(r, sl, b))
        return false;
    sl->nbatches++;
    b->sent_ns = clock_mono_ns();
    pgstore_set_listener(sl->db, r->line_key, r->line_pid);
    int err = pgstore_send(sl->db, b->calls, b->ncalls);
    if (err == STORE_EDOWN) {
        lost(sl, NULL);
        return false;
    }
    if (err != STORE_OK) { /* out of memory: the store took nothing */
        sl->nbatches--;
        loop_failed(sl, err, NULL, "batch");
        answer(sl, b, false);
        return false;
    }
    r->admin_turn = true;
    return true;
}

/* Starts the first admin call waiting on sl. */
static void give_admin(struct replica *r, struct slot *sl)
{
    struct request *req = mode_pop(&r->admins);
    r->admin_turn = false;
    if (mode_admin_start(req) != 0) {
        mode_answer(&r->base, req);
        return;
    }
    sl->admin = req;
    start(sl, SLOT_ADMIN);
}

static bool collect_due(const struct replica *r)
{
    return !r->collecting && nanotime_mono_ms() >= r->next_collect_ms;
}

/* A job waits for its turn: pipelines take no new batch until one is
 * drained and takes it. */
static bool job_waits(const struct replica *r)
{
    return (r->admins.head != NULL && r->admin_turn) || collect_due(r);
}

static void give_collect(struct replica *r, struct slot *sl)
{
    int64_t every = r->base.ttl_ns / 1000000;
    every = every < COLLECT_MIN_MS   ? COLLECT_MIN_MS
            : every > COLLECT_MAX_MS ? COLLECT_MAX_MS
                                     : every;
    r->next_collect_ms = nanotime_mono_ms() + every;
    r->collecting = true;
    start(sl, SLOT_COLLECTING);
}

/* Gives connected slot sl, with no job, what it can take: with an empty
 * pipeline, an admin call (its turn, or no lease call waits) or a due
 * collection first; then batches while its pipeline has room and no job
 * waits for its turn; with nothing to batch, an admin call. */
static void give_work(struct replica *r, struct slot *sl)
{
    if (sl->nbatches == 0) {
        if (r->admins.head != NULL &&
            (r->admin_turn || r->leases.head == NULL)) {
            give_admin(r, sl);
            return;
        }
        if (collect_due(r)) {
            give_collect(r, sl);
            return;
        }
    }
    bool sent = false;
    while (ready(sl) && sl->nbatches < PIPELINE &&
           (sl->nbatches == 0 || !job_waits(r)) && send_batch(r, sl))
        sent = true;
    /* A batch whose calls were all decided without the database (tokens
     * no row can have) is done at once if nothing is ahead of it. */
    if (sent && ready(sl) && flush(sl))
        take_answers(sl, false);
    if (ready(sl) && sl->nbatches == 0 && r->admins.head != NULL)
        give_admin(r, sl);
}

/* How many new calls should wait before sl takes a batch: 1 when its
 * pipeline is empty; with a batch in flight, as many as that batch has
 * (sent at once, the next one would be small and cost a commit for few
 * calls; it goes when the one in flight comes back at the latest); 0
 * when sl can take none. */
static size_t room_at(const struct replica *r, const struct slot *sl)
{
    if (!ready(sl) || sl->nbatches >= PIPELINE ||
        (sl->nbatches > 0 && job_waits(r)))
        return 0;
    return sl->nbatches == 0 ? 1 : sl->batches[sl->first].ncalls;
}

/* Starts what the slots can do. */
static void process(struct replica *r)
{
    if (!serving(r))
        refuse_all(r);
    if (r->base.closing)
        return;
    for (size_t i = 0; i < r->nslots; i++) {
        struct slot *sl = &r->slots[i];
        if (sm_state(&sl->sm) == SLOT_DOWN) {
            if (nanotime_mono_ms() >= sl->next_connect_ms)
                start(sl, SLOT_CONNECTING);
        } else if (ready(sl)) {
            give_work(r, sl);
        }
    }
    struct slot *ls = &r->listener;
    if (r->has_listener && !r->base.draining &&
        sm_state(&ls->sm) == SLOT_DOWN &&
        nanotime_mono_ms() >= ls->next_connect_ms)
        start(ls, SLOT_CONNECTING);
    else if (events_wanted(r))
        start_events(r);
    if (!serving(r))
        refuse_all(r); /* the connections just lost */
    /* With every pipeline full, a new call could only wait in the
     * queue: it may as well wait in the hand-off, without waking the
     * loop; the next batch takes it. */
    size_t at = serving(r) ? 0 : 1;
    for (size_t i = 0; i < r->nslots; i++) {
        size_t k = room_at(r, &r->slots[i]);
        if (k != 0 && (at == 0 || k < at))
            at = k;
    }
    if (r->base.hooks.wanted != NULL)
        r->base.hooks.wanted(r->base.hooks.arg, at);
}

static void maybe_finish_close(struct replica *r);

static void after_event(struct replica *r)
{
    if (r->base.closing)
        maybe_finish_close(r);
    else
        process(r);
}

/* A new Wait: to join its line, by the listening connection. */
static void submit_wait(struct replica *r, struct request *req)
{
    req->next = NULL;
    if (!r->has_listener) {
        req->status = REPLY_UNIMPLEMENTED;
        snprintf(req->reason, sizeof(req->reason),
                 "this replica has no listening connection");
        mode_answer(&r->base, req);
        return;
    }
    req->line_call = ++r->next_call;
    req->line_step = PGSTORE_LINE_JOIN;
    req->line_busy = true;
    req->line_granted = req->line_joined = false;
    if (r->base.draining || !listening(r)) {
        line_dropped(r, req, "not listening to the database: wait again");
        return;
    }
    mode_order_slot(&r->base, req);
    mode_push(&r->leases, req);
}

static void shared_submit(struct mode *m, struct request *list)
{
    struct replica *r = (struct replica *)m;
    for (struct request *req = list, *next; req != NULL; req = next) {
        next = req->next;
        if (req->op == OP_WAIT) {
            submit_wait(r, req);
        } else if (request_is_admin(req->op)) {
            mode_push(&r->admins, req);
        } else {
            mode_order_slot(&r->base, req);
            mode_push(&r->leases, req);
        }
    }
    process(r);
}

/* Batches past their deadline: a stopped server never answers. */
static void on_tick(struct mode *m)
{
    struct replica *r = (struct replica *)m;
    for (size_t i = 0; i < r->nslots; i++) {
        struct slot *sl = &r->slots[i];
        /* What arrived first: libuv runs timers before it polls, and an
         * answer that came in time is no missed deadline. */
        if (ready(sl) && sl->nbatches > 0)
            take_answers(sl, true);
    }
    /* A watcher ahead of the copy asked for a read. */
    if (r->history != NULL &&
        !history_answered(r->history, history_asked(r->history)))
        r->events_due = true;
    after_event(r);
}

/* leased drains: the listening connection closes, and with its lock
 * every Wait of this replica leaves its line at once (a release now
 * grants the next replica's); they are answered UNAVAILABLE "draining"
 * (the busy ones when their steps come back), and so is each new one. */
static void shared_drain(struct mode *m)
{
    struct replica *r = (struct replica *)m;
    if (!r->has_listener)
        return;
    lose_places(r, "draining");
    if (ready(&r->listener))
        disconnect(&r->listener);
    after_event(r);
}

static void shared_destroy(struct mode *m)
{
    struct replica *r = (struct replica *)m;
    feed_free(&r->feed);
    if (r->has_listener)
        pgstore_close(r->listener.db);
    for (size_t i = 0; i < r->nslots; i++) {
        pgstore_close(r->slots[i].db);
        for (size_t j = 0; j < PIPELINE; j++)
            free(r->slots[i].batches[j].calls);
    }
    free(r);
}

/* Sets up slot sl of r over db, READY (its socket watched). */
static void slot_init(struct replica *r, struct slot *sl, struct pgstore *db)
{
    sl->r = r;
    sl->db = db;
    sl->work.data = sl;
    sm_init(&sl->sm, slot_states, slot_invariant, SLOT_READY);
    sl->backoff_ms = BACKOFF_MIN_MS;
    if (watch(sl, false) != 0)
        disconnect(sl);
}

struct mode *mode_shared_create(uv_loop_t *loop, struct pgstore *const *dbs,
                                size_t n, const struct mode_listener *l,
                                int64_t ttl_ns, const struct mode_hooks *hooks)
{
    assert(n >= 1 && n <= MODE_MAX_CONNECTIONS);
    struct replica *r = calloc(1, sizeof(*r));
    bool ok = r != NULL;
    for (size_t i = 0; ok && i < n; i++)
        for (size_t j = 0; ok && j < PIPELINE; j++)
            ok = (r->slots[i].batches[j].calls = calloc(
                      MAX_BATCH, sizeof(struct pgstore_call))) != NULL;
    if (!ok) {
        for (size_t i = 0; i < n; i++) {
            pgstore_close(dbs[i]);
            for (size_t j = 0; r != NULL && j < PIPELINE; j++)
                free(r->slots[i].batches[j].calls);
        }
        if (l != NULL)
            pgstore_close(l->db);
        free(r);
        return NULL;
    }
    mode_init(&r->base, &mode_shared, loop, hooks, ttl_ns);
    r->nslots = n;
    r->next_collect_ms = nanotime_mono_ms();
    metrics.postgres = true;
    for (size_t i = 0; i < n; i++)
        slot_init(r, &r->slots[i], dbs[i]);
    if (l != NULL) {
        r->has_listener = true;
        r->line_key = l->key;
        r->line_pid = l->pid;
        r->history = hooks->history;
        slot_init(r, &r->listener, l->db);
    }
    if (r->history != NULL) {
        /* A burst of events goes in in pieces, a round trip apart, so
         * that a watcher that keeps up is never passed by one append. */
        size_t half = history_capacity(r->history) / 2;
        r->feed_max = half < 1 ? 1 : half > EVENTS_MAX ? EVENTS_MAX : half;
    }
    update_serving(r);
    mode_start_timer(&r->base, TICK_MS, on_tick);
    return &r->base;
}

/* Closes once no job and no batch is in flight. */
static void maybe_finish_close(struct replica *r)
{
    for (size_t i = 0; i < r->nslots; i++)
        if (working(&r->slots[i]) || r->slots[i].nbatches > 0)
            return;
    if (r->has_listener && working(&r->listener))
        return;
    assert(r->leases.head == NULL && r->admins.head == NULL && r->nline == 0);
    for (size_t i = 0; i < r->nslots; i++)
        unwatch(&r->slots[i]);
    if (r->has_listener)
        unwatch(&r->listener);
    mode_closed(&r->base);
}

static void shared_close(struct mode *m)
{
    maybe_finish_close((struct replica *)m);
}

int mode_shared_connect(const struct config *cfg, struct pgstore **dbs,
                    size_t n, char *errmsg, size_t len)
{
    struct pgstore_options o = {
        .conninfo = cfg->postgres,
        .ttl_ns = cfg->ttl_ns,
        .max_skew_ns = cfg->max_skew_ns,
        .timeout_ms = (int)(cfg->pg_timeout_ns / 1000000),
    };
    char why[400];
    for (size_t i = 0; i < n; i++) {
        if (pgstore_open(&o, &dbs[i], why, sizeof(why)) != 0) {
            snprintf(errmsg, len, "--postgres: %s", why);
            while (i-- > 0)
                pgstore_close(dbs[i]);
            return -1;
        }
    }
    if (cfg->raise_token_floor == 0)
        return 0;
    size_t raised = 0;
    int rc = pgstore_raise_tokens(dbs[0], cfg->raise_token_floor, &raised);
    if (mode_floor_raised(cfg, rc == STORE_OK, raised,
                          pgstore_errmsg(dbs[0]), errmsg, len) == 0)
        return 0;
    for (size_t i = 0; i < n; i++)
        pgstore_close(dbs[i]);
    return -1;
}

/* Fills history h, a copy (see "Events"), with the last events db holds,
 * and serves it. Returns -1 with errmsg set when it cannot. */
static int load_events(struct pgstore *db, struct history *h, char *errmsg,
                       size_t len)
{
    struct feed f = {0};
    uint64_t top = 0, keep = history_capacity(h);
    int err = pgstore_events(db, 0, 0, feed_add, &f, &top);
    uint64_t after = top > keep ? top - keep : 0;
    history_restart(h, after);
    while (err == STORE_OK) {
        err = pgstore_events(db, after, EVENTS_MAX, feed_add, &f, &f.top);
        if (err == STORE_OK && feed_apply(&f, h, after) != 0)
            err = STORE_ENOMEM;
        if (err != STORE_OK || f.n < EVENTS_MAX)
            break;
        after = f.evs[f.n - 1].revision;
        feed_clear(&f);
    }
    feed_free(&f);
    if (err != STORE_OK) {
        snprintf(errmsg, len, "--postgres: %s",
                 err == STORE_ENOMEM ? "out of memory for Watch's events"
                                     : pgstore_errmsg(db));
        return -1;
    }
    history_set_copy(h);
    history_set_served(h);
    return 0;
}

static int shared_open(uv_loop_t *loop, const struct config *cfg,
                       const struct mode_hooks *hooks, struct mode **out,
                       char *errmsg, size_t len)
{
    struct pgstore *dbs[MODE_MAX_CONNECTIONS + 1];
    size_t n = (size_t)cfg->pg_connections;
    /* And one more, the listening one (Waits). */
    if (mode_shared_connect(cfg, dbs, n + 1, errmsg, len) != 0)
        return -1;
    struct mode_listener l = {.db = dbs[n]};
    int rc = pgstore_listen(l.db, &l.key, &l.pid) == STORE_OK ? 0 : -1;
    if (rc != 0)
        snprintf(errmsg, len, "--postgres: %s", pgstore_errmsg(l.db));
    else if (hooks->history != NULL) /* with the events it keeps (Watch) */
        rc = load_events(l.db, hooks->history, errmsg, len);
    if (rc != 0) {
        for (size_t i = 0; i <= n; i++)
            pgstore_close(dbs[i]);
        return -1;
    }
    /* Each connection's round trip blocks a thread of libuv's pool (4
     * unless set, read at its first use, which is later): one each,
     * and one for the rest. */
    char threads[16];
    snprintf(threads, sizeof(threads), "%zu", n + 2);
    if (n + 2 > 4)
        setenv("UV_THREADPOOL_SIZE", threads, 0);
    *out = mode_shared_create(loop, dbs, n, &l, cfg->ttl_ns, hooks);
    if (*out == NULL) {
        snprintf(errmsg, len, "out of memory");
        return -1;
    }
    return 0;
}

/* The table (mode.h): name, open, arrive (none: the database decides
 * every call), submit, close, destroy, cancelled, drain. */
const struct mode_ops mode_shared = {
    "postgres",     shared_open,      NULL,        shared_submit, shared_close,
    shared_destroy, shared_cancelled, shared_drain};
