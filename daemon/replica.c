/*
 * The loop side of a replica over PostgreSQL (see replica.h).
 *
 * The replica has a few connections to the database (--postgres-
 * connections), each a `slot` with one round trip in flight at a time, on
 * a worker thread; the loop never waits for the network. Lease calls that
 * arrive while every connection is busy wait (in the front end's hand-off,
 * which then does not wake the loop for each, and in `leases`), and the
 * next connection free takes all of them (up to MAX_BATCH) in one round trip:
 * one transaction per batch, group commit over the network. With two
 * connections, one batch is sent while the other commits, and the
 * database flushes its log for both at once. The calls of one session
 * are decided in the order they arrived: a call whose session is in a
 * batch in flight waits for that batch (which may still wait for a row
 * lock: a holder's renewal would overtake its release). A reply leaves
 * only once its batch's COMMIT returned, so an OK is as durable as the
 * database makes a commit (with a synchronous standby: on two hosts).
 * Batches in flight at once hold only calls that were in flight at once,
 * and the database locks rows in session order in each, so they never
 * deadlock. Admin calls take turns with the batches, one per round trip,
 * so that neither starves the other.
 *
 * A slot's database connection is the worker's while its job is in flight
 * (`job` != JOB_NONE), and nobody's otherwise: the loop only looks at
 * what a job left behind. A job is one of: a batch, one admin call, a
 * garbage collection (one slot at a time), or a (re)connection.
 *
 * When a connection is lost (a broken socket, a missed deadline), the
 * batch in flight on it gets UNAVAILABLE (its commit may or may not have
 * happened: the client retries, which the rules make safe), and the slot
 * reconnects, at once and then with a backoff up to a second. While no
 * slot is connected, health says NOT_SERVING and every call is answered
 * UNAVAILABLE at once instead of waiting. A reconnection that finds a
 * different primary (failover, or the database restarted) is logged and
 * counted once per replica; the database itself holds the quarantine
 * every replica honours.
 *
 * The database's clock decides expiry. Each batch also reads it, and each
 * slot compares its progress with the monotonic clock's between round
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
#include "siphash.h"

#define MAX_BATCH 1024
#define TICK_MS 100
#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 1000
#define COLLECT_MAX 1024
#define COLLECT_MIN_MS 1000
#define COLLECT_MAX_MS 30000
#define CLOCK_STEP_NS INT64_C(1000000000)
#define INFLIGHT_SLOTS 16384 /* counters of the lease calls in flight */

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

struct replica;

/* One connection to the database and the job in flight on it. */
struct slot {
    struct replica *r;
    struct pgstore *db;
    enum job job;
    uv_work_t work;
    /* What the job is about, and what it left. */
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
    struct pgstore_primary primary;

    bool connected; /* as far as the loop knows */
    int backoff_ms;
    int64_t next_connect_ms;
    /* The database clock's offset from the monotonic one at the last
     * batch, and that batch's round trip. */
    bool have_offset;
    int64_t offset_ns, offset_rtt_ns;
};

struct replica {
    uv_loop_t *loop;
    int64_t ttl_ns;
    void (*reply)(void *arg, struct request *req);
    void (*storage)(void *arg, bool ok);
    void (*wanted)(void *arg, bool wanted);
    void *reply_arg;

    struct queue leases, admins;
    /* The lease calls in the batches in flight, counted by their
     * session's hash (two sessions may share a counter: then a call
     * waits when it need not). */
    struct siphash_key hash_key;
    uint32_t inflight[INFLIGHT_SLOTS];
    struct slot slots[REPLICA_MAX_CONNECTIONS];
    size_t nslots;
    bool serving; /* some slot is connected */
    bool admin_turn; /* the next job is an admin call's, if one waits */
    bool collecting; /* a slot is collecting garbage */
    int64_t next_collect_ms;
    struct pgstore_stats last_stats; /* the last the database gave */
    int64_t primary_seen_us; /* the primary start last logged as new */
    struct log_limit fail_log;

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

/* The index of req's session's counter in r->inflight. */
static uint32_t inflight_slot(const struct replica *r,
                              const struct request *req)
{
    uint64_t h = siphash24(&r->hash_key, req->session, req->session_len);
    return (uint32_t)(h % INFLIGHT_SLOTS);
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

/* Some slot is connected, or none is any more: tell the owner (health). */
static void update_serving(struct replica *r)
{
    bool serving = false;
    for (size_t i = 0; i < r->nslots; i++)
        serving = serving || r->slots[i].connected;
    if (r->serving == serving)
        return;
    r->serving = serving;
    atomic_store(&metrics.storage_failing, !serving);
    if (r->storage != NULL)
        r->storage(r->reply_arg, serving);
}

/* A job failed: count it, log it (at most a line a second). After a lost
 * connection, the slot reconnects at once, and so do the idle ones, whose
 * connections are most likely lost too (the server died) but would not
 * say so before their next job. */
static void job_failed(struct slot *sl, const char *what)
{
    struct replica *r = sl->r;
    atomic_fetch_add(&metrics.pg_errors, 1);
    uint64_t held;
    char why[256];
    log_quotable(why, sizeof(why), sl->errmsg, strlen(sl->errmsg));
    if (log_limit_pass(&r->fail_log, clock_mono_ns(), &held))
        log_warn("database_failed", "during=%s error=\"%s\" not_logged=%llu",
                 what, why, (unsigned long long)held);
    if (sl->err != PGSTORE_EDOWN || !sl->connected)
        return;
    for (size_t i = 0; i < r->nslots; i++) {
        struct slot *o = &r->slots[i];
        if (o == sl || (o->connected && o->job == JOB_NONE)) {
            o->connected = false;
            o->next_connect_ms = mono_ms();
            o->backoff_ms = BACKOFF_MIN_MS;
        }
    }
    update_serving(r);
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

static void run_admin(struct slot *sl)
{
    struct request *req = sl->admin;
    struct lease_row row;
    bool live = false, found = false;
    switch (req->op) {
    case OP_GET:
        sl->err = pgstore_get(sl->db, req->session, req->session_len, &row,
                              &live, &found);
        if (sl->err != PGSTORE_OK)
            break;
        if (!found) {
            req->status = REPLY_NOT_FOUND;
            snprintf(req->reason, sizeof(req->reason), "no lease");
        } else if (admin_result_add(req->admin, &row, live) != 0) {
            unavailable(req, "out of memory");
        }
        break;
    case OP_LIST:
        sl->err = pgstore_list(sl->db, req->session, req->session_len,
                               req->page_token, req->page_token_len,
                               req->page_size + 1, list_row, req);
        if (sl->err == 1)
            sl->err = PGSTORE_OK;
        break;
    case OP_STATS:
        sl->err = pgstore_stats(sl->db, &sl->stats);
        break;
    default:
        abort();
    }
}

static void run_job(uv_work_t *w)
{
    struct slot *sl = w->data;
    sl->sent_ns = clock_mono_ns();
    switch (sl->job) {
    case JOB_BATCH:
        sl->err =
            pgstore_decide(sl->db, sl->calls, sl->ncalls, &sl->db_now_ns);
        break;
    case JOB_ADMIN:
        run_admin(sl);
        break;
    case JOB_COLLECT:
        sl->err = pgstore_collect(sl->db, COLLECT_MAX, &sl->collected,
                                  &sl->expired);
        if (sl->err == PGSTORE_OK)
            sl->err = pgstore_stats(sl->db, &sl->stats);
        break;
    case JOB_CONNECT:
        sl->err = pgstore_connect(sl->db, &sl->primary);
        break;
    case JOB_NONE:
        abort();
    }
    sl->done_ns = clock_mono_ns();
    snprintf(sl->errmsg, sizeof(sl->errmsg), "%s",
             sl->err != PGSTORE_OK ? pgstore_errmsg(sl->db) : "");
}

/* --- Back on the loop ------------------------------------------------- */

static void process(struct replica *r);
static void maybe_finish_close(struct replica *r);

/* A step of the database host's wall clock: its clock moved unlike the
 * monotonic one between two batches on one connection, by more than the
 * round trips explain. */
static void check_clock(struct slot *sl)
{
    if (sl->db_now_ns == 0)
        return; /* nothing was sent */
    int64_t rtt = sl->done_ns - sl->sent_ns;
    int64_t offset = sl->db_now_ns - sl->done_ns;
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

static void count_call(const struct pgstore_call *c)
{
    if (c->flags & PGSTORE_TAKEOVER)
        atomic_fetch_add(&metrics.takeovers, 1);
    if (c->flags & PGSTORE_EXPIRED)
        atomic_fetch_add(&metrics.expiries, 1);
    if (c->flags & PGSTORE_RECLAIM)
        atomic_fetch_add(&metrics.reclaims, 1);
}

static void batch_done(struct slot *sl)
{
    struct replica *r = sl->r;
    struct request *list = sl->batch;
    sl->batch = NULL;
    if (sl->err == PGSTORE_OK) {
        metrics_observe(&metrics.pg_round_trip_seconds,
                        (double)(sl->done_ns - sl->sent_ns) / 1e9);
        metrics_observe(&metrics.pg_batch_calls, (double)sl->ncalls);
        check_clock(sl);
    } else {
        job_failed(sl, "batch");
    }
    size_t i = 0;
    for (struct request *req = list, *next; req != NULL; req = next, i++) {
        next = req->next;
        req->next = NULL;
        assert(r->inflight[req->order_slot] > 0);
        r->inflight[req->order_slot]--;
        const struct pgstore_call *c = &sl->calls[i];
        req->reason[0] = '\0';
        req->needs_sync = false;
        req->change = CHANGE_NONE;
        if (sl->err != PGSTORE_OK) {
            unavailable(req, "storage unavailable");
        } else if (c->code == RULES_OK || c->code == RULES_NOOP) {
            count_call(c);
            req->status = REPLY_OK;
            req->grant_token = c->granted;
            req->grant_expiry_ns = c->expiry_ns;
            if (req->op == OP_RELEASE && c->code == RULES_OK)
                req->change = CHANGE_RELEASE;
            else if (c->flags & PGSTORE_TAKEOVER)
                req->change = CHANGE_TAKEOVER;
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
    out->storage_failing = !r->serving;
}

static void admin_done(struct slot *sl)
{
    struct replica *r = sl->r;
    struct request *req = sl->admin;
    sl->admin = NULL;
    if (sl->err != PGSTORE_OK) {
        job_failed(sl, "admin");
        unavailable(req, "storage unavailable");
    } else if (req->op == OP_STATS) {
        r->last_stats = sl->stats;
        fill_stats(r, &req->admin->stats, &sl->stats);
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

static void collect_done(struct slot *sl)
{
    struct replica *r = sl->r;
    r->collecting = false;
    if (sl->err != PGSTORE_OK) {
        job_failed(sl, "collect");
        return;
    }
    atomic_fetch_add(&metrics.expiries, sl->expired);
    r->last_stats = sl->stats;
    update_gauges(&sl->stats);
    if (sl->collected > 0)
        log_debug("collected", "rows=%zu", sl->collected);
}

static void connect_done(struct slot *sl)
{
    struct replica *r = sl->r;
    if (sl->err != PGSTORE_OK) {
        job_failed(sl, "connect");
        sl->next_connect_ms = mono_ms() + sl->backoff_ms;
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
    log_info("database_connected", "connection=%zu",
             (size_t)(sl - r->slots) + 1);
    sl->connected = true;
    update_serving(r);
}

static void job_done(uv_work_t *w, int status)
{
    struct slot *sl = w->data;
    struct replica *r = sl->r;
    enum job job = sl->job;
    sl->job = JOB_NONE;
    if (status != 0) { /* cancelled: never, as nothing cancels it */
        sl->err = PGSTORE_EFAIL;
        snprintf(sl->errmsg, sizeof(sl->errmsg), "the job was cancelled");
    }
    switch (job) {
    case JOB_BATCH:
        batch_done(sl);
        break;
    case JOB_ADMIN:
        admin_done(sl);
        break;
    case JOB_COLLECT:
        collect_done(sl);
        break;
    case JOB_CONNECT:
        connect_done(sl);
        break;
    case JOB_NONE:
        abort();
    }
    if (r->closing)
        maybe_finish_close(r);
    else
        process(r);
}

static void start(struct slot *sl, enum job job)
{
    sl->job = job;
    uv_queue_work(sl->r->loop, &sl->work, run_job, job_done);
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

/* Takes the lease calls waiting (up to MAX_BATCH) into a batch for sl,
 * but for those whose session is in a batch in flight: they wait, in
 * order, in front of the queue (the counters change only once the batch
 * is made, so a session's calls all go, or all wait). Returns false when
 * the batch is empty. */
static bool take_batch(struct replica *r, struct slot *sl)
{
    struct queue wait = {NULL, NULL};
    struct request **tail = &sl->batch;
    sl->batch = NULL;
    sl->ncalls = 0;
    while (sl->ncalls < MAX_BATCH && r->leases.head != NULL) {
        struct request *req = pop(&r->leases);
        if (r->inflight[req->order_slot] > 0) {
            push(&wait, req);
            continue;
        }
        sl->calls[sl->ncalls++] = (struct pgstore_call){
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
    if (wait.head != NULL) {
        wait.tail->next = r->leases.head;
        if (r->leases.head == NULL)
            r->leases.tail = wait.tail;
        r->leases.head = wait.head;
    }
    for (struct request *req = sl->batch; req != NULL; req = req->next)
        r->inflight[req->order_slot]++;
    return sl->ncalls > 0;
}

/* Starts the first admin call waiting on sl. */
static void give_admin(struct replica *r, struct slot *sl)
{
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
        return;
    }
    sl->admin = req;
    start(sl, JOB_ADMIN);
}

/* Gives connected slot sl, idle, the next work: an admin call (its turn,
 * or no lease call can go), a batch, or a due collection. Returns false
 * when there is none. */
static bool give_work(struct replica *r, struct slot *sl)
{
    bool admin = r->admins.head != NULL;
    if (admin && (r->admin_turn || r->leases.head == NULL)) {
        give_admin(r, sl);
        return true;
    }
    if (take_batch(r, sl)) {
        r->admin_turn = true;
        start(sl, JOB_BATCH);
        return true;
    }
    if (admin) {
        give_admin(r, sl);
        return true;
    }
    if (!r->collecting && mono_ms() >= r->next_collect_ms) {
        int64_t every = r->ttl_ns / 1000000;
        every = every < COLLECT_MIN_MS   ? COLLECT_MIN_MS
                : every > COLLECT_MAX_MS ? COLLECT_MAX_MS
                                         : every;
        r->next_collect_ms = mono_ms() + every;
        r->collecting = true;
        start(sl, JOB_COLLECT);
        return true;
    }
    return false;
}

/* Starts what the idle slots can do. */
static void process(struct replica *r)
{
    if (!r->serving)
        refuse_all(r);
    if (r->closing)
        return;
    for (size_t i = 0; i < r->nslots; i++) {
        struct slot *sl = &r->slots[i];
        if (sl->job != JOB_NONE)
            continue;
        if (!sl->connected) {
            if (mono_ms() >= sl->next_connect_ms)
                start(sl, JOB_CONNECT);
            continue;
        }
        while (sl->job == JOB_NONE && give_work(r, sl))
            ;
    }
    /* With every connection busy, a new call could only wait in the
     * queue: it may as well wait in the hand-off, without waking the
     * loop; the next slot free takes it. */
    bool idle = !r->serving;
    for (size_t i = 0; i < r->nslots; i++)
        idle = idle || r->slots[i].job == JOB_NONE;
    if (r->wanted != NULL)
        r->wanted(r->reply_arg, idle);
}

void replica_submit(struct replica *r, struct request *list)
{
    assert(!r->closing);
    for (struct request *req = list, *next; req != NULL; req = next) {
        next = req->next;
        if (request_is_admin(req->op)) {
            push(&r->admins, req);
        } else {
            req->order_slot = inflight_slot(r, req);
            push(&r->leases, req);
        }
    }
    process(r);
}

void replica_set_wanted(struct replica *r,
                        void (*wanted)(void *arg, bool wanted))
{
    r->wanted = wanted;
}

static void on_tick(uv_timer_t *t)
{
    process(t->data);
}

struct replica *replica_create(uv_loop_t *loop, struct pgstore *const *dbs,
                               size_t n, int64_t ttl_ns)
{
    assert(n >= 1 && n <= REPLICA_MAX_CONNECTIONS);
    struct replica *r = calloc(1, sizeof(*r));
    bool ok = r != NULL;
    for (size_t i = 0; ok && i < n; i++)
        ok = (r->slots[i].calls = calloc(MAX_BATCH,
                                         sizeof(*r->slots[i].calls))) !=
             NULL;
    if (!ok) {
        for (size_t i = 0; i < n; i++) {
            pgstore_close(dbs[i]);
            if (r != NULL)
                free(r->slots[i].calls);
        }
        free(r);
        return NULL;
    }
    r->loop = loop;
    r->ttl_ns = ttl_ns;
    r->nslots = n;
    siphash_random_key(&r->hash_key);
    for (size_t i = 0; i < n; i++) {
        struct slot *sl = &r->slots[i];
        sl->r = r;
        sl->db = dbs[i];
        sl->work.data = sl;
        sl->connected = true;
        sl->backoff_ms = BACKOFF_MIN_MS;
    }
    r->serving = true;
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
    for (size_t i = 0; i < r->nslots; i++) {
        pgstore_close(r->slots[i].db);
        free(r->slots[i].calls);
    }
    free(r);
    done(arg);
}

/* Closes once no job is in flight. */
static void maybe_finish_close(struct replica *r)
{
    for (size_t i = 0; i < r->nslots; i++)
        if (r->slots[i].job != JOB_NONE)
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
