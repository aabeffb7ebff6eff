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

/* A backend wrapper whose renewals fail with UNAVAILABLE while blocked,
 * hang while stalled (a daemon stopped, a network gone silent) until the
 * test lets them go, and whose grants say no TTL while unsaid (a server
 * other than leased). It notes how long each renewal was allowed to
 * wait, on the real monotonic clock. */
static struct lease_client *inner;
static atomic_bool blocked, stalled, unsaid;
static atomic_int renewals, stalls;
static _Atomic int64_t last_wait_ns, last_call_at; /* fake clock */

static int w_acquire(void *impl, const char *s, const char *o,
                     struct lease *out, char *errmsg, size_t len)
{
    (void)impl, (void)errmsg, (void)len;
    int rc = lease_acquire(inner, s, o, out);
    if (rc == LEASE_OK && atomic_load(&unsaid))
        out->ttl_ns = 0;
    return rc;
}

static int w_renew_until(void *impl, const struct lease *cur,
                         int64_t deadline_ns, struct lease *out,
                         char *errmsg, size_t len)
{
    (void)impl;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    atomic_store(&last_wait_ns, deadline_ns - ((int64_t)ts.tv_sec * S +
                                               ts.tv_nsec));
    atomic_store(&last_call_at, atomic_load(&fake));
    if (atomic_load(&stalled)) {
        atomic_fetch_add(&stalls, 1);
        while (atomic_load(&stalled))
            sleep_ms(1);
    }
    if (atomic_load(&blocked)) {
        snprintf(errmsg, len, "blocked by the test");
        return LEASE_EUNAVAILABLE;
    }
    atomic_fetch_add(&renewals, 1);
    return lease_renew(inner, cur, out);
}

static int w_renew(void *impl, const struct lease *cur, struct lease *out,
                   char *errmsg, size_t len)
{
    return w_renew_until(impl, cur, INT64_MAX, out, errmsg, len);
}

static int w_release(void *impl, const struct lease *cur, char *errmsg,
                     size_t len)
{
    (void)impl, (void)errmsg, (void)len;
    return lease_release(inner, cur);
}

static const struct lease_backend wrapper = {
    .acquire = w_acquire, .renew = w_renew, .release = w_release,
    .renew_until = w_renew_until};

static struct lease_client *client;
static atomic_int lost_calls, lost_err, trouble_calls, warnings;
static char warning_text[256];

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

static void on_warning(void *arg, const struct lease *l, const char *what)
{
    (void)arg, (void)l;
    snprintf(warning_text, sizeof(warning_text), "%s", what);
    atomic_fetch_add(&warnings, 1);
}

static const struct lease_keeper_callbacks callbacks = {
    .lost = on_lost, .trouble = on_trouble, .warning = on_warning};

static void setup(void)
{
    atomic_store(&blocked, false);
    atomic_store(&stalled, false);
    atomic_store(&unsaid, false);
    atomic_store(&lost_calls, 0);
    atomic_store(&warnings, 0);
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

TEST(a_blocked_renewal_does_not_delay_the_loss)
{
    setup();
    int64_t t0 = atomic_load(&fake);
    struct lease_keeper *k = start("k6", NULL);
    CHECK_EQ_I64(lease_keeper_deadline(k), t0 + TTL - TTL / 10);
    atomic_store(&stalled, true); /* the next renewal hangs */
    advance(26 * S, S);
    CHECK(atomic_load(&stalls) == 1); /* it hangs now */
    CHECK(lease_keeper_valid(k));
    CHECK_EQ_I64(atomic_load(&lost_calls), 0);
    /* At the deadline (27 s), with the call still hanging: lost, by the
     * watchdog. The keeper of old waited for the call to come back. */
    advance(S, 10 * 1000000);
    CHECK(!lease_keeper_valid(k));
    CHECK_EQ_I64(wait_for(&lost_calls, 1), 1);
    CHECK_EQ_I64(atomic_load(&lost_err), LEASE_EUNAVAILABLE);
    /* The call comes back OK (the lease was still the keeper's on the
     * service): too late, the keeper stays lost and does not release. */
    int before = atomic_load(&renewals);
    atomic_store(&stalled, false);
    for (int i = 0; i < 500 && atomic_load(&renewals) == before; i++)
        sleep_ms(10);
    CHECK_EQ_I64(atomic_load(&renewals), before + 1);
    sleep_ms(50);
    CHECK(!lease_keeper_valid(k));
    CHECK_EQ_I64(atomic_load(&lost_calls), 1);
    CHECK_EQ_I64(lease_keeper_stop(k), LEASE_OK);
    struct lease other;
    CHECK_EQ_I64(lease_acquire(client, "k6", "other", &other), LEASE_EHELD);
    teardown();
}

TEST(renewals_are_cut_short_at_the_deadline)
{
    setup();
    int64_t t0 = atomic_load(&fake);
    struct lease_keeper *k = start("k7", NULL);
    advance(11 * S, S); /* past the first renewal (7 to 10 s) */
    CHECK(atomic_load(&renewals) >= 1);
    /* A renewal in good times waits at most a third of the TTL, then
     * it is retried rather than waited for. */
    CHECK(atomic_load(&last_wait_ns) <= TTL / 3);
    CHECK(atomic_load(&last_wait_ns) > TTL / 3 - S);
    /* Failing renewals are retried up to the deadline, each allowed no
     * more than the time left to it. */
    atomic_store(&blocked, true);
    int64_t deadline = lease_keeper_deadline(k);
    CHECK(deadline > t0 + 30 * S); /* renewed: later than the first */
    advance(deadline - atomic_load(&fake) - S / 2, S / 10);
    /* The last retry: a second after the one before, and in the last
     * 1.5 s. */
    int64_t left = deadline - atomic_load(&last_call_at);
    CHECK(left <= S + S / 2 + S / 10);
    CHECK(atomic_load(&last_wait_ns) <= left);
    CHECK(atomic_load(&last_wait_ns) > left - S / 10);
    CHECK_EQ_I64(atomic_load(&lost_calls), 0);
    atomic_store(&blocked, false);
    CHECK_EQ_I64(lease_keeper_stop(k), LEASE_OK);
    teardown();
}

TEST(the_service_ttl_is_trusted_and_a_longer_option_refused)
{
    setup();
    struct lease_keeper_options o = {.now_ns = fake_now};
    struct lease_keeper *k;
    struct lease l;
    int64_t t0 = atomic_load(&fake);
    /* No option: the 30 s the service says, less a tenth. */
    CHECK_EQ_I64(lease_keeper_start(client, "t1", "keeper", &o, &callbacks,
                                    &k, &l),
                 LEASE_OK);
    CHECK_EQ_I64(l.ttl_ns, TTL);
    CHECK_EQ_I64(lease_keeper_deadline(k), t0 + TTL - TTL / 10);
    CHECK_EQ_I64(lease_keeper_stop(k), LEASE_OK);
    /* Shorter: trusted instead, margin and renewals its own. */
    o.ttl_ns = 10 * S;
    CHECK_EQ_I64(lease_keeper_start(client, "t2", "keeper", &o, &callbacks,
                                    &k, &l),
                 LEASE_OK);
    CHECK_EQ_I64(lease_keeper_deadline(k), t0 + 9 * S);
    CHECK_EQ_I64(lease_keeper_stop(k), LEASE_OK);
    /* Longer than the service's: refused, and nothing left held. */
    o.ttl_ns = 2 * TTL;
    k = NULL;
    CHECK_EQ_I64(lease_keeper_start(client, "t3", "keeper", &o, &callbacks,
                                    &k, &l),
                 LEASE_EINVAL);
    CHECK(k == NULL);
    CHECK(strstr(lease_errmsg(), "longer than the service's TTL") != NULL);
    /* The keeper's lease (30 s) was released: another owner gets in now.
     * (Its token is not checked: the in-memory table may have collected
     * the released entries, and the floor they left decides it.) */
    CHECK_EQ_I64(lease_acquire(client, "t3", "other", &l), LEASE_OK);
    /* The least margin is the clocks' allowance, 1 % of the TTL and
     * 20 ms; a margin as long as the TTL is refused. */
    o.ttl_ns = 0;
    o.margin_ns = 1;
    CHECK_EQ_I64(lease_keeper_start(client, "t4", "keeper", &o, &callbacks,
                                    &k, &l),
                 LEASE_OK);
    CHECK_EQ_I64(lease_keeper_deadline(k), t0 + TTL - lease_margin_min(TTL));
    CHECK_EQ_I64(lease_margin_min(TTL), TTL / 100 + 20 * 1000000);
    CHECK_EQ_I64(lease_keeper_stop(k), LEASE_OK);
    o.margin_ns = TTL;
    CHECK_EQ_I64(lease_keeper_start(client, "t5", "keeper", &o, &callbacks,
                                    &k, &l),
                 LEASE_EINVAL);
    CHECK_EQ_I64(atomic_load(&warnings), 0);
    teardown();
}

/* The real clocks, for the estimate from the wall clock. */
static int64_t mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * S + ts.tv_nsec;
}

TEST(a_service_that_does_not_say_its_ttl)
{
    /* The in-memory backend on the real wall clock, its grants said
     * without a TTL, as a server other than leased answers. */
    CHECK_EQ_I64(lease_memory_open(TTL, NULL, NULL, &inner), LEASE_OK);
    client = lease_client_create(&wrapper, NULL);
    atomic_store(&unsaid, true);
    struct lease_keeper *k;
    struct lease l;
    int64_t t0 = mono();
    CHECK_EQ_I64(lease_keeper_start(client, "u1", "keeper", NULL, &callbacks,
                                    &k, &l),
                 LEASE_OK);
    int64_t t1 = mono();
    CHECK_EQ_I64(l.ttl_ns, 0);
    /* Estimated from the expiry and this host's clock, said once: at
     * most the TTL, counted from the acquire's sending (between t0 and
     * t1), less its tenth. */
    CHECK_EQ_I64(atomic_load(&warnings), 1);
    CHECK(strstr(warning_text, "does not say its TTL") != NULL);
    int64_t deadline = lease_keeper_deadline(k);
    CHECK(deadline > t0 + TTL - TTL / 10 - S / 2);
    CHECK(deadline <= t1 + TTL - TTL / 10);
    CHECK_EQ_I64(lease_keeper_stop(k), LEASE_OK);
    /* With ttl_ns, that is the TTL, and nothing is said. */
    struct lease_keeper_options o = {.ttl_ns = 20 * S};
    t0 = mono();
    CHECK_EQ_I64(lease_keeper_start(client, "u2", "keeper", &o, &callbacks,
                                    &k, &l),
                 LEASE_OK);
    int64_t d = lease_keeper_deadline(k) - t0;
    CHECK(d >= 18 * S && d < 18 * S + S / 2);
    CHECK_EQ_I64(atomic_load(&warnings), 1);
    CHECK_EQ_I64(lease_keeper_stop(k), LEASE_OK);
    teardown();
}

CHECK_MAIN(renews_while_the_clock_moves,
           trouble_within_the_deadline_is_not_loss,
           no_renewal_before_the_deadline_is_loss,
           refused_renewal_is_loss_at_once,
           stop_releases_and_start_refuses_a_held_lease,
           a_set_releases_every_lease_at_shutdown,
           a_blocked_renewal_does_not_delay_the_loss,
           renewals_are_cut_short_at_the_deadline,
           the_service_ttl_is_trusted_and_a_longer_option_refused,
           a_service_that_does_not_say_its_ttl)
