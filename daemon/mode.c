/*
 * What both modes do alike (see mode.h): the dispatch to a mode's table,
 * queues, the per-session order counters, answers, storage health, the
 * outcome of a rule as a reply, the admin answers, stats and gauges, and
 * closing. Nothing here decides or stores a lease.
 */
#include "mode.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "admin.h"
#include "clock.h"
#include "engine.h"
#include "log.h"
#include "metrics.h"
#include "rules.h"

bool mode_arrive(struct mode *m, struct request *req)
{
    return m->ops->arrive != NULL && m->ops->arrive(m, req);
}

void mode_submit(struct mode *m, struct request *list)
{
    assert(!m->closing);
    m->ops->submit(m, list);
}

void mode_close(struct mode *m, void (*done)(void *arg), void *arg)
{
    assert(!m->closing);
    m->closing = true;
    m->done = done;
    m->done_arg = arg;
    m->ops->close(m);
}

void mode_cancelled(struct mode *m)
{
    if (m->ops->cancelled != NULL)
        m->ops->cancelled(m);
}

void mode_drain(struct mode *m)
{
    m->draining = true;
    if (m->ops->drain != NULL)
        m->ops->drain(m);
}

const char *mode_where(const struct mode *m)
{
    return m->where;
}

int mode_floor_raised(const struct config *cfg, bool ok, size_t rows,
                      const char *why, char *errmsg, size_t len)
{
    if (!ok) {
        snprintf(errmsg, len, "--raise-token-floor: %s", why);
        return -1;
    }
    log_info("token_floor_raised", "to=%llu rows=%zu",
             (unsigned long long)cfg->raise_token_floor, rows);
    return 0;
}

void mode_init(struct mode *m, const struct mode_ops *ops, uv_loop_t *loop,
               const struct mode_hooks *hooks, int64_t ttl_ns)
{
    m->ops = ops;
    m->loop = loop;
    m->hooks = *hooks;
    m->ttl_ns = ttl_ns;
    m->start_mono_ns = clock_mono_ns();
    m->where = "-";
    siphash_random_key(&m->order_key);
    uv_timer_init(loop, &m->timer);
    m->timer.data = m;
    uv_timer_init(loop, &m->wake);
    m->wake.data = m;
    m->timers_open = 2;
}

static void on_tick(uv_timer_t *t)
{
    struct mode *m = t->data;
    m->tick(m);
}

void mode_start_timer(struct mode *m, uint64_t every_ms,
                      void (*tick)(struct mode *m))
{
    m->tick = tick;
    uv_timer_start(&m->timer, on_tick, every_ms, every_ms);
}

static void on_wake(uv_timer_t *t)
{
    struct mode *m = t->data;
    m->on_wake(m);
}

void mode_wake_after(struct mode *m, uint64_t after_ms,
                     void (*fn)(struct mode *m))
{
    m->on_wake = fn;
    uv_timer_start(&m->wake, on_wake, after_ms, 0);
}

static void on_timer_closed(uv_handle_t *h)
{
    struct mode *m = h->data;
    if (--m->timers_open > 0)
        return;
    void (*done)(void *) = m->done;
    void *arg = m->done_arg;
    m->ops->destroy(m);
    done(arg);
}

void mode_closed(struct mode *m)
{
    assert(m->closing);
    if (uv_is_closing((uv_handle_t *)&m->timer))
        return;
    uv_timer_stop(&m->timer);
    uv_close((uv_handle_t *)&m->timer, on_timer_closed);
    uv_timer_stop(&m->wake);
    uv_close((uv_handle_t *)&m->wake, on_timer_closed);
}

void mode_push(struct mode_queue *q, struct request *r)
{
    r->next = NULL;
    if (q->tail != NULL)
        q->tail->next = r;
    else
        q->head = r;
    q->tail = r;
}

struct request *mode_pop(struct mode_queue *q)
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

void mode_push_front(struct mode_queue *q, struct mode_queue *front)
{
    if (front->head == NULL)
        return;
    front->tail->next = q->head;
    if (q->head == NULL)
        q->tail = front->tail;
    q->head = front->head;
    *front = (struct mode_queue){NULL, NULL};
}

void mode_order_slot(struct mode *m, struct request *req)
{
    uint64_t h = siphash24(&m->order_key, req->session, req->session_len);
    req->order_slot = (uint32_t)(h % MODE_ORDER_SLOTS);
}

void mode_answer(struct mode *m, struct request *req)
{
    m->hooks.reply(m->hooks.arg, req);
}

void mode_answer_list(struct mode *m, struct request *list)
{
    while (list != NULL) {
        struct request *next = list->next;
        list->next = NULL;
        mode_answer(m, list);
        list = next;
    }
}

void mode_set_failing(struct mode *m, bool failing)
{
    if (m->storage_failing == failing)
        return;
    m->storage_failing = failing;
    atomic_store(&metrics.storage_failing, failing);
    if (m->hooks.storage != NULL)
        m->hooks.storage(m->hooks.arg, !failing);
}

void mode_ended(struct request *req)
{
    req->status = REPLY_CANCELLED;
    req->needs_sync = false;
    snprintf(req->reason, sizeof(req->reason),
             "the call ended while it waited");
}

void mode_refuse(struct request *req, const char *why)
{
    req->status = REPLY_UNAVAILABLE;
    req->needs_sync = false;
    snprintf(req->reason, sizeof(req->reason), "%s", why);
}

void mode_count(unsigned flags)
{
    if (flags & RULES_TAKEOVER)
        atomic_fetch_add(&metrics.takeovers, 1);
    if (flags & RULES_EXPIRED)
        atomic_fetch_add(&metrics.expiries, 1);
    if (flags & RULES_RECLAIM)
        atomic_fetch_add(&metrics.reclaims, 1);
}

void mode_decided(struct mode *m, struct request *req,
                  enum rules_code code, uint64_t token, int64_t expiry_ns,
                  unsigned flags)
{
    req->reason[0] = '\0';
    req->change = CHANGE_NONE;
    switch (code) {
    case RULES_OK:
        req->status = REPLY_OK;
        req->grant_token = token;
        req->grant_expiry_ns = expiry_ns;
        req->grant_ttl_ns = m->ttl_ns;
        if (req->op == OP_RELEASE)
            req->change = CHANGE_RELEASE;
        else if (flags & RULES_TAKEOVER)
            req->change = CHANGE_TAKEOVER;
        return;
    case RULES_NOOP: /* a Release of nothing: done */
        req->status = REPLY_OK;
        return;
    case RULES_HELD:
    case RULES_LOST:
        req->status = REPLY_HELD;
        snprintf(req->reason, sizeof(req->reason), "%s",
                 rules_reason(code));
        return;
    }
    abort(); /* the caller checked the code */
}

int mode_admin_start(struct request *req)
{
    req->status = REPLY_OK;
    req->reason[0] = '\0';
    req->change = CHANGE_NONE;
    req->needs_sync = false;
    req->admin = admin_result_new(req->op == OP_LIST    ? req->page_size
                                  : req->op == OP_STATS ? 0
                                                        : 1);
    if (req->admin != NULL)
        return 0;
    mode_refuse(req, "out of memory");
    return -1;
}

static void no_lease(struct request *req)
{
    req->status = REPLY_NOT_FOUND;
    snprintf(req->reason, sizeof(req->reason), "no lease");
}

void mode_admin_get(struct request *req, const struct lease_row *row,
                    bool live)
{
    if (row == NULL || row->owner_len == 0)
        no_lease(req);
    else if (admin_result_add(req->admin, row, live) != 0)
        mode_refuse(req, "out of memory");
}

void mode_admin_revoked(struct request *req, const struct lease_row *row,
                        bool revoked)
{
    if (row == NULL) {
        no_lease(req);
    } else if (!revoked) {
        req->status = REPLY_HELD; /* FAILED_PRECONDITION */
        snprintf(req->reason, sizeof(req->reason),
                 "the lease's token is %llu, not %llu",
                 (unsigned long long)row->token,
                 (unsigned long long)req->token);
    } else if (admin_result_add(req->admin, row, false) != 0) {
        /* Ended, and stored: the answer is lost, not the revoke. */
        mode_refuse(req, "out of memory");
    } else {
        req->change = CHANGE_REVOKE;
    }
}

void mode_admin_stats(const struct mode *m, struct request *req,
                      const struct mode_counts *c)
{
    struct admin_stats *st = &req->admin->stats;
    st->live_leases = c->live;
    st->lease_entries = c->entries;
    st->takeovers = atomic_load(&metrics.takeovers);
    st->expiries = atomic_load(&metrics.expiries);
    st->reclaims = atomic_load(&metrics.reclaims);
    st->token_high_water_mark = c->high_water;
    st->uptime_s = (clock_mono_ns() - m->start_mono_ns) / 1000000000;
    st->quarantine_remaining_ms = c->quarantine_remaining_ns > 0
                                      ? c->quarantine_remaining_ns / 1000000
                                      : 0;
    st->storage_failing = m->storage_failing;
}

void mode_set_gauges(const struct mode_counts *c, bool live_known)
{
    int64_t q = c->quarantine_remaining_ns;
    atomic_store(&metrics.quarantine_remaining_ms, q > 0 ? q / 1000000 : 0);
    atomic_store(&metrics.lease_entries, (int64_t)c->entries);
    if (live_known)
        atomic_store(&metrics.leases_live, (int64_t)c->live);
}
