/*
 * The embedded mode (see mode.h): SQLite in a data directory, an engine
 * in memory that decides, and group commit.
 *
 * Renewals are soft state. A renewal (or a re-acquire by the holder)
 * keeps owner and token, so the row on disk already names the holder;
 * only its expiry changes, and that is kept in the engine's memory and
 * never written: the restart quarantine makes it hold across a crash or
 * a power loss (docs/protocol.md, "Restart quarantine"). The store sees
 * only changes of owner (takeovers, releases) and garbage collection, and
 * matches rows on owner and token, not expiry.
 *
 * The short path: a call that changes no owner (a renewal, or an
 * Acquire of a live lease: its holder's again, or another's refused) of a
 * session with no change in flight and no call ahead of it is decided as
 * soon as it arrives, even while a commit is in flight; it touches only
 * its own entry, which the commit worker does not read. When its answer
 * stands on nothing unsynced it is decided on the front end's thread
 * (embedded_arrive), and neither wakes the loop nor waits for it: nine
 * calls in ten under a renewing load. Otherwise the loop decides it when
 * it comes (embedded_submit). Everything else waits in `pending` while a
 * commit is in flight. The calls of one session are decided in the order
 * they arrived: a renewal must not overtake its holder's release that
 * waits (the holder may have given up on it), or the renewal's OK would
 * promise a lease the release ends soon after; so each call is counted
 * (base.order) from its arrival until it is decided.
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
 * before it began (`sync_covers`). When no sync is in flight as a batch
 * that changes an owner starts, and no call waits for the commit slot as
 * it ends, the commit's worker syncs right after the commit
 * (`sync_in_commit`): one hop to a worker and back instead of two, which
 * is most of a lone takeover's latency; under load the next batch
 * commits while this one syncs, as above.
 *
 * A Wait is decided as an Acquire; refused because another holds the
 * lease, it is not answered but joins its session's line (waiters.c).
 * Whatever ends that lease puts the first in line whose call has not
 * ended back at the front of `pending`: a release or a revoke at once,
 * in the batch being decided, an expiry when the one-off wake-up set for
 * it fires (see Waits below).
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
 * over a hole. The mode calls its fatal hook (leased exits for its
 * supervisor to restart it, which re-reads the disk under a fresh restart
 * quarantine).
 *
 * The commit slot is one state machine (core/sm.h):
 *
 *   IDLE --> BATCH  a batch's changes     (process)       --> IDLE
 *        --> PROBE  a write of its own while owner changes fail
 *        --> TTL    the TTL a restart must wait for   --> IDLE
 *
 * and each commit ends in commit_done(), back to IDLE (a failed sync of
 * a probe or of the TTL ends the process there instead).
 *
 * Threads: the engine, the clock and the fields below that are not the
 * workers' are touched under `lock`, by the loop (in each of its entries:
 * submit, close, the tick, and the end of a commit, a sync or a list) and
 * by the front end's thread (embedded_arrive). The commit worker reads
 * the batch's changes, without the lock, only while the slot is not IDLE:
 * meanwhile nothing changes but entries of other sessions (the short
 * path, which writes no string the worker reads); the sync worker touches
 * only store_sync(). Every write after start is the commit worker's, in
 * turn: the batches, the storage probe and the TTL a restart must wait
 * for (lower_quarantine_ttl), so the loop never waits for the disk.
 */
#include <assert.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "admin.h"
#include "clock.h"
#include "datadir.h"
#include "engine.h"
#include "faultpoint.h"
#include "history.h"
#include "log.h"
#include "metrics.h"
#include "mode.h"
#include "rules.h"
#include "sm.h"
#include "store.h"
#include "waiters.h"

#define MAX_BATCH 4096
#define GC_MAX 1024
#define TICK_MS 250          /* the mode's tick: expiries told (Watch) */
#define TICKS_PER_GC 4       /* garbage collection, gauges: every second */
#define EXPIRIES_MAX 1024    /* told in one batch, at most */
#define EXPIRIES_WHOLE 65536 /* entries looked at whole each tick */
#define CENSUS_BUCKETS 65536 /* looked at per tick for leases_live */
#define CLOCK_STEP_NS INT64_C(1000000000) /* wall clock jumps logged */

struct embedded {
    /* The common part; its order counters count the calls that change
     * leases from their arrival until they are decided: a call takes the
     * short path only if none is ahead of it. */
    struct mode base;
    pthread_mutex_t lock; /* see Threads at the top of this file */
    struct engine *engine;
    struct store *store;
    struct clock clock;
    int lock_fd; /* the data directory's lock, -1 for none */
    char data_dir[PATH_MAX];

    struct mode_queue pending;

    /* The commit slot (see the top of this file), and the batch being
     * committed. */
    struct sm slot;
    struct request *batch;
    struct engine_change *chgs; /* MAX_BATCH + GC_MAX */
    size_t nchgs;
    bool durable; /* the batch changed an owner */
    bool failing_durable; /* a commit that changed an owner failed */
    /* While such commits fail, each garbage-collection tick tries one
     * write of that kind (a commit and a sync) of its own (PROBE), so
     * that health comes back even when no takeover is asked for. */
    bool probe_due;
    /* Once the restart quarantine is over, the current TTL is written
     * down (lower_quarantine_ttl): a write of its own (TTL). */
    bool ttl_due;
    int64_t batch_now_ns; /* when it was decided */
    int commit_err;
    int64_t commit_ns; /* how long store_apply took */
    char commit_errmsg[256];
    uint64_t committed_seq; /* commits ended so far */
    uint64_t synced_seq; /* the last commit known to be durable */
    /* The batch in flight may sync too, on its worker, once committed
     * (`syncing` is set meanwhile); commit_synced: it did, and sync_errno
     * and sync_ns are its. */
    bool sync_in_commit, commit_synced;
    /* A line a second at most: failures, and recoveries after them. */
    struct log_limit commit_log, recovered_log;
    uv_work_t commit_work;

    /* Takeovers and releases committed, waiting for a sync (in commit
     * order), and the sync in flight. */
    struct mode_queue waiting;
    bool syncing;
    uint64_t sync_covers; /* the last commit the sync in flight covers */
    int sync_errno;
    char sync_errmsg[256];
    int64_t sync_ns;
    uv_work_t sync_work;

    bool gc_due; /* the mode's tick sets it */

    /* Admin List and Snapshot calls: one reads the store on a worker,
     * the others wait their turn. */
    struct mode_queue lists;
    bool listing;
    int list_err;
    uv_work_t list_work;

    /* Waits refused because another holds the lease, in their session's
     * line (see Waits below), and when the wake-up is set for: the
     * earliest a lease waited for may end (the engine's clock; 0: none). */
    struct waiters *waiters;
    int64_t wake_due_ns;

    /* Watch (see Events below): where the events go once synced (NULL:
     * nowhere, and none are made), the batch's events (strings its
     * changes'), and the last revision given. */
    struct history *history;
    struct store_event *evs; /* two per change at most, and the expiries */
    size_t nevs;
    uint64_t revision;
    /* Expiries to tell at the next batch (the tick sets it), those of the
     * batch in flight (its first nexpired events: their rows, strings the
     * engine's), and the last commit that stored events. */
    bool expiries_due;
    struct lease_row *expired; /* EXPIRIES_MAX */
    size_t nexpired;
    uint64_t events_seq;
    unsigned ticks;

    /* The longest TTL whose leases may still be live: longer than ttl_ns
     * after a restart that shortened the TTL, until the quarantine ends.
     * Kept in the store, so that a crash meanwhile still knows it. */
    int64_t quarantine_ttl_ns;
};

enum slot_state { SLOT_IDLE, SLOT_BATCH, SLOT_PROBE, SLOT_TTL, SLOT_NSTATES };

static const struct sm_conf slot_states[SLOT_NSTATES] = {
    [SLOT_IDLE] = {"IDLE", SM_INITIAL,
                   SM_TO(SLOT_BATCH) | SM_TO(SLOT_PROBE) | SM_TO(SLOT_TTL)},
    [SLOT_BATCH] = {"BATCH", 0, SM_TO(SLOT_IDLE)},
    [SLOT_PROBE] = {"PROBE", 0, SM_TO(SLOT_IDLE)},
    [SLOT_TTL] = {"TTL", 0, SM_TO(SLOT_IDLE)},
};

/* A batch commits changes and the calls that wait for them; a write of
 * its own, neither; an idle slot holds nothing. */
static bool slot_invariant(const struct sm *sm, int prev)
{
    const struct embedded *s = container_of(sm, struct embedded, slot);
    (void)prev;
    if (sm_state(sm) == SLOT_BATCH)
        return s->nchgs > 0 || s->nevs > 0;
    return s->nchgs == 0 && s->nevs == 0 && s->batch == NULL;
}

static bool committing(const struct embedded *s)
{
    return sm_state(&s->slot) != SLOT_IDLE;
}

static int load_row(void *arg, const struct lease_row *row)
{
    return engine_load(arg, row) == ENGINE_OK ? 0 : STORE_ENOMEM;
}

/* What a change did (enum rules_flag), decided at now_ns: a takeover
 * (new token), the end of the held lease it replaced or collected after
 * its expiry, a renewal after expiry (nobody took it over). */
static unsigned flags_of(const struct engine_change *c, int64_t now_ns)
{
    bool was_held = c->has_before && c->before.owner_len > 0;
    if (c->kind == ENGINE_DELETE)
        return was_held ? RULES_EXPIRED : 0;
    if (!c->has_before || c->after.token != c->before.token)
        return RULES_TAKEOVER | (was_held ? RULES_EXPIRED : 0);
    if (was_held && c->after.owner_len > 0 && c->before.expiry_ns <= now_ns)
        return RULES_RECLAIM;
    return 0;
}

/* Asks the engine for req's decision at now_ns, into chg. */
static enum engine_result engine_decide(struct embedded *s, int64_t now_ns,
                                        struct request *req,
                                        struct engine_grant *grant,
                                        struct engine_change *chg)
{
    switch (req->op) {
    case OP_ACQUIRE:
    case OP_WAIT:
        return engine_acquire(s->engine, now_ns, req->session,
                              req->session_len, req->owner, req->owner_len,
                              grant, chg);
    case OP_RENEW:
        return engine_renew(s->engine, now_ns, req->session,
                            req->session_len, req->owner, req->owner_len,
                            req->token, grant, chg);
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
        return engine_release(s->engine, req->session, req->session_len,
                              owner, owner_len, token, chg);
    }
    case OP_REVOKE:
        return engine_revoke(s->engine, req->session, req->session_len,
                             req->token, chg);
    default:
        abort(); /* only lease calls and Revoke are decided */
    }
}

/* --- Events ------------------------------------------------------------
 *
 * Each change of owner in a batch is an event for Watch, numbered by the
 * next revision: a takeover is GRANTED (after EXPIRED, when the lease it
 * replaced had run out and that was not told yet), a release RELEASED, a
 * revoke REVOKED. Expiries are told as they happen: each tick (TICK_MS) the
 * next batch looks at the engine's table (a quarter of it, past
 * EXPIRIES_WHOLE entries) for held leases past their expiry and the restart
 * quarantine (engine_expiries), so each is told EXPIRED within a tick (a
 * second) and a commit, even with no call to make it known; the engine
 * marks it told, and its holder's reclaim (a renewal after it) is then a
 * change of its own, stored and told GRANTED again before its answer (never
 * on the short path). The batch's commit stores the events with its changes
 * (store_apply_events, which keeps the last --watch-history), and its sync
 * makes them visible to watchers (history_publish): a watcher sees nothing
 * the disk may lose. A failed commit gives its revisions back and untells
 * its expiries. At start the stored events say which expiries were
 * told. */

static void add_event(struct embedded *s, enum store_event_kind kind,
                      const struct lease_row *lease)
{
    s->evs[s->nevs++] = (struct store_event){
        .revision = ++s->revision, .kind = kind, .lease = *lease};
}

static void add_events(struct embedded *s, enum request_op op,
                       const struct engine_change *chg, int64_t now_ns)
{
    if (s->history == NULL)
        return;
    unsigned flags = flags_of(chg, now_ns);
    if (flags & RULES_TAKEOVER) {
        if ((flags & RULES_EXPIRED) && !chg->was_told)
            add_event(s, STORE_EXPIRED, &chg->before);
        add_event(s, STORE_GRANTED, &chg->after);
    } else if (chg->after.owner_len > 0) { /* a reclaim, once told */
        add_event(s, STORE_GRANTED, &chg->after);
    } else {
        add_event(s, op == OP_REVOKE ? STORE_REVOKED : STORE_RELEASED,
                  &chg->before);
    }
}

/* Tells the expiries the engine finds (at the start of a batch). */
static void tell_expiries(struct embedded *s, int64_t now_ns)
{
    size_t parts = engine_count(s->engine) <= EXPIRIES_WHOLE ? 1 : TICKS_PER_GC;
    s->nexpired =
        engine_expiries(s->engine, now_ns, parts, s->expired, EXPIRIES_MAX);
    for (size_t i = 0; i < s->nexpired; i++)
        add_event(s, STORE_EXPIRED, &s->expired[i]);
}

static int load_event(void *arg, const struct store_event *ev)
{
    struct embedded *s = arg;
    s->revision = ev->revision;
    engine_set_told(s->engine, ev->lease.session, ev->lease.session_len,
                    ev->lease.token, ev->kind == STORE_EXPIRED);
    return history_append(s->history, ev, 1) == 0 ? 0 : STORE_ENOMEM;
}

/* Decides req at now_ns into chg: &s->chgs[s->nchgs] in a batch, or a
 * change of the caller's on the short path (which decides only what
 * changes no owner: see changes_no_owner()). Returns true when the
 * answer depends on the batch's commit: a change of its session is in
 * the batch. Otherwise it may go out at once, or once an earlier commit
 * is synced (req->needs_sync). A change that keeps owner and token (a
 * renewal, a re-acquire by the owner) of a session with no change in the
 * batch is soft: finished at once, never written (see the top of this
 * file). */
static bool decide(struct embedded *s, int64_t now_ns, struct request *req,
                   struct engine_change *chg)
{
    struct engine_grant grant = {0, 0};
    struct lease_row before;
    bool had = false;
    if (req->op == OP_REVOKE) {
        if (mode_admin_start(req) != 0)
            return false;
        had = engine_get(s->engine, req->session, req->session_len,
                         &before) && before.owner_len > 0;
    }
    enum engine_result rc = engine_decide(s, now_ns, req, &grant, chg);
    if (rc == ENGINE_ENOMEM) {
        mode_refuse(req, "out of memory");
        return false;
    }
    /* A reclaim of a lease told expired is told GRANTED: stored first. */
    if (rc == ENGINE_OK && chg->was_told && s->history != NULL)
        chg->durable = true;
    if (rc == ENGINE_OK && chg->durable) /* the batch's commit: the next */
        engine_stamp(s->engine, chg, s->committed_seq + 1);
    /* Whatever the answer, it was decided from the session's last change
     * of owner (this one, or an earlier one): not before that is synced. */
    uint64_t dep = engine_stamp_of(s->engine, req->session, req->session_len);
    bool in_batch = dep > s->committed_seq;
    if (req->op == OP_REVOKE)
        mode_admin_revoked(req, rc == ENGINE_OK ? &chg->before
                                : had           ? &before
                                                : NULL,
                           rc == ENGINE_OK);
    else
        mode_decided(&s->base, req, (enum rules_code)rc, grant.token,
                     grant.expiry_ns, rc == ENGINE_OK ? flags_of(chg, now_ns)
                                                      : 0);
    if (rc == ENGINE_OK && in_batch) {
        assert(chg == &s->chgs[s->nchgs]);
        s->nchgs++;
        s->durable = s->durable || chg->durable;
        if (chg->durable)
            add_events(s, req->op, chg, now_ns);
    } else if (rc == ENGINE_OK) {
        mode_count(flags_of(chg, now_ns));
        engine_finish(s->engine, chg, true);
    }
    req->needs_sync = dep > s->synced_seq &&
                      !FAULT_BROKEN("reply_before_sync"); /* a control */
    return in_batch;
}

/* A commit ended: ok or not, and whether it changed an owner (the kind
 * of write that must work again before storage counts as recovered). */
static void commit_outcome(struct embedded *s, bool ok, bool durable)
{
    if (!ok) {
        /* Every kind that failed since storage last worked must work. */
        s->failing_durable = durable || (s->base.storage_failing &&
                                         s->failing_durable);
        mode_set_failing(&s->base, true);
        return;
    }
    if (!s->base.storage_failing || (s->failing_durable && !durable))
        return;
    uint64_t held;
    if (log_limit_pass(&s->recovered_log, clock_mono_ns(), &held))
        log_info("storage_recovered", "not_logged=%llu",
                 (unsigned long long)held);
    mode_set_failing(&s->base, false);
}

static void answer(struct embedded *s, struct request *list);

/* Answers the requests of list (linked by ->next) that need no sync, and
 * queues the others, in order, for a sync covering commit seq. */
static void answer_or_wait(struct embedded *s, struct request *list,
                           uint64_t seq)
{
    struct mode_queue now = {NULL, NULL};
    for (struct request *r = list, *next; r != NULL; r = next) {
        next = r->next;
        if (r->needs_sync && seq > s->synced_seq) {
            r->commit_seq = seq;
            mode_push(&s->waiting, r);
        } else {
            mode_push(&now, r);
        }
    }
    answer(s, now.head);
}

/* Makes every commit so far durable, on a worker: sync_errno, sync_ns
 * and sync_errmsg say how it went. */
static void sync_store(struct embedded *s)
{
    FAULT_POINT("before_sync");
    int64_t t0 = clock_mono_ns();
    s->sync_errno = store_sync(s->store) == STORE_OK ? 0 : errno;
    s->sync_ns = clock_mono_ns() - t0;
    if (s->sync_errno != 0)
        snprintf(s->sync_errmsg, sizeof(s->sync_errmsg),
                 "fdatasync of the WAL failed: %s", strerror(s->sync_errno));
}

/* Whether calls wait for the commit slot (from the commit's worker). */
static bool calls_pending(struct embedded *s)
{
    pthread_mutex_lock(&s->lock);
    bool pending = s->pending.head != NULL;
    pthread_mutex_unlock(&s->lock);
    return pending;
}

static void run_commit(uv_work_t *w)
{
    struct embedded *s = w->data;
    int64_t t0 = clock_mono_ns();
    /* A probe, or the TTL written down, is a batch of its own, with no
     * change and no request. */
    switch ((enum slot_state)sm_state(&s->slot)) {
    case SLOT_TTL:
        s->commit_err = store_set_meta(s->store, "quarantine_ttl_ns",
                                       s->base.ttl_ns);
        break;
    case SLOT_PROBE:
        s->commit_err = store_set_meta(s->store, "storage_checked_ns",
                                       s->batch_now_ns);
        break;
    case SLOT_BATCH:
        s->commit_err = store_apply_events(
            s->store, s->chgs, s->nchgs, s->evs, s->nevs,
            s->history != NULL ? history_capacity(s->history) : 0);
        break;
    case SLOT_IDLE:
    case SLOT_NSTATES:
        abort(); /* the worker runs only for a commit */
    }
    if (s->nchgs > 0 && s->chgs[0].kind == ENGINE_DELETE) /* GC: first */
        FAULT_POINT("gc_commit");
    s->commit_ns = clock_mono_ns() - t0;
    if (s->commit_err != STORE_OK)
        snprintf(s->commit_errmsg, sizeof(s->commit_errmsg), "%s",
                 store_errmsg(s->store));
    s->commit_synced =
        s->commit_err == STORE_OK && s->sync_in_commit && !calls_pending(s);
    if (s->commit_synced)
        sync_store(s);
}

static void process(struct embedded *s);
static void maybe_finish_close(struct embedded *s);
static void sync_done(uv_work_t *w, int status);

static void run_sync(uv_work_t *w)
{
    sync_store(w->data);
}

/* Starts a sync for everything committed so far, if something waits for
 * one and none is in flight. */
static void maybe_sync(struct embedded *s)
{
    if (s->syncing ||
        (s->waiting.head == NULL && s->events_seq <= s->synced_seq))
        return;
    s->syncing = true;
    s->sync_covers = s->committed_seq;
    uv_queue_work(s->base.loop, &s->sync_work, run_sync, sync_done);
}

/* A sync failed: stop answering, and let the owner end the process (see
 * the top of this file). */
static void sync_failed(struct embedded *s, const char *why)
{
    mode_set_failing(&s->base, true);
    s->base.hooks.fatal(s->base.hooks.arg, why);
}

/* A sync covering every commit up to covers ended (the sync worker's,
 * or a commit's own), cancelled or as sync_errno says. Returns true when
 * it succeeded, having answered, in commit order, everything that waited
 * for it; false when it failed and the process is to end (sync_failed):
 * touch nothing more. */
static bool sync_outcome(struct embedded *s, bool cancelled, uint64_t covers)
{
    s->syncing = false;
    if (cancelled || s->sync_errno != 0) {
        sync_failed(s, cancelled ? "the sync was cancelled" : s->sync_errmsg);
        return false;
    }
    log_debug("synced", "sync_us=%lld", (long long)(s->sync_ns / 1000));
    metrics_observe(&metrics.fsync_seconds, (double)s->sync_ns / 1e9);
    assert(covers >= s->synced_seq);
    s->synced_seq = covers;
    if (s->history != NULL && history_publish(s->history, covers) != 0)
        log_error("history_gap", "synced=%llu",
                  (unsigned long long)covers); /* a bug */
    struct mode_queue done = {NULL, NULL};
    while (s->waiting.head != NULL &&
           s->waiting.head->commit_seq <= covers)
        mode_push(&done, mode_pop(&s->waiting));
    answer(s, done.head);
    return true;
}

static void sync_ended(struct embedded *s, int status)
{
    if (!sync_outcome(s, status != 0, s->sync_covers))
        return;
    maybe_sync(s);
    if (s->base.closing)
        maybe_finish_close(s);
    else
        process(s); /* Waits that found their lease ended meanwhile */
}

static void sync_done(uv_work_t *w, int status)
{
    struct embedded *s = w->data;
    pthread_mutex_lock(&s->lock);
    sync_ended(s, status);
    pthread_mutex_unlock(&s->lock);
}

/* The TTL write ended (see lower_quarantine_ttl): as a failed sync if
 * its sync failed; otherwise, failed, it is tried again at the next
 * tick, and health is not its business. */
static void ttl_written(struct embedded *s, int err)
{
    if (err == STORE_ESYNC) {
        sync_failed(s, s->commit_errmsg);
        return;
    }
    sm_move(&s->slot, SLOT_IDLE);
    if (err != STORE_OK)
        log_warn("store_failed", "error=\"%s\"", s->commit_errmsg);
    else
        s->quarantine_ttl_ns = s->base.ttl_ns;
    if (s->base.closing)
        maybe_finish_close(s);
    else
        process(s);
}

static void commit_ended(struct embedded *s, int status)
{
    bool sync_in_commit = s->sync_in_commit;
    s->sync_in_commit = false;
    if (sm_state(&s->slot) == SLOT_TTL) {
        if (status != 0)
            snprintf(s->commit_errmsg, sizeof(s->commit_errmsg),
                     "the write was cancelled");
        ttl_written(s, status == 0 ? s->commit_err : STORE_EIO);
        return;
    }
    bool ok = status == 0 && s->commit_err == STORE_OK;
    bool probe = sm_state(&s->slot) == SLOT_PROBE;
    uint64_t seq = ++s->committed_seq;
    if (ok && s->nevs > 0 &&
        history_stage(s->history, s->evs, s->nevs, seq) != 0) {
        sync_failed(s, "out of memory for Watch's events");
        return;
    }
    /* A negative control of the fault campaign: events told at their
     * commit (which then never syncs itself), before the disk has them. */
    if (ok && FAULT_BROKEN("publish_before_sync"))
        history_publish(s->history, seq);
    if (ok && s->nevs > 0)
        s->events_seq = seq;
    if (ok) {
        log_debug("committed",
                  "changes=%zu durable=%d probe=%d commit_us=%lld", s->nchgs,
                  (int)s->durable, (int)probe,
                  (long long)(s->commit_ns / 1000));
        metrics_observe(&metrics.batch_changes, (double)s->nchgs);
        metrics_observe(&metrics.commit_seconds, (double)s->commit_ns / 1e9);
        for (size_t i = 0; i < s->nchgs; i++) {
            mode_count(flags_of(&s->chgs[i], s->batch_now_ns));
            engine_finish(s->engine, &s->chgs[i], true);
        }
        FAULT_POINT("after_commit"); /* committed, nothing answered yet */
    } else {
        for (size_t i = s->nchgs; i-- > 0;)
            engine_finish(s->engine, &s->chgs[i], false);
        s->revision -= s->nevs;
        for (size_t i = 0; i < s->nexpired; i++)
            engine_set_told(s->engine, s->expired[i].session,
                            s->expired[i].session_len, s->expired[i].token,
                            false);
        uint64_t held;
        if (log_limit_pass(&s->commit_log, clock_mono_ns(), &held))
            log_warn("commit_failed",
                     "changes=%zu error=\"%s\" not_logged=%llu", s->nchgs,
                     s->commit_errmsg, (unsigned long long)held);
        for (struct request *r = s->batch; r != NULL; r = r->next)
            mode_refuse(r, "storage unavailable");
    }
    if (s->commit_err == STORE_ESYNC) { /* the probe's sync */
        sync_failed(s, s->commit_errmsg);
        return;
    }
    /* The batch's own sync, if its worker ran one (commit_synced is
     * the worker's, so only when the work ran). */
    if (sync_in_commit && !(ok && s->commit_synced))
        s->syncing = false;
    else if (sync_in_commit && !sync_outcome(s, false, seq))
        return;
    commit_outcome(s, ok, s->durable || probe);
    s->nchgs = 0;
    s->nevs = 0;
    s->nexpired = 0;
    /* Answer what need not wait for the disk; the rest waits for a sync
     * that begins after this commit. */
    struct request *batch = s->batch;
    s->batch = NULL;
    sm_move(&s->slot, SLOT_IDLE);
    answer_or_wait(s, batch, seq);
    maybe_sync(s);
    if (s->base.closing)
        maybe_finish_close(s);
    else
        process(s);
}

static void commit_done(uv_work_t *w, int status)
{
    struct embedded *s = w->data;
    pthread_mutex_lock(&s->lock);
    commit_ended(s, status);
    pthread_mutex_unlock(&s->lock);
}

/* --- Admin calls (read only) ------------------------------------------ */

/* The leases live at now_ns, counted now: the gauge's census
 * (update_gauges) is up to a tick old, and longer on a big table. The
 * count refreshes the gauge too. O(entries) on the loop: Stats is an
 * admin call, not a hot path. */
static uint64_t count_live(struct embedded *s, int64_t now_ns)
{
    size_t live = engine_count_live(s->engine, now_ns);
    atomic_store(&metrics.leases_live, (int64_t)live);
    return live;
}

/* The counts of the leases at now_ns (the live ones counted now when
 * count_live: see count_live()). */
static struct mode_counts counts(struct embedded *s, int64_t now_ns,
                                 bool count_now)
{
    return (struct mode_counts){
        .live = count_now ? count_live(s, now_ns) : 0,
        .entries = engine_count(s->engine),
        .high_water = engine_high_water(s->engine),
        .quarantine_remaining_ns = engine_quarantine_end(s->engine) - now_ns,
    };
}

/* Get and Stats, from the engine. */
static void answer_admin(struct embedded *s, struct request *r, int64_t now_ns)
{
    struct lease_row row;
    if (mode_admin_start(r) == 0 && r->op == OP_GET) {
        bool found = engine_get(s->engine, r->session, r->session_len, &row);
        mode_admin_get(r, found ? &row : NULL,
                       engine_live(s->engine, r->session, r->session_len,
                                   now_ns));
    } else if (r->status == REPLY_OK) {
        struct mode_counts c = counts(s, now_ns, true);
        mode_admin_stats(&s->base, r, &c);
    }
    mode_answer(&s->base, r);
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
static void list_refresh(const struct embedded *s, struct admin_result *a)
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
    struct embedded *s = w->data;
    struct request *r = s->lists.head;
    if (r->op == OP_SNAPSHOT) {
        r->admin->snapshot_free = store_snapshot_free;
        s->list_err = store_snapshot(s->store, &r->admin->snapshot,
                                     &r->admin->snapshot_len);
        return;
    }
    s->list_err = store_list(s->store, r->session, r->session_len,
                             r->page_token, r->page_token_len,
                             r->page_size + 1, list_row, r);
}

static void maybe_list(struct embedded *s);

static void list_done(uv_work_t *w, int status)
{
    struct embedded *s = w->data;
    pthread_mutex_lock(&s->lock);
    struct request *r = mode_pop(&s->lists);
    s->listing = false;
    if (status != 0 || s->list_err != STORE_OK) {
        log_warn(r->op == OP_SNAPSHOT ? "snapshot_failed" : "list_failed",
                 "error=\"%s\"", store_list_errmsg(s->store));
        mode_refuse(r, "storage unavailable");
    } else {
        list_refresh(s, r->admin);
    }
    mode_answer(&s->base, r);
    maybe_list(s);
    if (s->base.closing)
        maybe_finish_close(s);
    pthread_mutex_unlock(&s->lock);
}

/* Starts listing for the first List or Snapshot waiting, if none is
 * running. */
static void maybe_list(struct embedded *s)
{
    while (!s->listing && s->lists.head != NULL) {
        if (mode_admin_start(s->lists.head) != 0) {
            mode_answer(&s->base, mode_pop(&s->lists));
            continue;
        }
        s->listing = true;
        uv_queue_work(s->base.loop, &s->list_work, run_list, list_done);
    }
}

/* Takes the admin reads out of pending and answers them: Get and Stats
 * at once, from the engine (between batches it holds no tentative
 * change), List and Snapshot in turn on a worker. A Revoke stays,
 * decided in its turn as a Release is. */
static void take_admin(struct embedded *s)
{
    int64_t now_ns = clock_now_ns(&s->clock);
    struct mode_queue calls = s->pending;
    s->pending = (struct mode_queue){NULL, NULL};
    for (struct request *r; (r = mode_pop(&calls)) != NULL;) {
        if (!request_is_read(r->op))
            mode_push(&s->pending, r);
        else if (r->op == OP_LIST || r->op == OP_SNAPSHOT)
            mode_push(&s->lists, r);
        else
            answer_admin(s, r, now_ns);
    }
    maybe_list(s);
}

/* --- Waits (leased.v1.Leases/Wait) ------------------------------------ */

/* When the lease of the session may end at the earliest, as now_ns
 * sees it: its expiry, or the end of the restart quarantine that keeps
 * it live past it. */
static int64_t lease_end(const struct embedded *s, const char *session,
                         size_t len, int64_t now_ns)
{
    struct lease_row row;
    if (!engine_get(s->engine, session, len, &row) || row.owner_len == 0)
        return now_ns;
    return row.expiry_ns > now_ns ? row.expiry_ns
                                  : engine_quarantine_end(s->engine);
}

static void on_wake(struct mode *m);

/* Sets the wake-up for due_ns (the engine's clock) unless one is set
 * for earlier. */
static void wake_at(struct embedded *s, int64_t due_ns, int64_t now_ns)
{
    if (s->wake_due_ns != 0 && s->wake_due_ns <= due_ns)
        return;
    s->wake_due_ns = due_ns;
    int64_t ms = due_ns > now_ns ? (due_ns - now_ns + 999999) / 1000000 : 0;
    mode_wake_after(&s->base, (uint64_t)ms, on_wake);
}

/* Puts list (linked, tail last) back at the front of pending, each
 * counted again as a call of its session still to decide. */
static void repend(struct embedded *s, struct mode_queue *front)
{
    for (struct request *r = front->head; r != NULL; r = r->next)
        s->base.order[r->order_slot]++;
    mode_push_front(&s->pending, front);
}

/* If the lease of the session ended and a Wait is in its line, the first
 * whose call has not ended goes back to the front of pending, to be
 * decided next, followed by behind when not NULL (the call about to be
 * decided, which then waits its turn). Those whose calls ended are
 * answered on the way. Returns whether one was woken. */
static bool wake_first(struct embedded *s, int64_t now_ns, const char *session,
                       size_t len, struct request *behind)
{
    if (waiters_count(s->waiters) == 0 ||
        engine_live(s->engine, session, len, now_ns))
        return false;
    struct mode_queue ended = {NULL, NULL}, front = {NULL, NULL};
    struct request *w;
    while ((w = waiters_pop(s->waiters, session, len)) != NULL &&
           atomic_load(&w->ended)) {
        mode_ended(w);
        mode_push(&ended, w);
    }
    if (w != NULL) {
        w->woken = true;
        mode_push(&front, w);
        if (behind != NULL)
            mode_push(&front, behind);
        repend(s, &front);
    }
    mode_answer_list(&s->base, ended.head); /* session may be theirs */
    return w != NULL;
}

/* A Wait refused because another holds its lease joins its session's
 * line, unanswered: returns true. Returns false when it is to be
 * answered now (set): its call ended, leased drains, or out of memory.
 * The wake-up is set for the lease's end, which may be now: the lease
 * may have ended since the Wait was decided (its answer waited for a
 * sync), when no one was in line to be woken. */
static bool join_line(struct embedded *s, struct request *r)
{
    int64_t now_ns = clock_now_ns(&s->clock);
    if (atomic_load(&r->ended)) {
        mode_ended(r);
        return false;
    }
    if (s->base.draining) {
        mode_refuse(r, "draining");
        return false;
    }
    if (waiters_add(s->waiters, r) != 0) {
        mode_refuse(r, "out of memory");
        return false;
    }
    wake_at(s, lease_end(s, r->session, r->session_len, now_ns), now_ns);
    return true;
}

/* Shows how many Waits are in line (leased_waiting_calls). */
static void count_waiting(const struct embedded *s)
{
    atomic_store(&metrics.waiting_calls, (int64_t)waiters_count(s->waiters));
}

/* Answers the requests of list (linked by ->next), but a Wait refused
 * because another holds the lease: it joins the line (join_line()). */
static void answer(struct embedded *s, struct request *list)
{
    struct mode_queue out = {NULL, NULL};
    for (struct request *r = list, *next; r != NULL; r = next) {
        next = r->next;
        if (r->op != OP_WAIT || r->status != REPLY_HELD || !join_line(s, r))
            mode_push(&out, r);
    }
    count_waiting(s);
    mode_answer_list(&s->base, out.head);
}

struct wake_scan {
    const struct embedded *s;
    int64_t now_ns, due_ns; /* the next wake-up, 0 for none */
};

/* Whether the lease of first's session ended; if not, when it may. */
static bool lease_ended(void *arg, const struct request *first)
{
    struct wake_scan *w = arg;
    if (!engine_live(w->s->engine, first->session, first->session_len,
                     w->now_ns))
        return true;
    int64_t due =
        lease_end(w->s, first->session, first->session_len, w->now_ns);
    if (w->due_ns == 0 || due < w->due_ns)
        w->due_ns = due;
    return false;
}

/* The wake-up: the first in each line whose lease expired is decided
 * (a Wait whose call ended then wakes the next: process()). A renewal
 * on the short path moves an expiry on without the loop; the wake-up
 * then finds the lease live and is set again for its new expiry. */
static void on_wake(struct mode *m)
{
    struct embedded *s = (struct embedded *)m;
    pthread_mutex_lock(&s->lock);
    s->wake_due_ns = 0;
    struct wake_scan scan = {s, clock_now_ns(&s->clock), 0};
    struct mode_queue front = {NULL, NULL};
    struct request *woken = waiters_take_firsts(s->waiters, lease_ended, &scan);
    for (struct request *w = woken, *next; w != NULL; w = next) {
        next = w->next;
        w->woken = true;
        mode_push(&front, w);
    }
    if (front.head != NULL)
        repend(s, &front);
    if (scan.due_ns != 0)
        wake_at(s, scan.due_ns, scan.now_ns);
    if (!s->base.closing)
        process(s);
    pthread_mutex_unlock(&s->lock);
}

/* Answers, out of their lines, the Waits whose calls ended (CANCELLED),
 * or every Wait when draining (UNAVAILABLE "draining"). */
static void take_out_of_line(struct mode *m, bool draining)
{
    struct embedded *s = (struct embedded *)m;
    pthread_mutex_lock(&s->lock);
    struct request *list = waiters_take_ended(s->waiters, draining);
    for (struct request *r = list; r != NULL; r = r->next) {
        if (draining)
            mode_refuse(r, "draining");
        else
            mode_ended(r);
    }
    count_waiting(s);
    mode_answer_list(&s->base, list);
    pthread_mutex_unlock(&s->lock);
}

static void embedded_cancelled(struct mode *m)
{
    take_out_of_line(m, false);
}

static void embedded_drain(struct mode *m)
{
    take_out_of_line(m, true);
}

/* Decides everything pending, batch by batch, until a commit is in
 * flight or nothing is left. */
static void process(struct embedded *s)
{
    if (!committing(s))
        take_admin(s);
    while (!committing(s) && (s->pending.head != NULL || s->gc_due ||
                              s->expiries_due || s->probe_due || s->ttl_due)) {
        int64_t now_ns = clock_now_ns(&s->clock);
        s->durable = false;
        s->batch_now_ns = now_ns;
        if (s->probe_due || s->ttl_due) {
            sm_move(&s->slot, s->probe_due ? SLOT_PROBE : SLOT_TTL);
            if (s->probe_due)
                s->probe_due = false;
            else
                s->ttl_due = false;
            uv_queue_work(s->base.loop, &s->commit_work, run_commit,
                          commit_done);
            break;
        }
        if (s->gc_due) { /* first in the batch: see engine.h */
            s->gc_due = false;
            s->nchgs = engine_collect(s->engine, now_ns, s->chgs, GC_MAX);
            for (size_t i = 0; i < s->nchgs; i++)
                engine_stamp(s->engine, &s->chgs[i], s->committed_seq + 1);
        }
        if (s->expiries_due) {
            s->expiries_due = false;
            tell_expiries(s, now_ns);
        }
        /* What depends on this commit waits for it; the rest goes out
         * now, or after the sync of an earlier commit. */
        struct mode_queue batch = {NULL, NULL}, now = {NULL, NULL};
        for (size_t n = 0; s->pending.head != NULL && n < MAX_BATCH; n++) {
            struct request *r = mode_pop(&s->pending);
            assert(s->base.order[r->order_slot] > 0);
            s->base.order[r->order_slot]--;
            if (r->op == OP_WAIT && atomic_load(&r->ended)) {
                if (r->woken) /* the next in line, then */
                    wake_first(s, now_ns, r->session, r->session_len, NULL);
                mode_ended(r);
                mode_push(&now, r);
                continue;
            }
            /* A lease that ended goes to the first in line, and any
             * Acquire or Wait of it waits its turn behind. */
            if (!r->woken && request_acquires(r->op) &&
                wake_first(s, now_ns, r->session, r->session_len, r)) {
                n--;
                continue;
            }
            r->woken = false;
            mode_push(decide(s, now_ns, r, &s->chgs[s->nchgs]) ? &batch
                                                                : &now,
                      r);
            if (!request_acquires(r->op)) /* a release, a revoke: */
                wake_first(s, now_ns, r->session, r->session_len, NULL);
        }
        if (s->nchgs > 0 || s->nevs > 0) {
            s->batch = batch.head;
            /* Nothing else to sync for: the commit's worker syncs too
             * (not in the control that answers before any sync). */
            s->sync_in_commit = (s->durable || s->nevs > 0) && !s->syncing &&
                                !FAULT_BROKEN("reply_before_sync") &&
                                !FAULT_BROKEN("publish_before_sync");
            s->syncing = s->syncing || s->sync_in_commit;
            sm_move(&s->slot, SLOT_BATCH);
            uv_queue_work(s->base.loop, &s->commit_work, run_commit,
                          commit_done);
        }
        assert(s->nchgs > 0 || batch.head == NULL);
        answer_or_wait(s, now.head, s->committed_seq);
        maybe_sync(s);
    }
    count_waiting(s);
#ifdef LEASED_CHECKS
    if (committing(s))
        engine_check(s->engine); /* this batch's changes are unfinished */
    else
        engine_check_settled(s->engine);
#endif
}

/* Whether req, decided at now_ns, changes no owner (so its change, if
 * any, is soft: see decide()): a renewal, or an Acquire of a live lease
 * (by its holder: the same token; by another: refused). */
static bool changes_no_owner(const struct embedded *s, int64_t now_ns,
                             const struct request *req)
{
    return req->op == OP_RENEW ||
           (req->op == OP_ACQUIRE &&
            engine_live(s->engine, req->session, req->session_len, now_ns));
}

/* The short path (see the top of this file): decides req at now_ns if
 * it changes no owner, no call of its session is ahead of it (ahead:
 * more than its own count) and no change of its session is in flight,
 * and its answer stands on nothing unsynced past synced. Returns false
 * if req must wait for a batch. */
static bool short_path(struct embedded *s, int64_t now_ns,
                       struct request *req, uint32_t ahead, uint64_t synced)
{
    if (s->base.order[req->order_slot] > ahead ||
        !changes_no_owner(s, now_ns, req) ||
        engine_told(s->engine, req->session, req->session_len) ||
        engine_stamp_of(s->engine, req->session, req->session_len) > synced)
        return false;
    struct engine_change chg;
    bool in_batch = decide(s, now_ns, req, &chg);
    assert(!in_batch);
    (void)in_batch;
    return true;
}

/* On the front end's thread: a call decided now needs no loop (its
 * answer stands on nothing unsynced); any other lease call is counted
 * until it is decided. */
static bool embedded_arrive(struct mode *m, struct request *req)
{
    struct embedded *s = (struct embedded *)m;
    if (request_is_read(req->op))
        return false;
    mode_order_slot(&s->base, req);
    pthread_mutex_lock(&s->lock);
    int64_t now_ns = clock_now_ns(&s->clock);
    bool now = short_path(s, now_ns, req, 0, s->synced_seq);
    if (!now)
        s->base.order[req->order_slot]++;
    assert(!now || !req->needs_sync);
    pthread_mutex_unlock(&s->lock);
    return now;
}

static void embedded_submit(struct mode *m, struct request *list)
{
    struct embedded *s = (struct embedded *)m;
    pthread_mutex_lock(&s->lock);
    int64_t now_ns = clock_now_ns(&s->clock);
    struct mode_queue now = {NULL, NULL};
    for (struct request *r = list, *next; r != NULL; r = next) {
        next = r->next;
        /* Counted on arrival: 1 is itself. Its answer may wait for a
         * sync. */
        if (!request_is_read(r->op) &&
            short_path(s, now_ns, r, 1, s->committed_seq)) {
            s->base.order[r->order_slot]--;
            mode_push(&now, r);
        } else {
            mode_push(&s->pending, r);
        }
    }
    answer_or_wait(s, now.head, s->committed_seq);
    maybe_sync(s);
    process(s);
    pthread_mutex_unlock(&s->lock);
}

/* Once the quarantine is over, leases granted under a longer TTL before
 * the restart have all expired: from now on the current TTL is the one
 * a future restart must wait for. Writing it down is a commit and a
 * sync, so the commit worker does it in turn (process(), ttl_written()). */
static void lower_quarantine_ttl(struct embedded *s, int64_t now_ns)
{
    if (s->quarantine_ttl_ns != s->base.ttl_ns &&
        sm_state(&s->slot) != SLOT_TTL &&
        now_ns >= engine_quarantine_end(s->engine))
        s->ttl_due = true;
}

/* The gauges that change with time alone, and a look at the wall clock. */
static void update_gauges(struct embedded *s, int64_t now_ns)
{
    size_t live = 0;
    bool known = engine_census(s->engine, now_ns, CENSUS_BUCKETS, &live);
    struct mode_counts c = counts(s, now_ns, false);
    c.live = live;
    mode_set_gauges(&c, known);
    int64_t step = clock_step_ns(&s->clock);
    if (step > CLOCK_STEP_NS || step < -CLOCK_STEP_NS) {
        atomic_fetch_add(&metrics.clock_steps, 1);
        log_warn("clock_step", "by_ms=%lld", (long long)(step / 1000000));
    }
}

static void on_tick(struct mode *m)
{
    struct embedded *s = (struct embedded *)m;
    pthread_mutex_lock(&s->lock);
    s->expiries_due = s->history != NULL;
    if (++s->ticks % TICKS_PER_GC == 0) {
        int64_t now_ns = clock_now_ns(&s->clock);
        update_gauges(s, now_ns);
        lower_quarantine_ttl(s, now_ns);
        s->gc_due = true;
        s->probe_due = s->base.storage_failing && s->failing_durable;
    }
    process(s);
    pthread_mutex_unlock(&s->lock);
}

static void embedded_destroy(struct mode *m)
{
    struct embedded *s = (struct embedded *)m;
    if (s == NULL)
        return;
    store_close(s->store);
    engine_destroy(s->engine);
    waiters_destroy(s->waiters);
    free(s->chgs);
    free(s->evs);
    free(s->expired);
    if (s->lock_fd >= 0)
        close(s->lock_fd);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

/* Closes once nothing is in flight. */
static void maybe_finish_close(struct embedded *s)
{
    if (committing(s) || s->syncing || s->waiting.head != NULL ||
        s->listing)
        return;
    assert(s->pending.head == NULL && waiters_count(s->waiters) == 0);
    mode_closed(&s->base);
}

static void embedded_close(struct mode *m)
{
    struct embedded *s = (struct embedded *)m;
    pthread_mutex_lock(&s->lock);
    uv_timer_stop(&s->base.timer);
    s->gc_due = s->probe_due = s->ttl_due = false;
    maybe_finish_close(s);
    pthread_mutex_unlock(&s->lock);
}

/* The quarantine a restart keeps (see the top of this file), the stored
 * leases into the engine, and the gauges. Returns 0, or -1 with errmsg
 * set. */
static int load(struct embedded *s, char *errmsg, size_t len)
{
    /* Leases promised before the restart may live up to the TTL they were
     * granted with: quarantine for the longer of that and this TTL. */
    int64_t ttl_ns = s->base.ttl_ns;
    int err = store_get_meta(s->store, "quarantine_ttl_ns",
                             &s->quarantine_ttl_ns);
    if (err == STORE_OK && s->quarantine_ttl_ns < ttl_ns)
        s->quarantine_ttl_ns = ttl_ns;
    if (err == STORE_OK)
        err = store_set_meta(s->store, "quarantine_ttl_ns",
                             s->quarantine_ttl_ns);
    if (err != STORE_OK) {
        snprintf(errmsg, len, "storing the TTL: %s", store_errmsg(s->store));
        return -1;
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
    err = quarantine
              ? store_cap_expiries(s->store, quarantine_end_ns, &capped)
              : STORE_OK;
    if (err != STORE_OK) {
        snprintf(errmsg, len, "capping expiries: %s",
                 store_errmsg(s->store));
        return -1;
    }
    if (capped > 0)
        log_warn("expiries_capped", "leases=%zu reason=\"stored expiries "
                 "beyond the restart quarantine: the wall clock was set "
                 "back\"", capped);
    struct siphash_key key;
    siphash_random_key(&key);
    s->engine = engine_create(ttl_ns,
                              quarantine ? start_ns : start_ns - ttl_ns, &key);
    if (s->engine == NULL) {
        snprintf(errmsg, len, "out of memory");
        return -1;
    }
    if (quarantine)
        engine_extend_quarantine(s->engine, quarantine_end_ns);
    uint64_t floor = 0;
    err = store_load(s->store, load_row, s->engine, &floor);
    if (err != STORE_OK) {
        snprintf(errmsg, len, "loading leases: %s",
                 err == STORE_ENOMEM ? "out of memory"
                                     : store_errmsg(s->store));
        return -1;
    }
    engine_raise_floor(s->engine, floor);
    int64_t revision_floor = 0;
    if (s->history != NULL) {
        err = store_load_events(s->store, load_event, s);
        if (err == STORE_OK)
            err = store_get_meta(s->store, "revision_floor", &revision_floor);
        if (err != STORE_OK) {
            snprintf(errmsg, len, "loading events: %s",
                     err == STORE_ENOMEM ? "out of memory, or revisions "
                                           "that do not follow each other"
                                         : store_errmsg(s->store));
            return -1;
        }
        if ((uint64_t)revision_floor > s->revision) { /* see store.h */
            s->revision = (uint64_t)revision_floor;
            history_start_after(s->history, s->revision);
        }
        history_set_served(s->history);
    }
    log_info("loaded",
             "leases=%zu token_floor=%llu quarantine_ms=%lld revision=%llu",
             engine_count(s->engine), (unsigned long long)floor,
             (long long)(s->quarantine_ttl_ns / 1000000),
             (unsigned long long)s->revision);
    update_gauges(s, start_ns);
    return 0;
}

struct mode *mode_embedded_create(uv_loop_t *loop, struct store *store,
                                  int64_t ttl_ns,
                                  const struct mode_hooks *hooks,
                                  char *errmsg, size_t len)
{
    struct embedded *s = calloc(1, sizeof(*s));
    if (s == NULL) {
        store_close(store);
        snprintf(errmsg, len, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&s->lock, NULL);
    s->store = store;
    s->lock_fd = -1;
    sm_init(&s->slot, slot_states, slot_invariant, SLOT_IDLE);
    s->commit_work.data = s;
    s->sync_work.data = s;
    s->list_work.data = s;
    clock_init(&s->clock);
    s->chgs = calloc(MAX_BATCH + GC_MAX, sizeof(*s->chgs));
    s->evs = calloc(2 * (MAX_BATCH + GC_MAX) + EXPIRIES_MAX, sizeof(*s->evs));
    s->expired = calloc(EXPIRIES_MAX, sizeof(*s->expired));
    s->waiters = waiters_create();
    s->history = hooks->history;
    if (s->chgs == NULL || s->evs == NULL || s->expired == NULL ||
        s->waiters == NULL) {
        snprintf(errmsg, len, "out of memory");
        embedded_destroy(&s->base);
        return NULL;
    }
    s->base.ttl_ns = ttl_ns;
    if (load(s, errmsg, len) != 0) {
        embedded_destroy(&s->base);
        return NULL;
    }
    mode_init(&s->base, &mode_embedded, loop, hooks, ttl_ns);
    mode_start_timer(&s->base, TICK_MS, on_tick);
    return &s->base;
}

/* The store in the data directory, which it locks (*lock_fd) against a
 * second leased, with --raise-token-floor applied. Returns 0, or -1 with
 * errmsg set (and *lock_fd, when not -1, still to be closed). */
static int open_store(const struct config *cfg, struct store **store,
                      int *lock_fd, char *errmsg, size_t len)
{
    *lock_fd = datadir_lock(cfg->data_dir, errmsg, len);
    if (*lock_fd < 0)
        return -1;
    char db_path[PATH_MAX];
    snprintf(db_path, sizeof(db_path), "%s/leased.db", cfg->data_dir);
    if (store_open(db_path, DATADIR_BUSY_TIMEOUT_MS, store, errmsg, len) !=
        0)
        return -1;
    if (cfg->raise_token_floor == 0)
        return 0;
    size_t raised = 0;
    int rc = store_raise_tokens(*store, cfg->raise_token_floor, &raised);
    if (mode_floor_raised(cfg, rc == STORE_OK, raised, store_errmsg(*store),
                          errmsg, len) == 0)
        return 0;
    store_close(*store);
    return -1;
}

static int embedded_open(uv_loop_t *loop, const struct config *cfg,
                         const struct mode_hooks *hooks, struct mode **out,
                         char *errmsg, size_t len)
{
    struct store *store = NULL;
    int lock_fd = -1;
    if (open_store(cfg, &store, &lock_fd, errmsg, len) != 0) {
        if (lock_fd >= 0)
            close(lock_fd);
        return -1;
    }
    *out = mode_embedded_create(loop, store, cfg->ttl_ns, hooks, errmsg, len);
    if (*out == NULL) {
        close(lock_fd);
        return -1;
    }
    struct embedded *s = (struct embedded *)*out;
    s->lock_fd = lock_fd;
    s->base.where = cfg->data_dir;
    return 0;
}

/* The table (mode.h): name, open, arrive, submit, close, destroy,
 * cancelled, drain. */
const struct mode_ops mode_embedded = {
    "sqlite",       embedded_open,    embedded_arrive,    embedded_submit,
    embedded_close, embedded_destroy, embedded_cancelled, embedded_drain};
