/*
 * The conformance suite (see lease.h, lease_conformance_run): the
 * behaviours of Mecatl's own suite (docs/protocol.md, "Conformance")
 * and the rest of its lease rules, against any struct lease_client.
 *
 * Each check makes up fresh session ids (prefix, process id, a counter),
 * so the suite can run again and again against a server that keeps state.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "lease.h"

#define CHAIN 100
#define THREADS 8
#define SESSIONS_PER_THREAD 16

struct suite {
    const struct lease_conformance *conf;
    unsigned counter;
    bool failed; /* the current check */
    pthread_mutex_t lock;
};

static void fail(struct suite *s, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void fail(struct suite *s, int line, const char *fmt, ...)
{
    pthread_mutex_lock(&s->lock);
    s->failed = true;
    if (s->conf->report != NULL) {
        va_list ap;
        va_start(ap, fmt);
        fprintf(s->conf->report, "  conformance.c:%d: ", line);
        vfprintf(s->conf->report, fmt, ap);
        fputc('\n', s->conf->report);
        va_end(ap);
    }
    pthread_mutex_unlock(&s->lock);
}

/* EXPECT_ERR(s, call, want): the call returns want. */
#define EXPECT_ERR(s, call, want)                                          \
    do {                                                                   \
        int got_ = (call);                                                 \
        if (got_ != (want))                                                \
            fail((s), __LINE__, "%s returned %d (%s: %s), want %d (%s)",   \
                 #call, got_, lease_strerror(got_), lease_errmsg(),        \
                 (want), lease_strerror(want));                            \
    } while (0)

#define EXPECT(s, cond, ...)                                               \
    do {                                                                   \
        if (!(cond))                                                       \
            fail((s), __LINE__, __VA_ARGS__);                              \
    } while (0)

static void session(struct suite *s, char *buf, size_t len, const char *tag)
{
    pthread_mutex_lock(&s->lock);
    unsigned n = ++s->counter;
    pthread_mutex_unlock(&s->lock);
    snprintf(buf, len, "%s-%ld-%s-%u",
             s->conf->prefix != NULL ? s->conf->prefix : "conformance",
             (long)getpid(), tag, n);
}

static void advance_past_ttl(struct suite *s)
{
    /* A fifth of a TTL beyond, so that round trips cannot straddle it. */
    s->conf->advance(s->conf->arg, s->conf->ttl_ns + s->conf->ttl_ns / 5);
}

static struct lease_client *C(struct suite *s)
{
    return s->conf->client;
}

/* 1. A fresh acquire succeeds and returns the id, the owner and a
 * non-zero expiry (and a token >= 1). */
static void fresh_acquire(struct suite *s)
{
    char id[128];
    session(s, id, sizeof(id), "fresh");
    struct lease l;
    memset(&l, 0, sizeof(l));
    EXPECT_ERR(s, lease_acquire(C(s), id, "owner-a", &l), LEASE_OK);
    EXPECT(s, strcmp(l.session_id, id) == 0, "session_id %s, want %s",
           l.session_id, id);
    EXPECT(s, strcmp(l.owner, "owner-a") == 0, "owner %s", l.owner);
    EXPECT(s, l.expiry_ns != 0, "zero expiry");
    EXPECT(s, l.token >= 1, "token %" PRIu64 ", want >= 1", l.token);
}

/* 2. Renew inside the window keeps the token and returns an expiry
 * strictly later. */
static void renew_extends(struct suite *s)
{
    char id[128];
    session(s, id, sizeof(id), "renew");
    struct lease l, r;
    EXPECT_ERR(s, lease_acquire(C(s), id, "owner-a", &l), LEASE_OK);
    s->conf->advance(s->conf->arg, s->conf->ttl_ns / 4);
    EXPECT_ERR(s, lease_renew(C(s), &l, &r), LEASE_OK);
    EXPECT(s, r.token == l.token, "token %" PRIu64 " became %" PRIu64,
           l.token, r.token);
    EXPECT(s, r.expiry_ns > l.expiry_ns, "expiry did not move forward");
    /* Twice at once: still strictly later. */
    struct lease r2;
    EXPECT_ERR(s, lease_renew(C(s), &r, &r2), LEASE_OK);
    EXPECT(s, r2.expiry_ns > r.expiry_ns, "second renew not later");
}

/* 3. After release, another owner can acquire. 6. ... with a strictly
 * greater token. */
static void release_then_other_owner(struct suite *s)
{
    char id[128];
    session(s, id, sizeof(id), "release");
    struct lease a, b;
    EXPECT_ERR(s, lease_acquire(C(s), id, "owner-a", &a), LEASE_OK);
    EXPECT_ERR(s, lease_release(C(s), &a), LEASE_OK);
    EXPECT_ERR(s, lease_acquire(C(s), id, "owner-b", &b), LEASE_OK);
    EXPECT(s, b.token > a.token, "token %" PRIu64 " after %" PRIu64,
           b.token, a.token);
}

/* 4. A second owner's acquire of a live lease fails with HELD. */
static void second_owner_held(struct suite *s)
{
    char id[128];
    session(s, id, sizeof(id), "held");
    struct lease a, b;
    EXPECT_ERR(s, lease_acquire(C(s), id, "owner-a", &a), LEASE_OK);
    EXPECT_ERR(s, lease_acquire(C(s), id, "owner-b", &b), LEASE_EHELD);
    /* The holder is untouched. */
    EXPECT_ERR(s, lease_renew(C(s), &a, &b), LEASE_OK);
}

/* 5. Same-owner re-acquire succeeds and keeps the token. */
static void same_owner_reacquire(struct suite *s)
{
    char id[128];
    session(s, id, sizeof(id), "reacquire");
    struct lease a, b;
    EXPECT_ERR(s, lease_acquire(C(s), id, "owner-a", &a), LEASE_OK);
    EXPECT_ERR(s, lease_acquire(C(s), id, "owner-a", &b), LEASE_OK);
    EXPECT(s, b.token == a.token, "token %" PRIu64 " became %" PRIu64,
           a.token, b.token);
    EXPECT(s, b.expiry_ns > a.expiry_ns, "expiry not refreshed");
}

/* 6. Acquire after release yields a strictly greater token (same owner
 * too). */
static void release_raises_token(struct suite *s)
{
    char id[128];
    session(s, id, sizeof(id), "rerelease");
    struct lease a, b;
    EXPECT_ERR(s, lease_acquire(C(s), id, "owner-a", &a), LEASE_OK);
    EXPECT_ERR(s, lease_release(C(s), &a), LEASE_OK);
    EXPECT_ERR(s, lease_acquire(C(s), id, "owner-a", &b), LEASE_OK);
    EXPECT(s, b.token > a.token, "token %" PRIu64 " after %" PRIu64,
           b.token, a.token);
}

/* 7. Acquire after expiry yields a strictly greater token. 8. Renew after
 * expiry-and-takeover fails with HELD. */
static void expiry_and_takeover(struct suite *s)
{
    char id[128];
    session(s, id, sizeof(id), "expiry");
    struct lease a, b, r;
    EXPECT_ERR(s, lease_acquire(C(s), id, "owner-a", &a), LEASE_OK);
    advance_past_ttl(s);
    EXPECT_ERR(s, lease_acquire(C(s), id, "owner-b", &b), LEASE_OK);
    EXPECT(s, b.token > a.token, "token %" PRIu64 " after %" PRIu64,
           b.token, a.token);
    EXPECT_ERR(s, lease_renew(C(s), &a, &r), LEASE_EHELD);
    /* The old owner's release frees nothing. */
    EXPECT_ERR(s, lease_release(C(s), &a), LEASE_OK);
    EXPECT_ERR(s, lease_acquire(C(s), id, "owner-c", &r), LEASE_EHELD);
}

/* 9. Renew after release fails with HELD. */
static void renew_after_release(struct suite *s)
{
    char id[128];
    session(s, id, sizeof(id), "renewrel");
    struct lease a, r;
    EXPECT_ERR(s, lease_acquire(C(s), id, "owner-a", &a), LEASE_OK);
    EXPECT_ERR(s, lease_release(C(s), &a), LEASE_OK);
    EXPECT_ERR(s, lease_renew(C(s), &a, &r), LEASE_EHELD);
}

/* 10. Release is idempotent, also for a never-seen session. */
static void release_idempotent(struct suite *s)
{
    char id[128];
    session(s, id, sizeof(id), "idem");
    struct lease a;
    EXPECT_ERR(s, lease_acquire(C(s), id, "owner-a", &a), LEASE_OK);
    EXPECT_ERR(s, lease_release(C(s), &a), LEASE_OK);
    EXPECT_ERR(s, lease_release(C(s), &a), LEASE_OK);
    struct lease ghost;
    memset(&ghost, 0, sizeof(ghost));
    session(s, ghost.session_id, sizeof(ghost.session_id), "never");
    snprintf(ghost.owner, sizeof(ghost.owner), "nobody");
    ghost.token = 7;
    EXPECT_ERR(s, lease_release(C(s), &ghost), LEASE_OK);
    EXPECT_ERR(s, lease_release(C(s), &ghost), LEASE_OK);
}

/* 11. Tokens rise strictly across a chain of takeovers; the first >= 1.
 * A chain of CHAIN owners, each taking over from the last by release. */
static void takeover_chain(struct suite *s)
{
    char id[128];
    session(s, id, sizeof(id), "chain");
    uint64_t last = 0;
    for (int i = 0; i < CHAIN && !s->failed; i++) {
        char owner[32];
        snprintf(owner, sizeof(owner), "owner-%d", i);
        struct lease l;
        EXPECT_ERR(s, lease_acquire(C(s), id, owner, &l), LEASE_OK);
        EXPECT(s, l.token > last && l.token >= 1,
               "link %d: token %" PRIu64 " after %" PRIu64, i, l.token,
               last);
        last = l.token;
        EXPECT_ERR(s, lease_release(C(s), &l), LEASE_OK);
    }
}

/* 12. Distinct sessions never contend. */
static void distinct_sessions(struct suite *s)
{
    char x[128], y[128];
    session(s, x, sizeof(x), "distinct");
    session(s, y, sizeof(y), "distinct");
    struct lease a, b;
    EXPECT_ERR(s, lease_acquire(C(s), x, "owner-a", &a), LEASE_OK);
    EXPECT_ERR(s, lease_acquire(C(s), y, "owner-b", &b), LEASE_OK);
    EXPECT_ERR(s, lease_renew(C(s), &a, &a), LEASE_OK);
    EXPECT_ERR(s, lease_renew(C(s), &b, &b), LEASE_OK);
}

/* Renewing an expired lease nobody took over reclaims it: same token,
 * and it is held again. */
static void reclaim_on_renew(struct suite *s)
{
    char id[128];
    session(s, id, sizeof(id), "reclaim");
    struct lease a, r, b;
    EXPECT_ERR(s, lease_acquire(C(s), id, "owner-a", &a), LEASE_OK);
    advance_past_ttl(s);
    EXPECT_ERR(s, lease_renew(C(s), &a, &r), LEASE_OK);
    EXPECT(s, r.token == a.token, "token changed on reclaim");
    EXPECT(s, r.expiry_ns > a.expiry_ns, "expiry not later");
    EXPECT_ERR(s, lease_acquire(C(s), id, "owner-b", &b), LEASE_EHELD);
}

/* Release by the wrong owner, or with the wrong token, frees nothing. */
static void wrong_release_frees_nothing(struct suite *s)
{
    char id[128];
    session(s, id, sizeof(id), "wrongrel");
    struct lease a, other, r;
    EXPECT_ERR(s, lease_acquire(C(s), id, "owner-a", &a), LEASE_OK);
    other = a;
    snprintf(other.owner, sizeof(other.owner), "owner-b");
    EXPECT_ERR(s, lease_release(C(s), &other), LEASE_OK);
    other = a;
    other.token = a.token + 1;
    EXPECT_ERR(s, lease_release(C(s), &other), LEASE_OK);
    other.token = 0;
    EXPECT_ERR(s, lease_release(C(s), &other), LEASE_OK);
    EXPECT_ERR(s, lease_acquire(C(s), id, "owner-c", &r), LEASE_EHELD);
    EXPECT_ERR(s, lease_renew(C(s), &a, &r), LEASE_OK);
    EXPECT(s, r.token == a.token, "token changed");
}

/* Renew with token 0, a wrong token or a wrong owner is HELD, and changes
 * nothing. */
static void renew_wrong_token(struct suite *s)
{
    char id[128];
    session(s, id, sizeof(id), "renewtok");
    struct lease a, bad, r;
    EXPECT_ERR(s, lease_acquire(C(s), id, "owner-a", &a), LEASE_OK);
    bad = a;
    bad.token = 0;
    EXPECT_ERR(s, lease_renew(C(s), &bad, &r), LEASE_EHELD);
    bad.token = a.token + 1;
    EXPECT_ERR(s, lease_renew(C(s), &bad, &r), LEASE_EHELD);
    bad = a;
    snprintf(bad.owner, sizeof(bad.owner), "owner-b");
    EXPECT_ERR(s, lease_renew(C(s), &bad, &r), LEASE_EHELD);
    EXPECT_ERR(s, lease_renew(C(s), &a, &r), LEASE_OK);
    /* Renew of a session never seen. */
    session(s, bad.session_id, sizeof(bad.session_id), "renewghost");
    EXPECT_ERR(s, lease_renew(C(s), &bad, &r), LEASE_EHELD);
}

/* Invalid arguments are refused and change nothing. */
static void invalid_arguments(struct suite *s)
{
    char id[128];
    session(s, id, sizeof(id), "invalid");
    struct lease l;
    char long_id[LEASE_SESSION_MAX + 2];
    memset(long_id, 'x', sizeof(long_id) - 1);
    long_id[sizeof(long_id) - 1] = '\0';
    EXPECT_ERR(s, lease_acquire(C(s), "", "owner-a", &l), LEASE_EINVAL);
    EXPECT_ERR(s, lease_acquire(C(s), id, "", &l), LEASE_EINVAL);
    EXPECT_ERR(s, lease_acquire(C(s), long_id, "owner-a", &l), LEASE_EINVAL);
    EXPECT_ERR(s, lease_acquire(C(s), "bad\xff", "owner-a", &l), LEASE_EINVAL);
    memcpy(long_id, id, strlen(id)); /* unique, and exactly the limit */
    long_id[LEASE_SESSION_MAX] = '\0';
    EXPECT_ERR(s, lease_acquire(C(s), long_id, id, &l), LEASE_OK);
    EXPECT_ERR(s, lease_release(C(s), &l), LEASE_OK);
    EXPECT_ERR(s, lease_acquire(C(s), id, "owner-a", &l), LEASE_OK);
}

struct worker {
    struct suite *s;
    int n;
};

static void *parallel_worker(void *arg)
{
    struct worker *w = arg;
    struct suite *s = w->s;
    char owner[32];
    snprintf(owner, sizeof(owner), "worker-%d", w->n);
    for (int i = 0; i < SESSIONS_PER_THREAD; i++) {
        char id[128];
        session(s, id, sizeof(id), "parallel");
        struct lease l, r;
        EXPECT_ERR(s, lease_acquire(C(s), id, owner, &l), LEASE_OK);
        EXPECT_ERR(s, lease_renew(C(s), &l, &r), LEASE_OK);
        EXPECT_ERR(s, lease_release(C(s), &r), LEASE_OK);
    }
    return NULL;
}

/* Many sessions at once, from many threads: all succeed. */
static void parallel_sessions(struct suite *s)
{
    pthread_t t[THREADS];
    struct worker w[THREADS];
    int started = 0;
    for (int i = 0; i < THREADS; i++) {
        w[i] = (struct worker){s, i};
        if (pthread_create(&t[i], NULL, parallel_worker, &w[i]) != 0) {
            fail(s, __LINE__, "cannot start thread %d", i);
            break;
        }
        started++;
    }
    for (int i = 0; i < started; i++)
        pthread_join(t[i], NULL);
}

static const struct {
    const char *name;
    void (*run)(struct suite *s);
} checks[] = {
    {"1 fresh acquire", fresh_acquire},
    {"2 renew extends, keeps token", renew_extends},
    {"3 release lets another owner in", release_then_other_owner},
    {"4 second owner is held", second_owner_held},
    {"5 same-owner re-acquire keeps token", same_owner_reacquire},
    {"6 acquire after release raises token", release_raises_token},
    {"7+8 expiry, takeover, stale renew held", expiry_and_takeover},
    {"9 renew after release held", renew_after_release},
    {"10 release idempotent", release_idempotent},
    {"11 takeover chain of 100", takeover_chain},
    {"12 distinct sessions never contend", distinct_sessions},
    {"reclaim on renew", reclaim_on_renew},
    {"wrong owner or token release frees nothing",
     wrong_release_frees_nothing},
    {"renew with token 0 or wrong token held", renew_wrong_token},
    {"invalid arguments refused", invalid_arguments},
    {"parallel sessions", parallel_sessions},
};

int lease_conformance_run(const struct lease_conformance *conf)
{
    struct suite s = {.conf = conf};
    pthread_mutex_init(&s.lock, NULL);
    int failed = 0;
    for (size_t i = 0; i < sizeof(checks) / sizeof(checks[0]); i++) {
        s.failed = false;
        checks[i].run(&s);
        if (s.failed)
            failed++;
        if (conf->report != NULL) {
            fprintf(conf->report, "%s conformance: %s\n",
                    s.failed ? "FAIL" : "ok  ", checks[i].name);
            fflush(conf->report);
        }
    }
    pthread_mutex_destroy(&s.lock);
    return failed;
}
