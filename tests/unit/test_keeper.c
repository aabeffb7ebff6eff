/*
 * The keeper over the in-memory backend on a fake clock: it renews as the
 * clock moves, reports trouble and loss, trusts the lease only until its
 * local deadline, releases on stop, and a set releases every lease.
 * Renewals can be made to fail (a backend wrapper), as when the service
 * is away.
 */
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "lease.h"

#define S INT64_C(1000000000)
#define TTL (30 * S)

static _Atomic int64_t fake = INT64_C(1700000000) * S;

static int64_t fake_now(void *arg)
{
    (void)arg;
    return atomic_load(&fake);
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Moves the clock by total in steps, giving the keeper's thread time to
 * look at it after each. */
static void advance(int64_t total, int64_t step)
{
    for (int64_t done = 0; done < total; done += step) {
        atomic_fetch_add(&fake, step);
        sleep_ms(15);
    }
}

/* Waits (up to 5 s of real time) until *v reaches want: the keeper's
 * thread acts on the clock a little after it moves. */
static int wait_for(atomic_int *v, int want)
{
    for (int i = 0; i < 500 && atomic_load(v) < want; i++)
        sleep_ms(10);
    return atomic_load(v);
}

/* A backend wrapper whose renewals fail with UNAVAILABLE while blocked. */
static struct lease_client *inner;
static atomic_bool blocked;
static atomic_int renewals;

static int w_acquire(void *impl, const char *s, const char *o,
                     struct lease *out, char *errmsg, size_t len)
{
    (void)impl, (void)errmsg, (void)len;
    return lease_acquire(inner, s, o, out);
}

static int w_renew(void *impl, const struct lease *cur, struct lease *out,
                   char *errmsg, size_t len)
{
    (void)impl;
    if (atomic_load(&blocked)) {
        snprintf(errmsg, len, "blocked by the test");
        return LEASE_EUNAVAILABLE;
    }
    atomic_fetch_add(&renewals, 1);
    return lease_renew(inner, cur, out);
}

static int w_release(void *impl, const struct lease *cur, char *errmsg,
                     size_t len)
{
    (void)impl, (void)errmsg, (void)len;
    return lease_release(inner, cur);
}

static const struct lease_backend wrapper = {
    .acquire = w_acquire, .renew = w_renew, .release = w_release};

static struct lease_client *client;
static atomic_int lost_calls, lost_err, trouble_calls;

static void on_lost(void *arg, const struct lease *l, int err)
{
    (void)arg, (void)l;
    atomic_store(&lost_err, err);
    atomic_fetch_add(&lost_calls, 1);
}

static void on_trouble(void *arg, const struct lease *l, int err,
                       const char *why)
{
    (void)arg, (void)l, (void)err, (void)why;
    atomic_fetch_add(&trouble_calls, 1);
}

static const struct lease_keeper_callbacks callbacks = {
    .lost = on_lost, .trouble = on_trouble};

static void setup(void)
{
    CHECK_EQ_I64(lease_memory_open(TTL, fake_now, NULL, &inner), LEASE_OK);
    client = lease_client_create(&wrapper, NULL);
    CHECK(client != NULL);
}

static void teardown(void)
{
    lease_client_destroy(client);
    lease_client_destroy(inner);
}

static struct lease_keeper *start(const char *session,
                                  struct lease_keeper_set *set)
{
    struct lease_keeper_options o = {.ttl_ns = TTL, .now_ns = fake_now,
                                     .set = set};
    struct lease_keeper *k;
    struct lease l;
    CHECK_EQ_I64(lease_keeper_start(client, session, "keeper", &o,
                                    &callbacks, &k, &l),
                 LEASE_OK);
    CHECK_EQ_I64(l.token, 1);
    return k;
}

TEST(renews_while_the_clock_moves)
{
    setup();
    struct lease_keeper *k = start("k1", NULL);
    struct lease first, now;
    lease_keeper_lease(k, &first);
    advance(5 * 60 * S, S); /* five minutes: ten TTLs */
    CHECK(lease_keeper_valid(k));
    lease_keeper_lease(k, &now);
    CHECK_EQ_I64(now.token, first.token);
    CHECK(now.expiry_ns > first.expiry_ns + 4 * 60 * S);
    /* About three renewals a TTL (every 7 to 10 s: a third of it, less
     * up to a tenth). */
    int n = atomic_load(&renewals);
    CHECK(n >= 28 && n <= 45);
    CHECK_EQ_I64(atomic_load(&lost_calls), 0);
    /* Another owner is refused all along. */
    struct lease other;
    CHECK_EQ_I64(lease_acquire(client, "k1", "other", &other), LEASE_EHELD);
    CHECK_EQ_I64(lease_keeper_stop(k), LEASE_OK);
    teardown();
}

TEST(trouble_within_the_deadline_is_not_loss)
{
    setup();
    struct lease_keeper *k = start("k2", NULL);
    atomic_store(&blocked, true);
    advance(20 * S, S); /* renewals fail, the deadline (27 s) holds */
    CHECK(wait_for(&trouble_calls, 1) > 0);
    CHECK(lease_keeper_valid(k));
    atomic_store(&blocked, false);
    advance(3 * S, S);
    CHECK(lease_keeper_valid(k));
    advance(60 * S, S);
    CHECK(lease_keeper_valid(k));
    CHECK_EQ_I64(atomic_load(&lost_calls), 0);
    CHECK_EQ_I64(lease_keeper_stop(k), LEASE_OK);
    teardown();
}

TEST(no_renewal_before_the_deadline_is_loss)
{
    setup();
    struct lease_keeper *k = start("k3", NULL);
    atomic_store(&blocked, true);
    advance(26 * S, S);
    CHECK(lease_keeper_valid(k)); /* 30 s less the 3 s margin */
    advance(2 * S, S);
    CHECK(!lease_keeper_valid(k));
    CHECK_EQ_I64(wait_for(&lost_calls, 1), 1);
    CHECK_EQ_I64(atomic_load(&lost_err), LEASE_EUNAVAILABLE);
    /* Expired at 30 s: another owner takes over; the keeper, stopped,
     * does not release the new owner's lease. */
    advance(3 * S, S);
    struct lease other;
    CHECK_EQ_I64(lease_acquire(client, "k3", "other", &other), LEASE_OK);
    CHECK_EQ_I64(other.token, 2);
    CHECK_EQ_I64(lease_keeper_stop(k), LEASE_OK);
    CHECK_EQ_I64(lease_acquire(client, "k3", "third", &other), LEASE_EHELD);
    atomic_store(&blocked, false);
    teardown();
}

TEST(refused_renewal_is_loss_at_once)
{
    setup();
    struct lease_keeper *k = start("k4", NULL);
    struct lease l;
    lease_keeper_lease(k, &l);
    CHECK_EQ_I64(lease_release(client, &l), LEASE_OK); /* behind its back */
    advance(11 * S, S); /* past the first renewal */
    CHECK_EQ_I64(wait_for(&lost_calls, 1), 1);
    CHECK(!lease_keeper_valid(k));
    CHECK_EQ_I64(atomic_load(&lost_err), LEASE_EHELD);
    CHECK_EQ_I64(lease_keeper_stop(k), LEASE_OK);
    teardown();
}

TEST(stop_releases_and_start_refuses_a_held_lease)
{
    setup();
    struct lease_keeper *k = start("k5", NULL);
    struct lease_keeper *k2;
    struct lease_keeper_options o = {.ttl_ns = TTL, .now_ns = fake_now};
    CHECK_EQ_I64(lease_keeper_start(client, "k5", "rival", &o, &callbacks,
                                    &k2, NULL),
                 LEASE_EHELD);
    CHECK(k2 == NULL);
    CHECK_EQ_I64(lease_keeper_stop(k), LEASE_OK);
    struct lease next; /* free at once: no waiting for expiry */
    CHECK_EQ_I64(lease_acquire(client, "k5", "rival", &next), LEASE_OK);
    CHECK_EQ_I64(next.token, 2);
    teardown();
}

TEST(a_set_releases_every_lease_at_shutdown)
{
    setup();
    struct lease_keeper_set *set = lease_keeper_set_create();
    CHECK(set != NULL);
    start("s1", set);
    struct lease_keeper *k2 = start("s2", set);
    start("s3", set);
    CHECK_EQ_I64(lease_keeper_stop(k2), LEASE_OK); /* leaves the set */
    advance(15 * S, S);
    lease_keeper_set_destroy(set);
    const char *sessions[] = {"s1", "s2", "s3"};
    for (int i = 0; i < 3; i++) {
        struct lease l;
        CHECK_EQ_I64(lease_acquire(client, sessions[i], "after", &l),
                     LEASE_OK);
        CHECK_EQ_I64(l.token, 2);
    }
    teardown();
}

CHECK_MAIN(renews_while_the_clock_moves,
           trouble_within_the_deadline_is_not_loss,
           no_renewal_before_the_deadline_is_loss,
           refused_renewal_is_loss_at_once,
           stop_releases_and_start_refuses_a_held_lease,
           a_set_releases_every_lease_at_shutdown)
