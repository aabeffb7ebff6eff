/*
 * The keeper (see lease.h): one thread per lease, which renews at about a
 * third of the TTL and watches the local deadline; the caller's threads
 * only read the state under the keeper's mutex.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "client.h"
#include "lease.h"
#include "nanotime.h"

#define RETRY_MAX_NS INT64_C(1000000000) /* between failed renewals */
#define OWN_CLOCK_POLL_NS INT64_C(5000000)

struct lease_keeper {
    struct lease_client *client;
    struct lease_keeper_callbacks cb;
    int64_t (*now_ns)(void *arg);
    void *clock_arg;
    int64_t ttl_ns, margin_ns;
    struct lease_keeper_set *set;
    struct lease_keeper *next_in_set;
    unsigned seed;

    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    /* Under lock. */
    struct lease lease;
    int64_t deadline_ns; /* trust the lease until then (keeper's clock) */
    int64_t next_renew_ns;
    bool lost, stopping;
};

struct lease_keeper_set {
    pthread_mutex_t lock;
    struct lease_keeper *keepers;
};

static int64_t mono_ns(void *arg)
{
    (void)arg;
    return nanotime_mono();
}

static int64_t now(const struct lease_keeper *k)
{
    return k->now_ns(k->clock_arg);
}

/* A third of the TTL after sent, less up to a tenth of it at random. */
static int64_t renew_at(struct lease_keeper *k, int64_t sent)
{
    int64_t jitter = (int64_t)((double)rand_r(&k->seed) / RAND_MAX *
                               (double)(k->ttl_ns / 10));
    return sent + k->ttl_ns / 3 - jitter;
}

/* Waits (under lock) until the keeper's clock reaches until, or a wake. */
static void wait_until(struct lease_keeper *k, int64_t until)
{
    int64_t left = until - now(k);
    if (left <= 0)
        return;
    if (k->now_ns != mono_ns && left > OWN_CLOCK_POLL_NS)
        left = OWN_CLOCK_POLL_NS; /* a clock we cannot sleep on */
    struct timespec ts;
    int64_t t = nanotime_mono() + left;
    ts.tv_sec = t / 1000000000;
    ts.tv_nsec = t % 1000000000;
    pthread_cond_timedwait(&k->wake, &k->lock, &ts);
}

/* Marks the lease lost and says so (unlocking around the callback). */
static void lose(struct lease_keeper *k, int err)
{
    k->lost = true;
    struct lease l = k->lease;
    pthread_mutex_unlock(&k->lock);
    if (k->cb.lost != NULL)
        k->cb.lost(k->cb.arg, &l, err);
    pthread_mutex_lock(&k->lock);
}

static void *run(void *arg)
{
    struct lease_keeper *k = arg;
    pthread_mutex_lock(&k->lock);
    int last_err = LEASE_EUNAVAILABLE;
    while (!k->stopping && !k->lost) {
        int64_t t = now(k);
        if (t >= k->deadline_ns) {
            lose(k, last_err);
            break;
        }
        if (t < k->next_renew_ns) {
            wait_until(k, k->next_renew_ns < k->deadline_ns
                              ? k->next_renew_ns
                              : k->deadline_ns);
            continue;
        }
        struct lease cur = k->lease, out;
        pthread_mutex_unlock(&k->lock);
        int rc = lease_renew(k->client, &cur, &out);
        char why[256];
        snprintf(why, sizeof(why), "%s", lease_errmsg());
        pthread_mutex_lock(&k->lock);
        if (rc == LEASE_OK) {
            k->lease = out;
            k->deadline_ns = t + k->ttl_ns - k->margin_ns;
            k->next_renew_ns = renew_at(k, t);
        } else if (rc == LEASE_EHELD) {
            lose(k, rc);
        } else {
            last_err = rc;
            int64_t retry = k->ttl_ns / 10 < RETRY_MAX_NS ? k->ttl_ns / 10
                                                          : RETRY_MAX_NS;
            k->next_renew_ns = now(k) + retry;
            pthread_mutex_unlock(&k->lock);
            if (k->cb.trouble != NULL)
                k->cb.trouble(k->cb.arg, &cur, rc, why);
            pthread_mutex_lock(&k->lock);
        }
    }
    pthread_mutex_unlock(&k->lock);
    return NULL;
}

static void set_add(struct lease_keeper_set *s, struct lease_keeper *k)
{
    pthread_mutex_lock(&s->lock);
    k->next_in_set = s->keepers;
    s->keepers = k;
    pthread_mutex_unlock(&s->lock);
}

/* Takes k out of its set; false if it was not there (a set being
 * destroyed has taken it already). */
static bool set_remove(struct lease_keeper_set *s, struct lease_keeper *k)
{
    bool found = false;
    pthread_mutex_lock(&s->lock);
    for (struct lease_keeper **p = &s->keepers; *p != NULL;
         p = &(*p)->next_in_set) {
        if (*p == k) {
            *p = k->next_in_set;
            found = true;
            break;
        }
    }
    pthread_mutex_unlock(&s->lock);
    return found;
}

int lease_keeper_start(struct lease_client *c, const char *session_id,
                       const char *owner,
                       const struct lease_keeper_options *opts,
                       const struct lease_keeper_callbacks *cb,
                       struct lease_keeper **out, struct lease *granted)
{
    *out = NULL;
    struct lease_keeper *k = calloc(1, sizeof(*k));
    if (k == NULL)
        return client_fail(LEASE_ENOMEM, "out of memory");
    k->client = c;
    if (cb != NULL)
        k->cb = *cb;
    k->now_ns = opts != NULL && opts->now_ns != NULL ? opts->now_ns : mono_ns;
    k->clock_arg = opts != NULL ? opts->clock_arg : NULL;
    k->seed = (unsigned)mono_ns(NULL) ^ (unsigned)(uintptr_t)k;
    int64_t sent = now(k);
    int rc = lease_acquire(c, session_id, owner, &k->lease);
    if (rc != LEASE_OK) {
        free(k);
        return rc;
    }
    k->ttl_ns = opts != NULL && opts->ttl_ns > 0
                    ? opts->ttl_ns
                    : k->lease.expiry_ns - nanotime_wall();
    if (k->ttl_ns <= 0) {
        lease_release(c, &k->lease);
        free(k);
        return client_fail(LEASE_EINVAL, "the lease came back expired: "
                                          "are the clocks apart? set "
                                          "ttl_ns");
    }
    k->margin_ns = opts != NULL && opts->margin_ns > 0 ? opts->margin_ns
                                                       : k->ttl_ns / 10;
    k->deadline_ns = sent + k->ttl_ns - k->margin_ns;
    k->next_renew_ns = renew_at(k, sent);
    pthread_mutex_init(&k->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&k->wake, &ca);
    pthread_condattr_destroy(&ca);
    if (granted != NULL)
        *granted = k->lease;
    if (pthread_create(&k->thread, NULL, run, k) != 0) {
        lease_release(c, &k->lease);
        pthread_cond_destroy(&k->wake);
        pthread_mutex_destroy(&k->lock);
        free(k);
        return client_fail(LEASE_ENOMEM, "cannot start the keeper thread");
    }
    k->set = opts != NULL ? opts->set : NULL;
    if (k->set != NULL)
        set_add(k->set, k);
    *out = k;
    return LEASE_OK;
}

int lease_keeper_valid(struct lease_keeper *k)
{
    pthread_mutex_lock(&k->lock);
    bool ok = !k->lost && now(k) < k->deadline_ns;
    pthread_mutex_unlock(&k->lock);
    return ok;
}

void lease_keeper_lease(struct lease_keeper *k, struct lease *out)
{
    pthread_mutex_lock(&k->lock);
    *out = k->lease;
    pthread_mutex_unlock(&k->lock);
}

/* Stops the thread, releases unless lost, frees. */
static int stop(struct lease_keeper *k)
{
    pthread_mutex_lock(&k->lock);
    k->stopping = true;
    pthread_cond_signal(&k->wake);
    pthread_mutex_unlock(&k->lock);
    pthread_join(k->thread, NULL);
    int rc = k->lost ? LEASE_OK : lease_release(k->client, &k->lease);
    pthread_cond_destroy(&k->wake);
    pthread_mutex_destroy(&k->lock);
    free(k);
    return rc;
}

int lease_keeper_stop(struct lease_keeper *k)
{
    if (k == NULL)
        return LEASE_OK;
    if (k->set != NULL && !set_remove(k->set, k))
        return LEASE_OK; /* the set is stopping it */
    return stop(k);
}

struct lease_keeper_set *lease_keeper_set_create(void)
{
    struct lease_keeper_set *s = calloc(1, sizeof(*s));
    if (s != NULL)
        pthread_mutex_init(&s->lock, NULL);
    return s;
}

void lease_keeper_set_destroy(struct lease_keeper_set *s)
{
    if (s == NULL)
        return;
    for (;;) {
        pthread_mutex_lock(&s->lock);
        struct lease_keeper *k = s->keepers;
        if (k != NULL)
            s->keepers = k->next_in_set;
        pthread_mutex_unlock(&s->lock);
        if (k == NULL)
            break;
        stop(k);
    }
    pthread_mutex_destroy(&s->lock);
    free(s);
}
