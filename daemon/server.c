/*
 * The loop side of leased (see server.h).
 *
 * Renewals are soft state. A renewal (or a re-acquire by the holder)
 * keeps owner and token, so the row on disk already names the holder;
 * only its expiry changes, and that is kept in the engine's memory and
 * never written: the restart quarantine makes it hold across a crash or
 * a power loss (docs/protocol.md, "Restart quarantine"). The store sees
 * only changes of owner (takeovers, releases) and garbage collection, and
 * matches rows on owner and token, not expiry.
 *
 * The short path: a renewal of a session with no change in flight and no
 * call waiting ahead of it is decided as soon as it arrives
 * (server_submit), even while a commit is in flight; it touches only its
 * own entry, which the commit worker does not read. Everything else waits
 * in `pending` while a commit is in flight. The calls of one session are
 * decided in the order they arrived: a renewal must not overtake its
 * holder's release that waits (the holder may have given up on it), or
 * the renewal's OK would promise a lease the release ends soon after.
 * When no commit is in flight, everything pending (up to MAX_BATCH)
 * becomes one batch: the engine decides each request in arrival order at
 * one `now`. A request whose session one of the batch's changes touched
 * depends on the batch's commit and waits for it; the others are answered
 * at once. The changes go to the store in one transaction on a worker
 * thread (group commit).
 *
 * An answer decided from a change of owner must not go out before that
 * change is on disk, and must fail if it never gets there (promise 7):
 * a takeover or release, and a re-acquire, renewal or refusal right after
 * one. The same holds for a request about a session garbage collection
 * removed (a no-op release, a refusal): the row would come back after a
 * power loss. The engine keeps, per session, the number of the commit
 * that last changed its owner, and that of the last collection
 * (engine_stamp). A stamp above `committed_seq` is a change in flight
 * (the batch's); one above `synced_seq` makes the answer wait for a sync
 * (an fdatasync of the WAL, on another worker) that began after that
 * commit ended.
 *
 * So one commit and one sync may be in flight at once: the next batch
 * commits while the last one syncs, and no renewal waits for either. Each
 * commit has a sequence number; a sync covers every commit that ended
 * before it began (`sync_covers`).
 *
 * If a commit fails, the engine undoes the batch and every request that
 * depended on it gets UNAVAILABLE: never OK for a change of owner that was
 * not stored. Storage counts as failing (health NOT_SERVING) until a
 * commit of the kind that failed succeeds: a collection committing says
 * nothing about the takeovers that failed before it (a full disk may
 * still take the one and not the other).
 *
 * If a sync fails, nothing is answered any more: Linux may have dropped
 * the dirty pages it could not write, so the page cache, and the engine
 * built on it, are no longer the truth, and any later sync could succeed
 * over a hole. The server calls its fatal callback (leased exits for its
 * supervisor to restart it, which re-reads the disk under a fresh restart
 * quarantine).
 *
 * The engine and the store are touched only by the loop, and by the
 * commit worker only while `committing`: then the worker reads the
 * batch's changes, and the loop makes no change but a renewal of another
 * session (the short path, which writes no string the worker reads); the
 * sync worker touches only store_sync(). Every write after start is the
 * commit worker's, in turn: the batches, the storage probe and the TTL a
 * restart must wait for (lower_quarantine_ttl), so the loop never waits
 * for the disk.
 */
#include "server.h"

#include <assert.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "admin.h"
#include "clock.h"
#include "engine.h"
#include "faultpoint.h"
#include "log.h"
#include "metrics.h"
#include "rules.h"
#include "store.h"

#define MAX_BATCH 4096
#define GC_MAX 1024
#define GC_INTERVAL_MS 1000
#define CENSUS_BUCKETS 65536 /* looked at per tick for leases_live */
#define CLOCK_STEP_NS INT64_C(1000000000) /* wall clock jumps logged */
#define QUEUED_SLOTS 4096 /* counters of the lease calls waiting */

struct server {
    uv_loop_t *loop;
    struct engine *engine;
    struct store *store;
    struct clock clock;
    void (*reply)(void *arg, struct request *req);
    void (*storage)(void *arg, bool ok);
    void (*fatal)(void *arg, const char *why);
    void *reply_arg;

    struct request *pending, *pending_tail;
    /* The lease calls in pending, counted by their session's hash: a
     * renewal takes the short path only if its counter is zero (two
     * sessions may share one: then it waits when it need not). */
    uint32_t queued[QUEUED_SLOTS];

    /* The batch being committed. */
    bool committing;
    struct request *batch;
    struct engine_change *chgs; /* MAX_BATCH + GC_MAX */
    size_t nchgs;
    bool durable; /* the batch changed an owner */
    bool failing_durable; /* a commit that changed an owner failed */
    /* While such commits fail, each garbage-collection tick tries one
     * write of that kind (a commit and a sync) of its own, so that health
     * comes back even when no takeover is asked for. */
    bool probe_due, probing;
    /* Once the restart quarantine is over, the current TTL is written
     * down (lower_quarantine_ttl): a write of its own, like a probe. */
    bool ttl_due, writing_ttl;
    int64_t batch_now_ns; /* when it was decided */
    int commit_err;
    int64_t commit_ns; /* how long store_apply took */
    char commit_errmsg[256];
    uint64_t committed_seq; /* commits ended so far */
    uint64_t synced_seq; /* the last commit known to be durable */
    bool storage_failing;
    /* A line a second at most: failures, and recoveries after them. */
    struct log_limit commit_log, recovered_log;
    uv_work_t commit_work;

    /* Takeovers and releases committed, waiting for a sync (in commit
     * order), and the sync in flight. */
    struct request *waiting, *waiting_tail;
    bool syncing;
    uint64_t sync_covers; /* the last commit the sync in flight covers */
    int sync_errno;
    char sync_errmsg[256];
    int64_t sync_ns;
    uv_work_t sync_work;

    uv_timer_t gc_timer;
    bool gc_due;

    /* Admin List and Snapshot calls: one reads the store on a worker,
     * the others wait their turn. */
    struct request *lists, *lists_tail;
    bool listing;
    int list_err;
    uv_work_t list_work;
    int64_t start_mono_ns;

    int64_t ttl_ns;
    /* The longest TTL whose leases may still be live: longer than ttl_ns
     * after a restart that shortened the TTL, until the quarantine ends.
     * Kept in the store, so that a crash meanwhile still knows it. */
    int64_t quarantine_ttl_ns;

    bool closing;
    void (*done)(void *arg);
    void *done_arg;
};

static int load_row(void *arg, const struct lease_row *row)
{
    return engine_load(arg, row) == ENGINE_OK ? 0 : STORE_ENOMEM;
}

/* Counts what a change did: a takeover (new token), the expiry of the
 * lease it replaced or collected, a reclaim (renewed after expiry, nobody
 * took over), as of now_ns, when it was decided. */
static void count_change(const struct engine_change *c, int64_t now_ns)
{
    bool was_held = c->has_before && c->before.owner_len > 0;
    if (c->kind == ENGINE_DELETE) {
        if (was_held)
            atomic_fetch_add(&metrics.expiries, 1);
        return;
    }
    if (!c->has_before || c->after.token != c->before.token) {
        atomic_fetch_add(&metrics.takeovers, 1);
        if (was_held)
            atomic_fetch_add(&metrics.expiries, 1);
    } else if (was_held && c->before.expiry_ns <= now_ns) {
        atomic_fetch_add(&metrics.reclaims, 1);
    }
}

/* An operator's Revoke: into chg, as engine_revoke(), with the lease it
 * ends in req->admin for the answer and the audit, and the holder's
 * token in req->reason when it is another than the one asked for. */
static int decide_revoke(struct server *s, struct request *req,
                         struct engine_change *chg)
{
    struct lease_row row;
    bool held = engine_get(s->engine, req->session, req->session_len, &row);
    int rc = engine_revoke(s->engine, req->session, req->session_len,
                           req->token, chg);
    if (rc == ENGINE_HELD)
        snprintf(req->reason, sizeof(req->reason),
                 "the lease's token is %llu, not %llu",
                 (unsigned long long)row.token,
                 (unsigned long long)req->token);
    if (rc != ENGINE_OK)
        return rc;
    assert(held);
    (void)held;
    req->admin = admin_result_new(1);
    if (req->admin == NULL || admin_result_add(req->admin, &chg->before,
                                               false) != 0) {
        engine_finish(s->engine, chg, false);
        return ENGINE_ENOMEM;
    }
    return ENGINE_OK;
}

/* Decides req at now_ns into chg: &s->chgs[s->nchgs] in a batch, or a
 * change of the caller's on the short path (which decides only what
 * keeps owner and token: see server_submit). Returns true when the answer
 * depends on the batch's commit: a change of its session is in the batch.
 * Otherwise it may go out at once, or once an earlier commit is synced
 * (req->needs_sync). A change that keeps owner and token (a renewal, a
 * re-acquire by the owner) of a session with no change in the batch is
 * soft: finished at once, never written (see the top of this file). */
static bool decide(struct server *s, int64_t now_ns, struct request *req,
                   struct engine_change *chg)
{
    struct engine_grant grant = {0, 0};
    int rc;
    req->reason[0] = '\0';
    switch (req->op) {
    case OP_ACQUIRE:
        rc = engine_acquire(s->engine, now_ns, req->session, req->session_len,
                            req->owner, req->owner_len, &grant, chg);
        break;
    case OP_RENEW:
        rc = engine_renew(s->engine, now_ns, req->session, req->session_len,
                          req->owner, req->owner_len, req->token, &grant,
                          chg);
        break;
    case OP_RELEASE: {
        const char *owner = req->owner;
        size_t owner_len = req->owner_len;
        uint64_t token = req->token;
        struct lease_row row;
        /* A negative control of the fault campaign: any release frees. */
        if (FAULT_BROKEN("release_no_owner_check") &&
            engine_get(s->engine, req->session, req->session_len, &row) &&
            row.owner_len > 0) {
            owner = row.owner;
            owner_len = row.owner_len;
            token = row.token;
        }
        rc = engine_release(s->engine, req->session, req->session_len, owner,
                            owner_len, token, chg);
        break;
    }
    case OP_REVOKE:
        rc = decide_revoke(s, req, chg);
        break;
    default:
        abort(); /* only lease calls are decided */
    }
    req->change = CHANGE_NONE;
    if (rc == ENGINE_OK && chg->durable) /* the batch's commit: the next */
        engine_stamp(s->engine, chg, s->committed_seq + 1);
    /* Whatever the answer, it was decided from the session's last change
     * of owner (this one, or an earlier one): not before that is synced. */
    uint64_t dep = engine_stamp_of(s->engine, req->session, req->session_len);
    bool in_batch = dep > s->committed_seq;
    switch (rc) {
    case ENGINE_OK:
        if (req->op == OP_RELEASE)
            req->change = CHANGE_RELEASE;
        else if (req->op == OP_REVOKE)
            req->change = CHANGE_REVOKE;
        else if (!chg->has_before || chg->after.token != chg->before.token)
            req->change = CHANGE_TAKEOVER;
        if (in_batch) {
            assert(chg == &s->chgs[s->nchgs]);
            s->nchgs++;
            s->durable = s->durable || chg->durable;
        } else {
            count_change(chg, now_ns);
            engine_finish(s->engine, chg, true);
        }
        req->status = REPLY_OK;
        req->grant_token = grant.token;
        req->grant_expiry_ns = grant.expiry_ns;
        req->grant_ttl_ns = s->ttl_ns;
        break;
    case ENGINE_NOOP:
        req->status = req->op == OP_REVOKE ? REPLY_NOT_FOUND : REPLY_OK;
        if (req->op == OP_REVOKE)
            snprintf(req->reason, sizeof(req->reason), "no lease");
        break;
    case ENGINE_HELD:
        req->status = REPLY_HELD;
        if (req->op == OP_REVOKE)
            break; /* decide_revoke() said why */
        snprintf(req->reason, sizeof(req->reason), "%s",
                 rules_reason(req->op == OP_ACQUIRE ? RULES_HELD
                                                    : RULES_LOST));
        break;
    default:
        req->status = REPLY_UNAVAILABLE;
        snprintf(req->reason, sizeof(req->reason), "out of memory");
        req->needs_sync = false;
        return false;
    }
    req->needs_sync = dep > s->synced_seq &&
                      !FAULT_BROKEN("reply_before_sync"); /* a control */
    return in_batch;
}

static void answer_all(struct server *s, struct request *list)
{
    while (list != NULL) {
        struct request *next = list->next;
        s->reply(s->reply_arg, list);
        list = next;
    }
}

/* Storage started or stopped failing: tell the owner (health). */
static void set_failing(struct server *s, bool failing)
{
    if (s->storage_failing == failing)
        return;
    s->storage_failing = failing;
    atomic_store(&metrics.storage_failing, failing);
    if (s->storage != NULL)
        s->storage(s->reply_arg, !failing);
}

/* A commit ended: ok or not, and whether it changed an owner (the kind
 * of write that must work again before storage counts as recovered). */
static void commit_outcome(struct server *s, bool ok, bool durable)
{
    if (!ok) {
        /* Every kind that failed since storage last worked must work. */
        s->failing_durable = durable || (s->storage_failing &&
                                         s->failing_durable);
        set_failing(s, true);
        return;
    }
    if (!s->storage_failing || (s->failing_durable && !durable))
        return;
    uint64_t held;
    if (log_limit_pass(&s->recovered_log, clock_mono_ns(), &held))
        log_info("storage_recovered", "not_logged=%llu",
                 (unsigned long long)held);
    set_failing(s, false);
}

/* Answers the requests of list (linked by ->next) that need no sync, and
 * queues the others, in order, for a sync covering commit seq. */
static void answer_or_wait(struct server *s, struct request *list,
                           uint64_t seq)
{
    struct request *now = NULL, **now_tail = &now;
    for (struct request *r = list, *next; r != NULL; r = next) {
        next = r->next;
        r->next = NULL;
        if (r->needs_sync) {
            r->commit_seq = seq;
            if (s->waiting_tail != NULL)
                s->waiting_tail->next = r;
            else
                s->waiting = r;
            s->waiting_tail = r;
        } else {
            *now_tail = r;
            now_tail = &r->next;
        }
    }
    answer_all(s, now);
}

static void run_commit(uv_work_t *w)
{
    struct server *s = w->data;
    int64_t t0 = clock_mono_ns();
    /* A probe, or the TTL written down, is a batch of its own, with no
     * change and no request. */
    if (s->writing_ttl)
        s->commit_err = store_set_meta(s->store, "quarantine_ttl_ns",
                                       s->ttl_ns);
    else if (s->probing)
        s->commit_err = store_set_meta(s->store, "storage_checked_ns",
                                       s->batch_now_ns);
    else
        s->commit_err = store_apply(s->store, s->chgs, s->nchgs);
    if (s->nchgs > 0 && s->chgs[0].kind == ENGINE_DELETE) /* GC: first */
        FAULT_POINT("gc_commit");
    s->commit_ns = clock_mono_ns() - t0;
    if (s->commit_err != STORE_OK)
        snprintf(s->commit_errmsg, sizeof(s->commit_errmsg), "%s",
                 store_errmsg(s->store));
}

static void process(struct server *s);
static void maybe_finish_close(struct server *s);
static void sync_done(uv_work_t *w, int status);

static void run_sync(uv_work_t *w)
{
    struct server *s = w->data;
    FAULT_POINT("before_sync");
    int64_t t0 = clock_mono_ns();
    s->sync_errno = store_sync(s->store) == STORE_OK ? 0 : errno;
    s->sync_ns = clock_mono_ns() - t0;
    if (s->sync_errno != 0)
        snprintf(s->sync_errmsg, sizeof(s->sync_errmsg),
                 "fdatasync of the WAL failed: %s", strerror(s->sync_errno));
}

/* Starts a sync for everything committed so far, if something waits for
 * one and none is in flight. */
static void maybe_sync(struct server *s)
{
    if (s->syncing || s->waiting == NULL)
        return;
    s->syncing = true;
    s->sync_covers = s->committed_seq;
    uv_queue_work(s->loop, &s->sync_work, run_sync, sync_done);
}

/* A sync failed: stop answering, and let the owner end the process (see
 * the top of this file). */
static void sync_failed(struct server *s, const char *why)
{
    set_failing(s, true);
    s->fatal(s->reply_arg, why);
}

static void sync_done(uv_work_t *w, int status)
{
    struct server *s = w->data;
    s->syncing = false;
    if (status != 0 || s->sync_errno != 0) {
        sync_failed(s, status != 0 ? "the sync was cancelled"
                                   : s->sync_errmsg);
        return;
    }
    log_debug("synced", "sync_us=%lld", (long long)(s->sync_ns / 1000));
    metrics_observe(&metrics.fsync_seconds, (double)s->sync_ns / 1e9);
    s->synced_seq = s->sync_covers;
    /* Answer, in commit order, everything this sync covered. */
    struct request *done = NULL, **tail = &done;
    while (s->waiting != NULL && s->waiting->commit_seq <= s->sync_covers) {
        struct request *r = s->waiting;
        s->waiting = r->next;
        r->next = NULL;
        *tail = r;
        tail = &r->next;
    }
    if (s->waiting == NULL)
        s->waiting_tail = NULL;
    answer_all(s, done);
    maybe_sync(s);
    if (s->closing)
        maybe_finish_close(s);
}

/* The TTL write ended (see lower_quarantine_ttl): as a failed sync if
 * its sync failed; otherwise, failed, it is tried again at the next
 * tick, and health is not its business. */
static void ttl_written(struct server *s, int err)
{
    s->writing_ttl = false;
    if (err == STORE_ESYNC) {
        sync_failed(s, s->commit_errmsg);
        return;
    }
    s->committing = false;
    if (err != STORE_OK)
        log_warn("store_failed", "error=\"%s\"", s->commit_errmsg);
    else
        s->quarantine_ttl_ns = s->ttl_ns;
    if (s->closing)
        maybe_finish_close(s);
    else
        process(s);
}

static void commit_done(uv_work_t *w, int status)
{
    struct server *s = w->data;
    if (s->writing_ttl) {
        if (status != 0)
            snprintf(s->commit_errmsg, sizeof(s->commit_errmsg),
                     "the write was cancelled");
        ttl_written(s, status == 0 ? s->commit_err : STORE_EIO);
        return;
    }
    bool ok = status == 0 && s->commit_err == STORE_OK;
    uint64_t seq = ++s->committed_seq;
    if (ok) {
        log_debug("committed",
                  "changes=%zu durable=%d probe=%d commit_us=%lld", s->nchgs,
                  (int)s->durable, (int)s->probing,
                  (long long)(s->commit_ns / 1000));
        metrics_observe(&metrics.batch_changes, (double)s->nchgs);
        metrics_observe(&metrics.commit_seconds, (double)s->commit_ns / 1e9);
        for (size_t i = 0; i < s->nchgs; i++) {
            count_change(&s->chgs[i], s->batch_now_ns);
            engine_finish(s->engine, &s->chgs[i], true);
        }
        FAULT_POINT("after_commit"); /* committed, nothing answered yet */
    } else {
        for (size_t i = s->nchgs; i-- > 0;)
            engine_finish(s->engine, &s->chgs[i], false);
        uint64_t held;
        if (log_limit_pass(&s->commit_log, clock_mono_ns(), &held))
            log_warn("commit_failed",
                     "changes=%zu error=\"%s\" not_logged=%llu", s->nchgs,
                     s->commit_errmsg, (unsigned long long)held);
        for (struct request *r = s->batch; r != NULL; r = r->next) {
            r->status = REPLY_UNAVAILABLE;
            r->needs_sync = false;
            snprintf(r->reason, sizeof(r->reason), "storage unavailable");
        }
    }
    if (s->commit_err == STORE_ESYNC) { /* the probe's sync */
        sync_failed(s, s->commit_errmsg);
        return;
    }
    commit_outcome(s, ok, s->durable || s->probing);
    s->nchgs = 0;
    s->committing = false;
    /* Answer what need not wait for the disk; the rest waits for a sync
     * that begins after this commit. */
    struct request *batch = s->batch;
    s->batch = NULL;
    answer_or_wait(s, batch, seq);
    maybe_sync(s);
    if (s->closing)
        maybe_finish_close(s);
    else
        process(s);
}

/* --- Admin calls (read only) ------------------------------------------ */

/* The leases live at now_ns, counted now: the gauge's census
 * (update_gauges) is up to a tick old, and longer on a big table. The
 * count refreshes the gauge too. O(entries) on the loop: Stats is an
 * admin call, not a hot path. */
static uint64_t count_live(struct server *s, int64_t now_ns)
{
    size_t live = engine_count_live(s->engine, now_ns);
    atomic_store(&metrics.leases_live, (int64_t)live);
    return live;
}

static void answer_admin(struct server *s, struct request *r, int64_t now_ns)
{
    r->status = REPLY_OK;
    r->reason[0] = '\0';
    r->admin = admin_result_new(r->op == OP_GET ? 1 : 0);
    if (r->admin == NULL) {
        r->status = REPLY_UNAVAILABLE;
        snprintf(r->reason, sizeof(r->reason), "out of memory");
    } else if (r->op == OP_GET) {
        struct lease_row row;
        if (!engine_get(s->engine, r->session, r->session_len, &row) ||
            row.owner_len == 0) {
            r->status = REPLY_NOT_FOUND;
            snprintf(r->reason, sizeof(r->reason), "no lease");
        } else if (admin_result_add(r->admin, &row,
                              engine_live(s->engine, r->session,
                                          r->session_len, now_ns)) != 0) {
            r->status = REPLY_UNAVAILABLE;
            snprintf(r->reason, sizeof(r->reason), "out of memory");
        }
    } else {
        struct admin_stats *st = &r->admin->stats;
        st->live_leases = count_live(s, now_ns);
        st->lease_entries = engine_count(s->engine);
        st->takeovers = atomic_load(&metrics.takeovers);
        st->expiries = atomic_load(&metrics.expiries);
        st->reclaims = atomic_load(&metrics.reclaims);
        st->token_high_water_mark = engine_high_water(s->engine);
        st->uptime_s = (clock_mono_ns() - s->start_mono_ns) / 1000000000;
        int64_t q = engine_quarantine_end(s->engine) - now_ns;
        st->quarantine_remaining_ms = q > 0 ? q / 1000000 : 0;
        st->storage_failing = s->storage_failing;
    }
    s->reply(s->reply_arg, r);
}

/* A listed row, as committed; list_done() sets its expiry and liveness. */
static int list_row(void *arg, const struct lease_row *row)
{
    int rc = admin_page_add(arg, row, false);
    return rc >= 0 ? rc : STORE_ENOMEM;
}

/* Renewals are never written (see the top of this file), so a listed
 * row's stored expiry may be old: a row whose owner and token the engine
 * still has gets the engine's expiry and liveness now; any other row was
 * replaced since (or is being), and is no longer live. */
static void list_refresh(const struct server *s, struct admin_result *a)
{
    int64_t now_ns = clock_now_ns(&s->clock);
    for (size_t i = 0; i < a->n; i++) {
        struct admin_lease *l = &a->leases[i];
        struct lease_row row;
        l->live = engine_get(s->engine, l->session, l->session_len, &row) &&
                  row.owner_len == l->owner_len &&
                  memcmp(row.owner, l->owner, l->owner_len) == 0 &&
                  row.token == l->token;
        if (!l->live)
            continue;
        l->expiry_ns = row.expiry_ns;
        l->live = engine_live(s->engine, l->session, l->session_len, now_ns);
    }
}

static void run_list(uv_work_t *w)
{
    struct server *s = w->data;
    struct request *r = s->lists;
    if (r->op == OP_SNAPSHOT) {
        r->admin->snapshot_free = store_snapshot_free;
        s->list_err = store_snapshot(s->store, &r->admin->snapshot,
                                     &r->admin->snapshot_len);
        return;
    }
    int err = store_list(s->store, r->session, r->session_len, r->page_token,
                         r->page_token_len, r->page_size + 1, list_row, r);
    s->list_err = err == 1 ? STORE_OK : err;
}

static void maybe_list(struct server *s);

static void list_done(uv_work_t *w, int status)
{
    struct server *s = w->data;
    struct request *r = s->lists;
    s->lists = r->next;
    if (s->lists == NULL)
        s->lists_tail = NULL;
    r->next = NULL;
    s->listing = false;
    if (status != 0 || s->list_err != STORE_OK) {
        log_warn(r->op == OP_SNAPSHOT ? "snapshot_failed" : "list_failed",
                 "error=\"%s\"", store_list_errmsg(s->store));
        r->status = REPLY_UNAVAILABLE;
        snprintf(r->reason, sizeof(r->reason), "storage unavailable");
    } else {
        list_refresh(s, r->admin);
    }
    s->reply(s->reply_arg, r);
    maybe_list(s);
    if (s->closing)
        maybe_finish_close(s);
}

/* Starts listing for the first List waiting, if none is running. */
static void maybe_list(struct server *s)
{
    if (s->listing || s->lists == NULL)
        return;
    struct request *r = s->lists;
    r->status = REPLY_OK;
    r->reason[0] = '\0';
    r->admin = admin_result_new(r->page_size);
    if (r->admin == NULL) {
        s->lists = r->next;
        if (s->lists == NULL)
            s->lists_tail = NULL;
        r->status = REPLY_UNAVAILABLE;
        snprintf(r->reason, sizeof(r->reason), "out of memory");
        s->reply(s->reply_arg, r);
        maybe_list(s);
        return;
    }
    s->listing = true;
    uv_queue_work(s->loop, &s->list_work, run_list, list_done);
}

/* The index of req's session's counter in s->queued. */
static uint32_t queued_slot(const struct server *s, const struct request *req)
{
    uint64_t h = engine_hash(s->engine, req->session, req->session_len);
    return (uint32_t)(h % QUEUED_SLOTS);
}

/* Takes the admin reads out of pending and answers them: Get and Stats
 * at once, from the engine (between batches it holds no tentative
 * change), List and Snapshot in turn on a worker. A Revoke stays, decided in its
 * turn as a Release is. */
static void take_admin(struct server *s)
{
    int64_t now_ns = clock_now_ns(&s->clock);
    struct request **p = &s->pending;
    s->pending_tail = NULL;
    while (*p != NULL) {
        struct request *r = *p;
        if (!request_is_read(r->op)) {
            s->pending_tail = r;
            p = &r->next;
            continue;
        }
        *p = r->next;
        r->next = NULL;
        if (r->op != OP_LIST && r->op != OP_SNAPSHOT) {
            answer_admin(s, r, now_ns);
            continue;
        }
        if (s->lists_tail != NULL)
            s->lists_tail->next = r;
        else
            s->lists = r;
        s->lists_tail = r;
    }
    maybe_list(s);
}

/* Decides everything pending, batch by batch, until a commit is in
 * flight or nothing is left. */
static void process(struct server *s)
{
    if (!s->committing)
        take_admin(s);
    while (!s->committing && (s->pending != NULL || s->gc_due ||
                              s->probe_due || s->ttl_due)) {
        int64_t now_ns = clock_now_ns(&s->clock);
        s->nchgs = 0;
        s->durable = false;
        s->batch_now_ns = now_ns;
        s->probing = s->probe_due;
        s->writing_ttl = !s->probing && s->ttl_due;
        if (s->probing || s->writing_ttl) {
            if (s->probing)
                s->probe_due = false;
            else
                s->ttl_due = false;
            s->committing = true;
            uv_queue_work(s->loop, &s->commit_work, run_commit, commit_done);
            break;
        }
        if (s->gc_due) { /* first in the batch: see engine.h */
            s->gc_due = false;
            s->nchgs = engine_collect(s->engine, now_ns, s->chgs, GC_MAX);
            for (size_t i = 0; i < s->nchgs; i++)
                engine_stamp(s->engine, &s->chgs[i], s->committed_seq + 1);
        }
        /* What depends on this commit waits for it; the rest goes out
         * now, or after the sync of an earlier commit. */
        struct request *batch = NULL, **tail = &batch;
        struct request *now = NULL, **now_tail = &now;
        for (size_t n = 0; s->pending != NULL && n < MAX_BATCH; n++) {
            struct request *r = s->pending;
            s->pending = r->next;
            r->next = NULL;
            assert(s->queued[r->order_slot] > 0);
            s->queued[r->order_slot]--;
            if (decide(s, now_ns, r, &s->chgs[s->nchgs])) {
                *tail = r;
                tail = &r->next;
            } else {
                *now_tail = r;
                now_tail = &r->next;
            }
        }
        if (s->pending == NULL)
            s->pending_tail = NULL;
        if (s->nchgs > 0) {
            s->batch = batch;
            s->committing = true;
            uv_queue_work(s->loop, &s->commit_work, run_commit, commit_done);
        }
        assert(s->nchgs > 0 || batch == NULL);
        answer_or_wait(s, now, s->committed_seq);
        maybe_sync(s);
    }
}

/* The short path: a renewal of a session with no change in flight and
 * no call waiting is decided at once, even while a commit is in flight.
 * It keeps owner and token, so it is soft (never written) and touches no
 * entry the commit worker reads. Returns false if req must wait for a
 * batch. */
static bool renew_at_once(struct server *s, int64_t now_ns,
                          struct request *req)
{
    if (req->op != OP_RENEW ||
        engine_stamp_of(s->engine, req->session, req->session_len) >
            s->committed_seq ||
        (s->pending != NULL && s->queued[queued_slot(s, req)] > 0))
        return false;
    struct engine_change chg;
    bool in_batch = decide(s, now_ns, req, &chg);
    assert(!in_batch);
    (void)in_batch;
    return true;
}

void server_submit(struct server *s, struct request *list)
{
    assert(!s->closing);
    int64_t now_ns = clock_now_ns(&s->clock);
    struct request *now = NULL, **now_tail = &now;
    for (struct request *r = list, *next; r != NULL; r = next) {
        next = r->next;
        r->next = NULL;
        if (renew_at_once(s, now_ns, r)) {
            *now_tail = r;
            now_tail = &r->next;
            continue;
        }
        if (!request_is_read(r->op)) {
            r->order_slot = queued_slot(s, r);
            s->queued[r->order_slot]++;
        }
        if (s->pending_tail != NULL)
            s->pending_tail->next = r;
        else
            s->pending = r;
        s->pending_tail = r;
    }
    answer_or_wait(s, now, s->committed_seq);
    maybe_sync(s);
    process(s);
}

/* Once the quarantine is over, leases granted under a longer TTL before
 * the restart have all expired: from now on the current TTL is the one
 * a future restart must wait for. Writing it down is a commit and a
 * sync, so the commit worker does it in turn (process(), ttl_written()). */
static void lower_quarantine_ttl(struct server *s, int64_t now_ns)
{
    if (s->quarantine_ttl_ns != s->ttl_ns && !s->writing_ttl &&
        now_ns >= engine_quarantine_end(s->engine))
        s->ttl_due = true;
}

/* The gauges that change with time alone, and a look at the wall clock. */
static void update_gauges(struct server *s, int64_t now_ns)
{
    int64_t q = engine_quarantine_end(s->engine) - now_ns;
    atomic_store(&metrics.quarantine_remaining_ms, q > 0 ? q / 1000000 : 0);
    atomic_store(&metrics.lease_entries, (int64_t)engine_count(s->engine));
    size_t live;
    if (engine_census(s->engine, now_ns, CENSUS_BUCKETS, &live))
        atomic_store(&metrics.leases_live, (int64_t)live);
    int64_t step = clock_step_ns(&s->clock);
    if (step > CLOCK_STEP_NS || step < -CLOCK_STEP_NS) {
        atomic_fetch_add(&metrics.clock_steps, 1);
        log_warn("clock_step", "by_ms=%lld", (long long)(step / 1000000));
    }
}

static void on_gc_timer(uv_timer_t *t)
{
    struct server *s = t->data;
    int64_t now_ns = clock_now_ns(&s->clock);
    update_gauges(s, now_ns);
    lower_quarantine_ttl(s, now_ns);
    s->gc_due = true;
    s->probe_due = s->storage_failing && s->failing_durable;
    process(s);
}

struct server *server_create(uv_loop_t *loop, struct store *store,
                             int64_t ttl_ns, char *errmsg, size_t errmsg_len)
{
    struct server *s = calloc(1, sizeof(*s));
    if (s == NULL)
        goto nomem;
    s->loop = loop;
    s->store = store;
    s->commit_work.data = s;
    s->sync_work.data = s;
    s->list_work.data = s;
    s->start_mono_ns = clock_mono_ns();
    clock_init(&s->clock);
    s->chgs = calloc(MAX_BATCH + GC_MAX, sizeof(*s->chgs));
    if (s->chgs == NULL)
        goto nomem;
    /* Leases promised before the restart may live up to the TTL they were
     * granted with: quarantine for the longer of that and this TTL. */
    s->ttl_ns = ttl_ns;
    int err = store_get_meta(store, "quarantine_ttl_ns",
                             &s->quarantine_ttl_ns);
    if (err == STORE_OK && s->quarantine_ttl_ns < ttl_ns)
        s->quarantine_ttl_ns = ttl_ns;
    if (err == STORE_OK)
        err = store_set_meta(store, "quarantine_ttl_ns", s->quarantine_ttl_ns);
    if (err != STORE_OK) {
        snprintf(errmsg, errmsg_len, "storing the TTL: %s",
                 store_errmsg(store));
        goto fail;
    }
    /* Every expiry promised before the restart ends before the quarantine
     * does; one stored later than that is an artefact of a wall clock set
     * back since (this clock starts from the wall clock), and would keep
     * a dead holder's lease from others for the size of the step. */
    int64_t start_ns = clock_now_ns(&s->clock);
    int64_t quarantine_end_ns = start_ns + s->quarantine_ttl_ns;
    size_t capped = 0;
    /* A negative control of the fault campaign: no quarantine at all. */
    bool quarantine = !FAULT_BROKEN("no_quarantine");
    err = quarantine ? store_cap_expiries(store, quarantine_end_ns, &capped)
                     : STORE_OK;
    if (err != STORE_OK) {
        snprintf(errmsg, errmsg_len, "capping expiries: %s",
                 store_errmsg(store));
        goto fail;
    }
    if (capped > 0)
        log_warn("expiries_capped", "leases=%zu reason=\"stored expiries "
                 "beyond the restart quarantine: the wall clock was set "
                 "back\"", capped);
    struct siphash_key key;
    siphash_random_key(&key);
    s->engine = engine_create(ttl_ns,
                              quarantine ? start_ns : start_ns - ttl_ns, &key);
    if (s->engine == NULL)
        goto nomem;
    if (quarantine)
        engine_extend_quarantine(s->engine, quarantine_end_ns);
    uint64_t floor = 0;
    err = store_load(store, load_row, s->engine, &floor);
    if (err != STORE_OK) {
        snprintf(errmsg, errmsg_len, "loading leases: %s",
                 err == STORE_ENOMEM ? "out of memory" : store_errmsg(store));
        goto fail;
    }
    engine_raise_floor(s->engine, floor);
    log_info("loaded", "leases=%zu token_floor=%llu quarantine_ms=%lld",
             engine_count(s->engine), (unsigned long long)floor,
             (long long)(s->quarantine_ttl_ns / 1000000));
    update_gauges(s, start_ns);
    uv_timer_init(loop, &s->gc_timer);
    s->gc_timer.data = s;
    uv_timer_start(&s->gc_timer, on_gc_timer, GC_INTERVAL_MS, GC_INTERVAL_MS);
    return s;
nomem:
    snprintf(errmsg, errmsg_len, "out of memory");
fail:
    store_close(store);
    if (s != NULL) {
        engine_destroy(s->engine);
        free(s->chgs);
        free(s);
    }
    return NULL;
}

void server_set_reply(struct server *s,
                      void (*reply)(void *arg, struct request *req),
                      void (*storage)(void *arg, bool ok),
                      void (*fatal)(void *arg, const char *why), void *arg)
{
    s->reply = reply;
    s->storage = storage;
    s->fatal = fatal;
    s->reply_arg = arg;
}

static void on_timer_closed(uv_handle_t *h)
{
    struct server *s = h->data;
    void (*done)(void *) = s->done;
    void *arg = s->done_arg;
    engine_destroy(s->engine);
    free(s->chgs);
    free(s);
    done(arg);
}

/* Closes once nothing is in flight. */
static void maybe_finish_close(struct server *s)
{
    if (s->committing || s->syncing || s->waiting != NULL || s->listing ||
        s->store == NULL)
        return;
    assert(s->pending == NULL);
    store_close(s->store);
    s->store = NULL;
    uv_close((uv_handle_t *)&s->gc_timer, on_timer_closed);
}

void server_close(struct server *s, void (*done)(void *arg), void *arg)
{
    s->closing = true;
    s->done = done;
    s->done_arg = arg;
    uv_timer_stop(&s->gc_timer);
    s->gc_due = s->probe_due = s->ttl_due = false;
    maybe_finish_close(s);
}
