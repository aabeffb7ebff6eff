/*
 * The keeper (see lease.h): two threads per lease.
 *
 * The renewer renews at about a third of the TTL, each call cut short at
 * the local deadline (or a third of the TTL, whichever is sooner), and
 * retries failures every tenth of the TTL (at most every second). The
 * watchdog sleeps until the deadline and, if no renewal moved it by
 * then, declares the lease lost there: a renewal call that is blocked
 * (a stopped daemon, a silent network) cannot make the keeper late. The
 * caller's threads only read the state under the keeper's mutex.
 *
 * State, under lock: the lease as last granted, the TTL trusted for it,
 * the deadline (the grant's send time + that TTL - the margin), when to
 * renew next, the last failure, and two flags that only ever turn true:
 * lost (set once, by whichever thread sees the loss first, which then
 * calls lost) and stopping. A renewal that comes back after the lease
 * was lost changes nothing.
 *
 * FAULT_BROKEN("keeper_uncapped") is a negative control of the holders'
 * fault campaign (tests/faults/holders), compiled into its test build
 * only: the keeper of old, which learnt of its deadline only when a call
 * returned (calls not cut short, no watchdog, valid() true until then).
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "client.h"
#include "faultpoint.h"
#include "lease.h"
#include "nanotime.h"

#define RETRY_MAX_NS INT64_C(1000000000) /* between failed renewals */
#define OWN_CLOCK_POLL_NS INT64_C(5000000)

struct lease_keeper {
    struct lease_client *client;
    struct lease_keeper_callbacks cb;
    int64_t (*now_ns)(void *arg);
    void *clock_arg;
    int64_t ttl_cap_ns;  /* options.ttl_ns: 0 none */
    int64_t margin_opt_ns; /* options.margin_ns: 0 a tenth of the TTL */
    /* The TTL of a grant that does not say its own: the option's, or
     * the one estimated at the start. */
    int64_t ttl_unsaid_ns;
    struct lease_keeper_set *set;
    struct lease_keeper *next_in_set;
    unsigned seed;

    pthread_t renewer, watchdog;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    /* Under lock. */
    struct lease lease;
    int64_t ttl_ns;      /* trusted for lease */
    int64_t deadline_ns; /* trust the lease until then (keeper's clock) */
    int64_t next_renew_ns;
    int last_err;
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

/* The TTL to trust for the grant l: the service's, or the option's if
 * shorter; for a grant that does not say its own, ttl_unsaid_ns. */
static int64_t trusted_ttl(const struct lease_keeper *k, const struct lease *l)
{
    if (l->ttl_ns <= 0)
        return k->ttl_unsaid_ns;
    return k->ttl_cap_ns > 0 && k->ttl_cap_ns < l->ttl_ns ? k->ttl_cap_ns
                                                          : l->ttl_ns;
}

static int64_t margin(const struct lease_keeper *k, int64_t ttl_ns)
{
    int64_t m = k->margin_opt_ns > 0 ? k->margin_opt_ns : ttl_ns / 10;
    return m > lease_margin_min(ttl_ns) ? m : lease_margin_min(ttl_ns);
}

/* Takes the grant l of a call sent at sent (under lock): its deadline,
 * and the next renewal a third of the TTL after sent, less up to a tenth
 * of it at random. */
static void grant(struct lease_keeper *k, int64_t sent, const struct lease *l)
{
    k->lease = *l;
    k->ttl_ns = trusted_ttl(k, l);
    k->deadline_ns = sent + k->ttl_ns - margin(k, k->ttl_ns);
    int64_t jitter = (int64_t)((double)rand_r(&k->seed) / RAND_MAX *
                               (double)(k->ttl_ns / 10));
    k->next_renew_ns = sent + k->ttl_ns / 3 - jitter;
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

/* Marks the lease lost, once, and says so (unlocking around the
 * callback). */
static void lose(struct lease_keeper *k, int err)
{
    if (k->lost)
        return;
    k->lost = true;
    pthread_cond_broadcast(&k->wake);
    struct lease l = k->lease;
    pthread_mutex_unlock(&k->lock);
    if (k->cb.lost != NULL)
        k->cb.lost(k->cb.arg, &l, err);
    pthread_mutex_lock(&k->lock);
}

/* The watchdog: the lease is lost at its deadline, whatever a renewal
 * call is doing. */
static void *watch(void *arg)
{
    struct lease_keeper *k = arg;
    if (FAULT_BROKEN("keeper_uncapped"))
        return NULL; /* a control: no watchdog */
    pthread_mutex_lock(&k->lock);
    while (!k->stopping && !k->lost) {
        if (now(k) >= k->deadline_ns)
            lose(k, k->last_err);
        else
            wait_until(k, k->deadline_ns);
    }
    pthread_mutex_unlock(&k->lock);
    return NULL;
}

/* One renewal, sent at sent (under lock, unlocking around the call). */
static void renew_once(struct lease_keeper *k, int64_t sent)
{
    struct lease cur = k->lease, out;
    int64_t left = k->deadline_ns - sent;
    if (left > k->ttl_ns / 3)
        left = k->ttl_ns / 3; /* a retry, not a wait, past a lost call */
    pthread_mutex_unlock(&k->lock);
    int rc = FAULT_BROKEN("keeper_uncapped")
                 ? lease_renew(k->client, &cur, &out)
                 : lease_renew_until(k->client, &cur, nanotime_mono() + left,
                                     &out);
    char why[256];
    snprintf(why, sizeof(why), "%s", lease_errmsg());
    pthread_mutex_lock(&k->lock);
    if (k->lost || k->stopping)
        return;
    if (rc == LEASE_OK) {
        grant(k, sent, &out);
    } else if (rc == LEASE_EHELD) {
        lose(k, rc);
    } else {
        k->last_err = rc;
        int64_t retry = k->ttl_ns / 10 < RETRY_MAX_NS ? k->ttl_ns / 10
                                                      : RETRY_MAX_NS;
        k->next_renew_ns = now(k) + retry;
        pthread_mutex_unlock(&k->lock);
        if (k->cb.trouble != NULL)
            k->cb.trouble(k->cb.arg, &cur, rc, why);
        pthread_mutex_lock(&k->lock);
    }
}

/* The renewer. */
static void *run(void *arg)
{
    struct lease_keeper *k = arg;
    pthread_mutex_lock(&k->lock);
    while (!k->stopping && !k->lost) {
        int64_t t = now(k);
        if (t >= k->deadline_ns) /* the watchdog's, unless it is off */
            lose(k, k->last_err);
        else if (t < k->next_renew_ns)
            wait_until(k, k->next_renew_ns < k->deadline_ns
                              ? k->next_renew_ns
                              : k->deadline_ns);
        else
            renew_once(k, t);
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

/* Formats ns as seconds with up to three decimals, into buf. */
static const char *seconds(int64_t ns, char *buf, size_t len)
{
    snprintf(buf, len, "%.3gs", (double)ns / 1e9);
    return buf;
}

/* Checks the options against the first grant l, and settles the TTL of
 * grants that do not say theirs. */
static int check_grant(struct lease_keeper *k, const struct lease *l)
{
    char a[32], b[32];
    if (l->ttl_ns > 0) {
        if (k->ttl_cap_ns > l->ttl_ns)
            return client_fail(LEASE_EINVAL,
                               "ttl_ns (%s) is longer than the service's "
                               "TTL (%s)",
                               seconds(k->ttl_cap_ns, a, sizeof(a)),
                               seconds(l->ttl_ns, b, sizeof(b)));
    } else if (k->ttl_cap_ns > 0) {
        k->ttl_unsaid_ns = k->ttl_cap_ns;
    } else {
        k->ttl_unsaid_ns = l->expiry_ns - nanotime_wall();
        if (k->ttl_unsaid_ns <= 0)
            return client_fail(LEASE_EINVAL,
                               "the service does not say its TTL, and the "
                               "lease came back expired: are the clocks "
                               "apart? set ttl_ns");
        if (k->cb.warning != NULL) {
            char what[200];
            snprintf(what, sizeof(what),
                     "the service does not say its TTL: trusting %s, its "
                     "expiry less this host's clock (set ttl_ns if the "
                     "clocks may differ)",
                     seconds(k->ttl_unsaid_ns, a, sizeof(a)));
            k->cb.warning(k->cb.arg, l, what);
        }
    }
    int64_t ttl = trusted_ttl(k, l);
    if (k->margin_opt_ns >= ttl)
        return client_fail(LEASE_EINVAL,
                           "margin_ns (%s) is not less than the TTL (%s)",
                           seconds(k->margin_opt_ns, a, sizeof(a)),
                           seconds(ttl, b, sizeof(b)));
    return LEASE_OK;
}

/* Frees what lease_keeper_start made of k, the threads aside. */
static void destroy(struct lease_keeper *k)
{
    pthread_cond_destroy(&k->wake);
    pthread_mutex_destroy(&k->lock);
    free(k);
}

/* Tells k's threads to stop, and waits for those started. */
static void join(struct lease_keeper *k, bool renewer, bool watchdog)
{
    pthread_mutex_lock(&k->lock);
    k->stopping = true;
    pthread_cond_broadcast(&k->wake);
    pthread_mutex_unlock(&k->lock);
    if (renewer)
        pthread_join(k->renewer, NULL);
    if (watchdog)
        pthread_join(k->watchdog, NULL);
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
    if (opts != NULL) {
        k->ttl_cap_ns = opts->ttl_ns > 0 ? opts->ttl_ns : 0;
        k->margin_opt_ns = opts->margin_ns > 0 ? opts->margin_ns : 0;
        k->clock_arg = opts->clock_arg;
        k->set = opts->set;
    }
    k->now_ns = opts != NULL && opts->now_ns != NULL ? opts->now_ns : mono_ns;
    k->seed = (unsigned)mono_ns(NULL) ^ (unsigned)(uintptr_t)k;
    k->last_err = LEASE_EUNAVAILABLE;
    pthread_mutex_init(&k->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&k->wake, &ca);
    pthread_condattr_destroy(&ca);

    int64_t sent = now(k);
    struct lease l;
    int rc = lease_acquire(c, session_id, owner, &l);
    if (rc == LEASE_OK && (rc = check_grant(k, &l)) != LEASE_OK) {
        char why[256];
        snprintf(why, sizeof(why), "%s", lease_errmsg());
        lease_release(c, &l);
        client_fail(rc, "%s", why);
    }
    if (rc != LEASE_OK) {
        destroy(k);
        return rc;
    }
    grant(k, sent, &l);
    if (pthread_create(&k->renewer, NULL, run, k) != 0) {
        lease_release(c, &l);
        destroy(k);
        return client_fail(LEASE_ENOMEM, "cannot start the keeper thread");
    }
    if (pthread_create(&k->watchdog, NULL, watch, k) != 0) {
        join(k, true, false);
        lease_release(c, &l);
        destroy(k);
        return client_fail(LEASE_ENOMEM, "cannot start the keeper thread");
    }
    if (granted != NULL)
        *granted = l;
    if (k->set != NULL)
        set_add(k->set, k);
    *out = k;
    return LEASE_OK;
}

int lease_keeper_valid(struct lease_keeper *k)
{
    pthread_mutex_lock(&k->lock);
    bool ok = !k->lost && (now(k) < k->deadline_ns ||
                           FAULT_BROKEN("keeper_uncapped"));
    pthread_mutex_unlock(&k->lock);
    return ok;
}

int64_t lease_keeper_deadline(struct lease_keeper *k)
{
    pthread_mutex_lock(&k->lock);
    int64_t d = k->deadline_ns;
    pthread_mutex_unlock(&k->lock);
    return d;
}

void lease_keeper_lease(struct lease_keeper *k, struct lease *out)
{
    pthread_mutex_lock(&k->lock);
    *out = k->lease;
    pthread_mutex_unlock(&k->lock);
}

/* Stops the threads, releases unless lost, frees. */
static int stop(struct lease_keeper *k)
{
    join(k, true, true);
    int rc = k->lost ? LEASE_OK : lease_release(k->client, &k->lease);
    destroy(k);
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
