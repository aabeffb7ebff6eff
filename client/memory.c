/*
 * The in-memory backend (see lease.h, lease_memory_open): leased's own
 * lease engine behind a mutex, with a clock the caller supplies. Every
 * change commits at once; nothing is persisted, so no quarantine applies.
 */
#include <assert.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "client.h"
#include "engine.h"
#include "lease.h"
#include "nanotime.h"
#include "rules.h"

/* liblease checks lengths against lease.h's limits (which its public
 * struct lease is sized by); the engine holds them to its own. */
static_assert(LEASE_SESSION_MAX == ENGINE_SESSION_MAX,
              "liblease and the engine disagree on the session id limit");
static_assert(LEASE_OWNER_MAX == ENGINE_OWNER_MAX,
              "liblease and the engine disagree on the owner limit");

struct memory {
    pthread_mutex_t lock;
    struct engine *engine;
    int64_t ttl_ns;
    int64_t (*now_ns)(void *arg);
    void *arg;
};

static int64_t realtime_ns(void *arg)
{
    (void)arg;
    return nanotime_wall();
}

/* Commits an engine result, and says it as liblease does. */
static int result(enum engine_result rc, struct engine *e,
                  struct engine_change *chg, char *errmsg, size_t len)
{
    switch (rc) {
    case ENGINE_OK:
        engine_finish(e, chg, true);
        return LEASE_OK;
    case ENGINE_NOOP:
        return LEASE_OK;
    case ENGINE_HELD:
    case ENGINE_LOST:
        snprintf(errmsg, len, "%s", rules_reason((enum rules_code)rc));
        return LEASE_EHELD;
    case ENGINE_ENOMEM:
        break;
    }
    return LEASE_ENOMEM;
}

/* Drops a few released or long-expired entries, so that a long-lived
 * table does not grow with every session it ever saw. */
static void collect_some(struct memory *m, int64_t now_ns)
{
    struct engine_change chgs[8];
    size_t n = engine_collect(m->engine, now_ns, chgs, 8);
    for (size_t i = 0; i < n; i++)
        engine_finish(m->engine, &chgs[i], true);
}

static int mem_acquire(void *impl, const char *session_id, const char *owner,
                       struct lease *out, char *errmsg, size_t len)
{
    struct memory *m = impl;
    size_t slen = strlen(session_id), olen = strlen(owner);
    struct engine_grant g;
    struct engine_change chg;
    pthread_mutex_lock(&m->lock);
    int64_t now_ns = m->now_ns(m->arg);
    collect_some(m, now_ns);
    enum engine_result rc = engine_acquire(m->engine, now_ns, session_id,
                                           slen, owner, olen, &g, &chg);
    int err = result(rc, m->engine, &chg, errmsg, len);
    pthread_mutex_unlock(&m->lock);
    if (err == LEASE_OK)
        client_fill(out, session_id, slen, owner, olen, g.token, g.expiry_ns,
                    m->ttl_ns);
    return err;
}

static int mem_renew(void *impl, const struct lease *cur, struct lease *out,
                     char *errmsg, size_t len)
{
    struct memory *m = impl;
    size_t slen = strlen(cur->session_id), olen = strlen(cur->owner);
    struct engine_grant g;
    struct engine_change chg;
    pthread_mutex_lock(&m->lock);
    enum engine_result rc =
        engine_renew(m->engine, m->now_ns(m->arg), cur->session_id, slen,
                     cur->owner, olen, cur->token, &g, &chg);
    int err = result(rc, m->engine, &chg, errmsg, len);
    pthread_mutex_unlock(&m->lock);
    if (err == LEASE_OK)
        client_fill(out, cur->session_id, slen, cur->owner, olen, g.token,
                    g.expiry_ns, m->ttl_ns);
    return err;
}

static int mem_release(void *impl, const struct lease *cur, char *errmsg,
                       size_t len)
{
    struct memory *m = impl;
    struct engine_change chg;
    pthread_mutex_lock(&m->lock);
    enum engine_result rc =
        engine_release(m->engine, cur->session_id, strlen(cur->session_id),
                       cur->owner, strlen(cur->owner), cur->token, &chg);
    int err = result(rc, m->engine, &chg, errmsg, len);
    pthread_mutex_unlock(&m->lock);
    return err;
}

static void mem_destroy(void *impl)
{
    struct memory *m = impl;
    engine_destroy(m->engine);
    pthread_mutex_destroy(&m->lock);
    free(m);
}

static const struct lease_backend memory_backend = {
    .acquire = mem_acquire,
    .renew = mem_renew,
    .release = mem_release,
    .destroy = mem_destroy,
};

int lease_memory_open(int64_t ttl_ns, int64_t (*now_ns)(void *arg),
                      void *arg, struct lease_client **out)
{
    *out = NULL;
    if (ttl_ns <= 0)
        return client_fail(LEASE_EINVAL, "ttl_ns must be positive");
    struct memory *m = calloc(1, sizeof(*m));
    if (m == NULL)
        return client_fail(LEASE_ENOMEM, "out of memory");
    pthread_mutex_init(&m->lock, NULL);
    m->ttl_ns = ttl_ns;
    m->now_ns = now_ns != NULL ? now_ns : realtime_ns;
    m->arg = arg;
    /* Started long ago: a fresh table has nothing to quarantine. */
    struct siphash_key key;
    siphash_random_key(&key);
    m->engine = engine_create(ttl_ns, INT64_MIN / 2, &key);
    if (m->engine == NULL || (*out = lease_client_create(&memory_backend,
                                                         m)) == NULL) {
        mem_destroy(m);
        return client_fail(LEASE_ENOMEM, "out of memory");
    }
    return LEASE_OK;
}
