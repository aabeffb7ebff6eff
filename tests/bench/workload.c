/*
 * The workloads (see bench.h):
 *
 *   renew    each slot acquires its own sessions first (not measured),
 *            then 90 % renew of a held one, 5 % acquire of a free one,
 *            5 % release of a held one
 *   churn    each slot alternates acquire and release on its sessions
 *   contend  every slot is an owner racing for the same few sessions:
 *            acquire one it does not hold (OK or held: both intended),
 *            release one it holds
 */
#include <stdlib.h>

#include "bench.h"

static unsigned rnd(struct slot *s)
{
    /* xorshift, one state per thread (seeded from the first slot that
     * asks): no RNG shared between threads. */
    static _Thread_local uint64_t x;
    if (x == 0)
        x = 0x9e3779b97f4a7c15u ^ (uint64_t)(uintptr_t)s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return (unsigned)(x >> 32);
}

/* A random own session whose held flag is `want`; tries a few times. */
static bool pick(struct slot *s, bool want)
{
    for (int i = 0; i < 16; i++) {
        size_t k = rnd(s) % s->nsessions;
        if (s->held[k].held == want) {
            s->cur = k;
            return true;
        }
    }
    for (size_t k = 0; k < s->nsessions; k++) {
        if (s->held[k].held == want) {
            s->cur = k;
            return true;
        }
    }
    return false;
}

bool workload_next(struct slot *s, enum bench_workload w, int phase)
{
    if (s->nsessions == 0 || phase == PHASE_STOP)
        return false;
    if (w == WL_RENEW && !s->ready) {
        s->op = OP_ACQUIRE;
        s->cur = s->prepared;
        return true;
    }
    if (phase == PHASE_PREPARE)
        return false;
    switch (w) {
    case WL_RENEW: {
        unsigned r = rnd(s) % 100;
        if (r < 90 && pick(s, true))
            s->op = OP_RENEW;
        else if (r < 95 && pick(s, false))
            s->op = OP_ACQUIRE;
        else if (pick(s, true))
            s->op = OP_RELEASE;
        else if (pick(s, false))
            s->op = OP_ACQUIRE;
        else
            return false;
        return true;
    }
    case WL_CHURN:
    case WL_CONTEND:
        s->cur = rnd(s) % s->nsessions;
        s->op = s->held[s->cur].held ? OP_RELEASE : OP_ACQUIRE;
        return true;
    }
    return false;
}

bool workload_apply(struct slot *s, enum bench_workload w,
                    enum bench_result result, uint64_t token,
                    int64_t lease_id)
{
    struct held *h = &s->held[s->cur];
    if (w == WL_RENEW && !s->ready && s->op == OP_ACQUIRE &&
        result == RESULT_OK && ++s->prepared == s->nsessions) {
        s->ready = true;
        atomic_fetch_add(&s->thread->run->ready_slots, 1);
    }
    if (result == RESULT_OK) {
        if (s->op == OP_RELEASE) {
            h->held = false;
            h->token = 0;
        } else {
            h->held = true;
            h->token = token;
            h->lease_id = lease_id;
        }
        return true;
    }
    if (result == RESULT_HELD) {
        /* A lost renewal: the lease is gone either way. */
        if (s->op == OP_RENEW)
            h->held = false;
        return w == WL_CONTEND && s->op == OP_ACQUIRE;
    }
    return false;
}
