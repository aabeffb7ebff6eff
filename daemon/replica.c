/*
 * The loop side of a replica over PostgreSQL (see replica.h).
 *
 * One round trip to the database is in flight at a time, on a worker
 * thread; the loop never waits for the network. Lease calls that arrive
 * meanwhile wait in `leases` and go, all of them (up to MAX_BATCH), in
 * the next round trip: one transaction per batch, group commit over the
 * network. A reply leaves only once its batch's COMMIT returned, so an OK
 * is as durable as the database makes a commit (with a synchronous
 * standby: on two hosts). Admin calls take turns with the batches, one
 * per round trip, so that neither starves the other.
 *
 * The database connection is the worker's while a job is in flight
 * (`job` != JOB_NONE), and nobody's otherwise: the loop only looks at
 * what a job left behind. A job is one of: a batch, one admin call, a
 * garbage collection, or a (re)connection.
 *
 * When the connection is lost (a broken socket, a missed deadline), the
 * batch in flight gets UNAVAILABLE (its commit may or may not have
 * happened: the client retries, which the rules make safe), health says
 * NOT_SERVING, every call is answered UNAVAILABLE at once instead of
 * waiting, and the replica reconnects, at once and then with a backoff up
 * to a second. A reconnection that finds a different primary (failover,
 * or the database restarted) is logged and counted; the database itself
 * then holds the quarantine every replica honours.
 *
 * The database's clock decides expiry. Each batch also reads it, and the
 * replica compares its progress with the monotonic clock's between round
 * trips: a jump of more than CLOCK_STEP_NS (beyond what the two round
 * trips can explain) is a step of the database host's wall clock, logged
 * and counted.
 */
#include "replica.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "admin.h"
#include "clock.h"
#include "log.h"
#include "metrics.h"
#include "postgres.h"
#include "rules.h"

#define MAX_BATCH 1024
#define TICK_MS 100
#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 1000
#define COLLECT_MAX 1024
#define COLLECT_MIN_MS 1000
#define COLLECT_MAX_MS 30000
#define CLOCK_STEP_NS INT64_C(1000000000)

enum job {
    JOB_NONE,
    JOB_BATCH,
    JOB_ADMIN,
    JOB_COLLECT,
    JOB_CONNECT,
};

struct queue {
    struct request *head, *tail;
};

struct replica {
    uv_loop_t *loop;
    struct pgstore *db;
    int64_t ttl_ns;
    void (*reply)(void *arg, struct request *req);
    void (*storage)(void *arg, bool ok);
    void *reply_arg;

    struct queue leases, admins;

    /* The job in flight, and what it left. */
    enum job job;
    uv_work_t work;
    struct request *batch;      /* JOB_BATCH: its requests, in order */
    struct pgstore_call *calls; /* MAX_BATCH, one per request */
    size_t ncalls;
    struct request *admin; /* JOB_ADMIN */
    int err;
    char errmsg[256];
    int64_t sent_ns, done_ns; /* monotonic, around the round trip */
    int64_t db_now_ns;
    size_t collected, expired;
    struct pgstore_stats stats;
    struct pgstore_stats last_stats; /* the last the database gave */
    struct pgstore_primary primary;
    bool admin_turn; /* the next job is an admin call's, if one waits */

    bool connected; /* as far as the loop knows */
    int backoff_ms;
    int64_t next_connect_ms, next_collect_ms;
    struct log_limit fail_log;

    /* The database clock's offset from the monotonic one at the last
     * batch, and that batch's round trip. */
    bool have_offset;
    int64_t offset_ns, offset_rtt_ns;

    uv_timer_t timer;
    int64_t start_mono_ns;
    bool closing;
    void (*done)(void *arg);
    void *done_arg;
};

static void push(struct queue *q, struct request *r)
{
    r->next = NULL;
    if (q->tail != NULL)
        q->tail->next = r;
    else
        q->head = r;
    q->tail = r;
}

static struct request *pop(struct queue *q)
{
    struct request *r = q->head;
    if (r != NULL) {
        q->head = r->next;
        if (q->head == NULL)
            q->tail = NULL;
        r->next = NULL;
    }
    return r;
}

static int64_t mono_ms(void)
{
    return clock_mono_ns() / 1000000;
}

static void unavailable(struct request *req, const char *why)
{
    req->status = REPLY_UNAVAILABLE;
    snprintf(req->reason, sizeof(req->reason), "%s", why);
}

/* The database went away, or came back: tell the owner (health). */
static void set_connected(struct replica *r, bool connected)
{
    if (r->connected == connected)
        return;
    r->connected = connected;
    atomic_store(&metrics.storage_failing, !connected);
    if (r->storage != NULL)
        r->storage(r->reply_arg, connected);
}

/* A job failed: count it, log it (at most a line a second), and after a
 * lost connection reconnect at once. */
static void job_failed(struct replica *r, const char *what)
{
    atomic_fetch_add(&metrics.pg_errors, 1);
    uint64_t held;
    char why[256];
    log_quotable(why, sizeof(why), r->errmsg, strlen(r->errmsg));
    if (log_limit_pass(&r->fail_log, clock_mono_ns(), &held))
        log_warn("database_failed", "during=%s error=\"%s\" not_logged=%llu",
                 what, why, (unsigned long long)held);
    if (r->err == PGSTORE_EDOWN) {
        set_connected(r, false);
        r->next_connect_ms = mono_ms();
        r->backoff_ms = BACKOFF_MIN_MS;
    }
}

/* --- Jobs, on the worker ---------------------------------------------- */

static enum rules_op rules_op_of(enum request_op op)
{
    switch (op) {
    case OP_ACQUIRE:
        return RULES_ACQUIRE;
    case OP_RENEW:
        return RULES_RENEW;
    case OP_RELEASE:
        return RULES_RELEASE;
    default:
        abort(); /* only lease calls are batched */
    }
}

static int list_row(void *arg, const struct lease_row *row, bool live)
{
    int rc = admin_page_add(arg, row, live);
    return rc >= 0 ? rc : PGSTORE_ENOMEM;
}

static void run_admin(struct replica *r)
{
    struct request *req = r->admin;
    struct lease_row row;
    bool live = false, found = false;
    switch (req->op) {
    case OP_GET:
        r->err = pgstore_get(r->db, req->session, req->session_len, &row,
                             &live, &found);
        if (r->err != PGSTORE_OK)
            break;
        if (!found) {
            req->status = REPLY_NOT_FOUND;
            snprintf(req->reason, sizeof(req->reason), "no lease");
        } else if (admin_result_add(req->admin, &row, live) != 0) {
            unavailable(req, "out of memory");
        }
        break;
    case OP_LIST:
        r->err = pgstore_list(r->db, req->session, req->session_len,
                              req->page_token, req->page_token_len,
                              req->page_size + 1, list_row, req);
        if (r->err == 1)
            r->err = PGSTORE_OK;
        break;
    case OP_STATS:
        r->err = pgstore_stats(r->db, &r->stats);
        break;
    default:
        abort();
    }
}

static void run_job(uv_work_t *w)
{
    struct replica *r = w->data;
    r->sent_ns = clock_mono_ns();
    switch (r->job) {
    case JOB_BATCH:
        r->err = pgstore_decide(r->db, r->calls, r->ncalls, &r->db_now_ns);
        break;
    case JOB_ADMIN:
        run_admin(r);
        break;
    case JOB_COLLECT:
        r->err =
            pgstore_collect(r->db, COLLECT_MAX, &r->collected, &r->expired);
        if (r->err == PGSTORE_OK)
            r->err = pgstore_stats(r->db, &r->stats);
        break;
    case JOB_CONNECT:
        r->err = pgstore_connect(r->db, &r->primary);
        break;
    case JOB_NONE:
        abort();
    }
    r->done_ns = clock_mono_ns();
    snprintf(r->errmsg, sizeof(r->errmsg), "%s",
             r->err != PGSTORE_OK ? pgstore_errmsg(r->db) : "");
}

/* --- Back on the loop ------------------------------------------------- */

static void process(struct replica *r);
static void maybe_finish_close(struct replica *r);

/* A step of the database host's wall clock: its clock moved unlike the
 * monotonic one between two batches, by more than the round trips
 * explain. */
static void check_clock(struct replica *r)
{
    int64_t rtt = r->done_ns - r->sent_ns;
    int64_t offset = r->db_now_ns - r->done_ns;
    if (r->have_offset) {
        int64_t moved = offset - r->offset_ns;
        int64_t slack = CLOCK_STEP_NS + rtt + r->offset_rtt_ns;
        if (moved > slack || moved < -slack) {
            atomic_fetch_add(&metrics.pg_clock_steps, 1);
            log_warn("database_clock_step", "by_ms=%lld",
                     (long long)(moved / 1000000));
        }
    }
    r->have_offset = true;
    r->offset_ns = offset;
    r->offset_rtt_ns = rtt;
}

static void count_call(const struct pgstore_call *c)
{
    if (c->flags & PGSTORE_TAKEOVER)
        atomic_fetch_add(&metrics.takeovers, 1);
    if (c->flags & PGSTORE_EXPIRED)
        atomic_fetch_add(&metrics.expiries, 1);
    if (c->flags & PGSTORE_RECLAIM)
        atomic_fetch_add(&metrics.reclaims, 1);
}

static void batch_done(struct replica *r)
{
    struct request *list = r->batch;
    r->batch = NULL;
    if (r->err == PGSTORE_OK) {
        metrics_observe(&metrics.pg_round_trip_seconds,
                        (double)(r->done_ns - r->sent_ns) / 1e9);
        metrics_observe(&metrics.pg_batch_calls, (double)r->ncalls);
        check_clock(r);
    } else {
        job_failed(r, "batch");
    }
    size_t i = 0;
    for (struct request *req = list, *next; req != NULL; req = next, i++) {
        next = req->next;
        req->next = NULL;
        const struct pgstore_call *c = &r->calls[i];
        req->reason[0] = '\0';
        req->needs_sync = false;
        if (r->err != PGSTORE_OK) {
            unavailable(req, "storage unavailable");
        } else if (c->code == RULES_OK || c->code == RULES_NOOP) {
            count_call(c);
            req->status = REPLY_OK;
            req->grant_token = c->granted;
            req->grant_expiry_ns = c->expiry_ns;
        } else {
            req->status = REPLY_HELD;
            snprintf(req->reason, sizeof(req->reason), "%s",
                     rules_reason(c->code));
        }
        r->reply(r->reply_arg, req);
    }
}

/* Stats from st (the database's counts) and this replica's counters. */
static void fill_stats(const struct replica *r, struct admin_stats *out,
                       const struct pgstore_stats *st)
{
    out->live_leases = st->live;
    out->lease_entries = st->entries;
    out->takeovers = atomic_load(&metrics.takeovers);
    out->expiries = atomic_load(&metrics.expiries);
    out->reclaims = atomic_load(&metrics.reclaims);
    out->token_high_water_mark = st->high_water;
    out->uptime_s = (clock_mono_ns() - r->start_mono_ns) / 1000000000;
    out->quarantine_remaining_ms = st->quarantine_remaining_ns / 1000000;
    out->storage_failing = !r->connected;
}

static void admin_done(struct replica *r)
{
    struct request *req = r->admin;
    r->admin = NULL;
    if (r->err != PGSTORE_OK) {
        job_failed(r, "admin");
        unavailable(req, "storage unavailable");
    } else if (req->op == OP_STATS) {
        r->last_stats = r->stats;
        fill_stats(r, &req->admin->stats, &r->stats);
    }
    r->reply(r->reply_arg, req);
}

static void update_gauges(const struct pgstore_stats *st)
{
    atomic_store(&metrics.leases_live, (int64_t)st->live);
    atomic_store(&metrics.lease_entries, (int64_t)st->entries);
    atomic_store(&metrics.quarantine_remaining_ms,
                 st->quarantine_remaining_ns / 1000000);
}

static void connect_done(struct replica *r)
{
    if (r->err != PGSTORE_OK) {
        job_failed(r, "connect");
        r->next_connect_ms = mono_ms() + r->backoff_ms;
        r->backoff_ms = r->backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS
                                                           : r->backoff_ms * 2;
        return;
    }
    r->have_offset = false; /* another server, maybe another clock */
    if (r->primary.changed) {
        atomic_fetch_add(&metrics.pg_failovers, 1);
        log_warn("database_primary_changed",
                 "quarantine_ms=%lld reason=\"a failover, or the database "
                 "restarted: leases held before wait for the quarantine\"",
                 (long long)(r->primary.quarantine_remaining_ns / 1000000));
    }
    log_info("database_connected", NULL);
    set_connected(r, true);
}

static void job_done(uv_work_t *w, int status)
{
    struct replica *r = w->data;
    enum job job = r->job;
    r->job = JOB_NONE;
    if (status != 0) { /* cancelled: never, as nothing cancels it */
        r->err = PGSTORE_EFAIL;
        snprintf(r->errmsg, sizeof(r->errmsg), "the job was cancelled");
    }
    switch (job) {
    case JOB_BATCH:
        batch_done(r);
        break;
    case JOB_ADMIN:
        admin_done(r);
        break;
    case JOB_COLLECT:
        if (r->err != PGSTORE_OK) {
            job_failed(r, "collect");
            break;
        }
        atomic_fetch_add(&metrics.expiries, r->expired);
        r->last_stats = r->stats;
        update_gauges(&r->stats);
        if (r->collected > 0)
            log_debug("collected", "rows=%zu", r->collected);
        break;
    case JOB_CONNECT:
        connect_done(r);
        break;
    case JOB_NONE:
        abort();
    }
    if (r->closing)
        maybe_finish_close(r);
    else
        process(r);
}

static void start(struct replica *r, enum job job)
{
    r->job = job;
    uv_queue_work(r->loop, &r->work, run_job, job_done);
}

/* Without a connection, nothing waits: every call is answered at once,
 * UNAVAILABLE, but Stats, which says that storage is failing (with the
 * database's counts as last seen). */
static void refuse_all(struct replica *r)
{
    struct request *req;
    while ((req = pop(&r->leases)) != NULL ||
           (req = pop(&r->admins)) != NULL) {
        req->needs_sync = false;
        req->reason[0] = '\0';
        if (req->op == OP_STATS && (req->admin = admin_result_new(0))) {
            req->status = REPLY_OK;
            fill_stats(r, &req->admin->stats, &r->last_stats);
        } else {
            unavailable(req, "storage unavailable");
        }
        r->reply(r->reply_arg, req);
    }
}

/* Starts the next job, if none is in flight. */
static void process(struct replica *r)
{
    if (!r->connected)
        refuse_all(r);
    if (r->job != JOB_NONE || r->closing)
        return;
    if (!r->connected) {
        if (mono_ms() >= r->next_connect_ms)
            start(r, JOB_CONNECT);
        return;
    }
    if (r->admins.head != NULL && (r->admin_turn || r->leases.head == NULL)) {
        struct request *req = pop(&r->admins);
        r->admin_turn = false;
        req->status = REPLY_OK;
        req->reason[0] = '\0';
        req->admin = admin_result_new(req->op == OP_GET    ? 1
                                      : req->op == OP_LIST ? req->page_size
                                                           : 0);
        if (req->admin == NULL) {
            unavailable(req, "out of memory");
            r->reply(r->reply_arg, req);
            process(r);
            return;
        }
        r->admin = req;
        start(r, JOB_ADMIN);
        return;
    }
    if (r->leases.head != NULL) {
        struct request **tail = &r->batch;
        r->ncalls = 0;
        while (r->ncalls < MAX_BATCH && r->leases.head != NULL) {
            struct request *req = pop(&r->leases);
            r->calls[r->ncalls++] = (struct pgstore_call){
                .op = rules_op_of(req->op),
                .session = req->session,
                .session_len = req->session_len,
                .owner = req->owner,
                .owner_len = req->owner_len,
                .token = req->token,
            };
            *tail = req;
            tail = &req->next;
        }
        r->admin_turn = true;
        start(r, JOB_BATCH);
        return;
    }
    if (mono_ms() >= r->next_collect_ms) {
        int64_t every = r->ttl_ns / 1000000;
        every = every < COLLECT_MIN_MS   ? COLLECT_MIN_MS
                : every > COLLECT_MAX_MS ? COLLECT_MAX_MS
                                         : every;
        r->next_collect_ms = mono_ms() + every;
        start(r, JOB_COLLECT);
    }
}

void replica_submit(struct replica *r, struct request *list)
{
    assert(!r->closing);
    for (struct request *req = list, *next; req != NULL; req = next) {
        next = req->next;
        push(request_is_admin(req->op) ? &r->admins : &r->leases, req);
    }
    process(r);
}

static void on_tick(uv_timer_t *t)
{
    process(t->data);
}

struct replica *replica_create(uv_loop_t *loop, struct pgstore *db,
                               int64_t ttl_ns)
{
    struct replica *r = calloc(1, sizeof(*r));
    if (r != NULL)
        r->calls = calloc(MAX_BATCH, sizeof(*r->calls));
    if (r == NULL || r->calls == NULL) {
        pgstore_close(db);
        free(r);
        return NULL;
    }
    r->loop = loop;
    r->db = db;
    r->ttl_ns = ttl_ns;
    r->work.data = r;
    r->connected = true;
    r->backoff_ms = BACKOFF_MIN_MS;
    r->start_mono_ns = clock_mono_ns();
    r->next_collect_ms = mono_ms();
    metrics.postgres = true;
    uv_timer_init(loop, &r->timer);
    r->timer.data = r;
    uv_timer_start(&r->timer, on_tick, TICK_MS, TICK_MS);
    return r;
}

void replica_set_reply(struct replica *r,
                       void (*reply)(void *arg, struct request *req),
                       void (*storage)(void *arg, bool ok),
                       void (*fatal)(void *arg, const char *why), void *arg)
{
    (void)fatal;
    r->reply = reply;
    r->storage = storage;
    r->reply_arg = arg;
}

static void on_timer_closed(uv_handle_t *h)
{
    struct replica *r = h->data;
    void (*done)(void *) = r->done;
    void *arg = r->done_arg;
    pgstore_close(r->db);
    free(r->calls);
    free(r);
    done(arg);
}

/* Closes once no job is in flight. */
static void maybe_finish_close(struct replica *r)
{
    if (r->job != JOB_NONE)
        return;
    assert(r->leases.head == NULL && r->admins.head == NULL);
    uv_close((uv_handle_t *)&r->timer, on_timer_closed);
}

void replica_close(struct replica *r, void (*done)(void *arg), void *arg)
{
    r->closing = true;
    r->done = done;
    r->done_arg = arg;
    uv_timer_stop(&r->timer);
    maybe_finish_close(r);
}
