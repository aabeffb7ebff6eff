/*
 * The lease engine as scripts over an explicit clock: "t=0 A acquires;
 * t=31 B acquires -> token 2". Every change is committed at once unless a
 * case says otherwise, and the invariants are checked after each step.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

#include "check_child.h"
#include "engine.h"

#define S INT64_C(1000000000)
#define TTL (30 * S)
#define T0 (1000 * S) /* the engine's start */

static struct engine *E;

static void setup(void)
{
    static const struct siphash_key key = {1, 2};
    E = engine_create(TTL, T0, &key);
    CHECK(E != NULL);
}

/* Every case ends between batches: nothing left unfinished. */
static void teardown(void)
{
    engine_check_settled(E);
    engine_destroy(E);
    E = NULL;
}

/* Acquire at T0 + t seconds; commits; returns the result. */
static int acq(int64_t t, const char *s, const char *o,
               struct engine_grant *g)
{
    struct engine_change c;
    struct engine_grant dummy;
    int rc = engine_acquire(E, T0 + t * S, s, strlen(s), o, strlen(o),
                            g != NULL ? g : &dummy, &c);
    if (rc == ENGINE_OK)
        engine_finish(E, &c, true);
    engine_check(E);
    return rc;
}

static int ren(int64_t t, const char *s, const char *o, uint64_t token,
               struct engine_grant *g)
{
    struct engine_change c;
    struct engine_grant dummy;
    int rc = engine_renew(E, T0 + t * S, s, strlen(s), o, strlen(o), token,
                          g != NULL ? g : &dummy, &c);
    if (rc == ENGINE_OK)
        engine_finish(E, &c, true);
    engine_check(E);
    return rc;
}

static int rel(const char *s, const char *o, uint64_t token)
{
    struct engine_change c;
    int rc = engine_release(E, s, strlen(s), o, strlen(o), token, &c);
    if (rc == ENGINE_OK)
        engine_finish(E, &c, true);
    engine_check(E);
    return rc;
}

static int rev(const char *s, uint64_t token, struct engine_change *c)
{
    int rc = engine_revoke(E, s, strlen(s), token, c);
    engine_check(E);
    return rc;
}

TEST(first_takeover_gets_token_one)
{
    setup();
    struct engine_grant g;
    CHECK_EQ_I64(acq(0, "s", "A", &g), ENGINE_OK);
    CHECK_EQ_U64(g.token, 1);
    CHECK_EQ_I64(g.expiry_ns, T0 + TTL);
    teardown();
}

TEST(other_owner_held_until_expiry)
{
    setup();
    struct engine_grant g;
    acq(0, "s", "A", NULL);
    CHECK_EQ_I64(acq(29, "s", "B", NULL), ENGINE_HELD);
    CHECK_EQ_I64(acq(30, "s", "B", &g), ENGINE_OK); /* expiry is exclusive */
    CHECK_EQ_U64(g.token, 2);
    CHECK_EQ_I64(g.expiry_ns, T0 + 30 * S + TTL);
    teardown();
}

TEST(same_owner_reacquire_keeps_token)
{
    setup();
    struct engine_grant a, b;
    acq(0, "s", "A", &a);
    CHECK_EQ_I64(acq(10, "s", "A", &b), ENGINE_OK);
    CHECK_EQ_U64(b.token, a.token);
    CHECK_EQ_I64(b.expiry_ns, T0 + 10 * S + TTL);
    /* After expiry the same owner takes it over anew: a new token. */
    CHECK_EQ_I64(acq(10 + 31, "s", "A", &b), ENGINE_OK);
    CHECK_EQ_U64(b.token, a.token + 1);
    teardown();
}

TEST(renew_keeps_token_and_moves_expiry_strictly)
{
    setup();
    struct engine_grant a, r1, r2;
    acq(0, "s", "A", &a);
    CHECK_EQ_I64(ren(5, "s", "A", a.token, &r1), ENGINE_OK);
    CHECK_EQ_U64(r1.token, a.token);
    CHECK_EQ_I64(r1.expiry_ns, T0 + 5 * S + TTL);
    /* The same instant again: still strictly later. */
    CHECK_EQ_I64(ren(5, "s", "A", a.token, &r2), ENGINE_OK);
    CHECK(r2.expiry_ns > r1.expiry_ns);
    teardown();
}

TEST(renew_reclaims_expired_lease_nobody_took)
{
    setup();
    struct engine_grant a, r;
    acq(0, "s", "A", &a);
    CHECK_EQ_I64(ren(45, "s", "A", a.token, &r), ENGINE_OK);
    CHECK_EQ_U64(r.token, a.token);
    CHECK_EQ_I64(r.expiry_ns, T0 + 45 * S + TTL);
    CHECK_EQ_I64(acq(46, "s", "B", NULL), ENGINE_HELD);
    teardown();
}

TEST(renew_after_takeover_or_release_is_lost)
{
    setup();
    struct engine_grant a, b;
    acq(0, "s", "A", &a);
    acq(31, "s", "B", &b);
    CHECK_EQ_I64(ren(32, "s", "A", a.token, NULL), ENGINE_LOST);
    CHECK_EQ_I64(rel("s", "B", b.token), ENGINE_OK);
    CHECK_EQ_I64(ren(33, "s", "B", b.token, NULL), ENGINE_LOST);
    CHECK_EQ_I64(ren(33, "never", "B", 1, NULL), ENGINE_LOST);
    CHECK_EQ_I64(ren(33, "s", "B", 0, NULL), ENGINE_LOST);
    teardown();
}

TEST(release_needs_owner_and_token)
{
    setup();
    struct engine_grant a, b;
    acq(0, "s", "A", &a);
    CHECK_EQ_I64(rel("s", "B", a.token), ENGINE_NOOP);
    CHECK_EQ_I64(rel("s", "A", a.token + 1), ENGINE_NOOP);
    CHECK_EQ_I64(rel("s", "A", 0), ENGINE_NOOP);
    CHECK_EQ_I64(rel("never", "A", 1), ENGINE_NOOP);
    CHECK_EQ_I64(acq(1, "s", "B", NULL), ENGINE_HELD);
    CHECK_EQ_I64(rel("s", "A", a.token), ENGINE_OK);
    CHECK_EQ_I64(rel("s", "A", a.token), ENGINE_NOOP);
    CHECK_EQ_I64(acq(2, "s", "B", &b), ENGINE_OK);
    CHECK_EQ_U64(b.token, a.token + 1);
    teardown();
}

TEST(revoke_frees_any_holder_and_the_next_token_is_greater)
{
    setup();
    struct engine_grant a, b;
    struct engine_change c;
    acq(0, "s", "A", &a);
    CHECK_EQ_I64(rev("s", a.token + 1, &c), ENGINE_LOST);
    CHECK_EQ_I64(rev("never", 0, &c), ENGINE_NOOP);
    CHECK_EQ_I64(acq(1, "s", "B", NULL), ENGINE_HELD);
    CHECK_EQ_I64(rev("s", a.token, &c), ENGINE_OK);
    /* The lease that ended, for the answer and the audit. */
    CHECK(c.durable && c.has_before && c.before.owner_len == 1 &&
          memcmp(c.before.owner, "A", 1) == 0);
    CHECK_EQ_U64(c.before.token, a.token);
    CHECK_EQ_I64(c.after.owner_len, 0);
    engine_finish(E, &c, true);
    CHECK_EQ_I64(rev("s", 0, &c), ENGINE_NOOP);
    CHECK_EQ_I64(ren(2, "s", "A", a.token, NULL), ENGINE_LOST);
    CHECK_EQ_I64(acq(2, "s", "B", &b), ENGINE_OK);
    CHECK_EQ_U64(b.token, a.token + 1);
    /* Undone (the commit failed): A holds it again. */
    CHECK_EQ_I64(rev("s", 0, &c), ENGINE_OK);
    engine_finish(E, &c, false);
    engine_check(E);
    CHECK_EQ_I64(acq(3, "s", "C", NULL), ENGINE_HELD);
    CHECK_EQ_I64(ren(3, "s", "B", b.token, NULL), ENGINE_OK);
    teardown();
}

TEST(takeover_chain_tokens_rise)
{
    setup();
    uint64_t last = 0;
    for (int i = 0; i < 100; i++) {
        struct engine_grant g;
        char owner[16];
        snprintf(owner, sizeof(owner), "o%d", i);
        CHECK_EQ_I64(acq(i * 31, "s", owner, &g), ENGINE_OK);
        CHECK(g.token > last);
        last = g.token;
    }
    CHECK_EQ_U64(last, 100);
    teardown();
}

TEST(embedded_nul_is_another_session)
{
    setup();
    struct engine_grant g;
    struct engine_change c;
    acq(0, "alice", "A", NULL);
    CHECK_EQ_I64(engine_acquire(E, T0, "alice\0x", 7, "B", 1, &g, &c),
                 ENGINE_OK);
    engine_finish(E, &c, true);
    CHECK_EQ_I64(engine_count(E), 2);
    teardown();
}

TEST(quarantine_holds_loaded_leases_for_a_ttl)
{
    setup();
    /* Stored before the restart: held by A, expired on disk already. */
    struct lease_row row = {"s", 1, "A", 1, 5, T0 - 10 * S};
    CHECK_EQ_I64(engine_load(E, &row), ENGINE_OK);
    struct lease_row released = {"r", 1, "", 0, 9, T0 - 10 * S};
    CHECK_EQ_I64(engine_load(E, &released), ENGINE_OK);
    struct engine_grant g;
    CHECK_EQ_I64(acq(0, "s", "B", NULL), ENGINE_HELD);
    CHECK_EQ_I64(acq(29, "s", "B", NULL), ENGINE_HELD);
    /* A released row is not quarantined, and its token goes on. */
    CHECK_EQ_I64(acq(0, "r", "B", &g), ENGINE_OK);
    CHECK_EQ_U64(g.token, 10);
    /* Quarantine over: the stale lease is free again. */
    CHECK_EQ_I64(acq(30, "s", "B", &g), ENGINE_OK);
    CHECK_EQ_U64(g.token, 6);
    teardown();
}

TEST(quarantined_owner_can_renew)
{
    setup();
    struct lease_row row = {"s", 1, "A", 1, 5, T0 - 10 * S};
    engine_load(E, &row);
    struct engine_grant g;
    CHECK_EQ_I64(ren(1, "s", "A", 5, &g), ENGINE_OK);
    CHECK_EQ_U64(g.token, 5);
    CHECK_EQ_I64(g.expiry_ns, T0 + 1 * S + TTL);
    CHECK_EQ_I64(acq(30, "s", "B", NULL), ENGINE_HELD); /* renewed */
    CHECK_EQ_I64(acq(31, "s", "B", &g), ENGINE_OK);
    CHECK_EQ_U64(g.token, 6);
    teardown();
}

TEST(undo_restores_every_kind_of_change)
{
    setup();
    struct engine_grant a, g;
    acq(0, "s", "A", &a);
    struct engine_change c[4];
    /* One batch: renew A, release A, B takes over, new session t. */
    CHECK_EQ_I64(engine_renew(E, T0 + S, "s", 1, "A", 1, a.token, &g, &c[0]),
                 ENGINE_OK);
    CHECK_EQ_I64(engine_release(E, "s", 1, "A", 1, a.token, &c[1]),
                 ENGINE_OK);
    CHECK_EQ_I64(engine_acquire(E, T0 + S, "s", 1, "B", 1, &g, &c[2]),
                 ENGINE_OK);
    CHECK_EQ_U64(g.token, a.token + 1);
    CHECK(c[2].durable && c[1].durable && !c[0].durable);
    CHECK_EQ_I64(engine_acquire(E, T0 + S, "t", 1, "B", 1, &g, &c[3]),
                 ENGINE_OK);
    CHECK(!c[3].has_before);
    for (int i = 3; i >= 0; i--)
        engine_finish(E, &c[i], false);
    engine_check(E);
    struct lease_row row;
    CHECK(engine_get(E, "s", 1, &row));
    CHECK_EQ_I64((int64_t)row.owner_len, 1);
    CHECK(memcmp(row.owner, "A", 1) == 0);
    CHECK_EQ_U64(row.token, a.token);
    CHECK_EQ_I64(row.expiry_ns, a.expiry_ns);
    CHECK(!engine_get(E, "t", 1, &row));
    CHECK_EQ_I64(acq(2, "s", "B", NULL), ENGINE_HELD);
    teardown();
}

TEST(collect_keeps_tokens_rising)
{
    setup();
    struct engine_grant a, b, g;
    acq(0, "rel", "A", &a);
    rel("rel", "A", a.token);
    acq(0, "exp", "A", &b);
    acq(0, "live", "A", NULL);
    struct engine_change c[64]; /* 64 * 16 buckets: all of them */
    /* Nothing before the quarantine ends (start + TTL). */
    CHECK_EQ_I64(engine_collect(E, T0 + 29 * S, c, 64), 0);
    /* At 31 s: the released one only ("exp" expired less than a TTL). */
    size_t n = engine_collect(E, T0 + 31 * S, c, 64);
    CHECK_EQ_I64(n, 1);
    CHECK(c[0].kind == ENGINE_DELETE);
    for (size_t i = 0; i < n; i++)
        engine_finish(E, &c[i], true);
    CHECK_EQ_U64(engine_floor(E), a.token);
    /* At 61 s "exp" and "live" (also expired by then) go. */
    n = engine_collect(E, T0 + 61 * S, c, 64);
    CHECK_EQ_I64(n, 2);
    for (size_t i = 0; i < n; i++)
        engine_finish(E, &c[i], true);
    CHECK_EQ_I64(engine_count(E), 0);
    CHECK_EQ_I64(acq(62, "rel", "B", &g), ENGINE_OK);
    CHECK(g.token > a.token);
    CHECK_EQ_I64(acq(62, "exp", "B", &g), ENGINE_OK);
    CHECK(g.token > b.token);
    teardown();
}

TEST(collect_undo_puts_entry_back)
{
    setup();
    struct engine_grant a;
    acq(0, "s", "A", &a);
    rel("s", "A", a.token);
    struct engine_change c[64];
    size_t n = engine_collect(E, T0 + 31 * S, c, 64);
    CHECK_EQ_I64(n, 1);
    CHECK_EQ_I64(engine_count(E), 0);
    for (size_t i = n; i-- > 0;)
        engine_finish(E, &c[i], false);
    CHECK_EQ_I64(engine_count(E), 1);
    struct lease_row row;
    CHECK(engine_get(E, "s", 1, &row));
    CHECK_EQ_U64(row.token, a.token);
    teardown();
}

TEST(many_sessions_grow_the_table)
{
    setup();
    char id[32];
    for (int i = 0; i < 5000; i++) {
        snprintf(id, sizeof(id), "session-%d", i);
        CHECK_EQ_I64(acq(0, id, "A", NULL), ENGINE_OK);
    }
    CHECK_EQ_I64(engine_count(E), 5000);
    for (int i = 0; i < 5000; i += 7) {
        snprintf(id, sizeof(id), "session-%d", i);
        CHECK_EQ_I64(acq(1, id, "B", NULL), ENGINE_HELD);
    }
    teardown();
}

/* Runs census passes of max buckets until one completes; returns its
 * count. */
static size_t census(int64_t t, size_t max)
{
    size_t live = 0, calls = 0;
    while (!engine_census(E, T0 + t * S, max, &live))
        CHECK(++calls < 100000);
    return live;
}

TEST(census_counts_live_leases_a_slice_at_a_time)
{
    setup();
    char name[32];
    for (int i = 0; i < 3000; i++) { /* the table grows on the way */
        snprintf(name, sizeof(name), "c%d", i);
        CHECK_EQ_I64(acq(0, name, "A", NULL), ENGINE_OK);
    }
    CHECK_EQ_I64(census(1, 100000), 3000);
    CHECK_EQ_I64(census(1, 7), 3000); /* in many small slices */
    struct engine_grant g;
    CHECK_EQ_I64(acq(0, "late", "B", &g), ENGINE_OK);
    CHECK_EQ_I64(rel("c0", "A", 1), ENGINE_OK);
    CHECK_EQ_I64(census(10, 64), 3000); /* one released, one added */
    CHECK_EQ_I64(acq(20, "later", "B", NULL), ENGINE_OK);
    /* At t=35 the first 3000 (expiring at 30) are over, "later" is not. */
    CHECK_EQ_I64(census(35, 1000), 1);
    teardown();
}

TEST(count_live_counts_at_once_and_leaves_the_census_alone)
{
    setup();
    char name[32];
    for (int i = 0; i < 3000; i++) {
        snprintf(name, sizeof(name), "c%d", i);
        CHECK_EQ_I64(acq(0, name, "A", NULL), ENGINE_OK);
    }
    CHECK_EQ_I64(rel("c0", "A", 1), ENGINE_OK);
    CHECK_EQ_I64(engine_count_live(E, T0 + 1 * S), 2999);
    /* A census pass under way, its first 16 buckets counted at t=1... */
    size_t live = 0;
    CHECK(!engine_census(E, T0 + 1 * S, 16, &live));
    CHECK_EQ_I64(engine_count_live(E, T0 + 35 * S), 0); /* all expired */
    /* ...goes on where it was: those buckets' leases, and none after. */
    size_t resumed = census(35, 100000);
    CHECK(resumed > 0 && resumed < 100);
    teardown();
}

/* One batch of the daemon's shape: every change of it is made at now,
 * then all are committed in order, or all undone in reverse order. */
struct batch {
    struct engine_change c[8];
    size_t n;
};

static void batch_acq(struct batch *b, int64_t t, const char *s,
                      const char *o)
{
    struct engine_grant g;
    if (engine_acquire(E, T0 + t * S, s, strlen(s), o, strlen(o), &g,
                       &b->c[b->n]) == ENGINE_OK)
        b->n++;
    engine_check(E); /* mid-batch: what holds at any moment */
}

static void batch_ren(struct batch *b, int64_t t, const char *s,
                      const char *o, uint64_t token)
{
    struct engine_grant g;
    if (engine_renew(E, T0 + t * S, s, strlen(s), o, strlen(o), token, &g,
                     &b->c[b->n]) == ENGINE_OK)
        b->n++;
    engine_check(E);
}

static void batch_rel(struct batch *b, const char *s, const char *o,
                      uint64_t token)
{
    if (engine_release(E, s, strlen(s), o, strlen(o), token, &b->c[b->n]) ==
        ENGINE_OK)
        b->n++;
    engine_check(E);
}

static void batch_end(struct batch *b, bool committed)
{
    for (size_t i = 0; i < b->n; i++)
        engine_finish(E, &b->c[committed ? i : b->n - 1 - i], committed);
    b->n = 0;
    engine_check_settled(E);
}

TEST(check_holds_between_batches_of_a_script)
{
    setup();
    /* Stored before a restart: a held lease and a tombstone. */
    struct lease_row held = {"q", 1, "Q", 1, 7, T0 - S};
    struct lease_row tomb = {"t", 1, "", 0, 4, T0 - S};
    CHECK_EQ_I64(engine_load(E, &held), ENGINE_OK);
    CHECK_EQ_I64(engine_load(E, &tomb), ENGINE_OK);
    engine_check_settled(E);

    struct batch b = {.n = 0};
    /* t=0: A takes s (1: floor + 1), B takes over the tombstone t (5),
     * Q renews its quarantined lease. */
    batch_acq(&b, 0, "s", "A");
    batch_acq(&b, 0, "t", "B");
    batch_ren(&b, 0, "q", "Q", 7);
    CHECK_EQ_I64(b.n, 3);
    batch_end(&b, true);
    CHECK_EQ_U64(engine_high_water(E), 7); /* q's, loaded */

    /* t=10: B releases t, C takes it over in the same batch; A renews.
     * The commit fails: all undone, the settled check still holds. */
    batch_rel(&b, "t", "B", 5);
    batch_acq(&b, 10, "t", "C");
    batch_ren(&b, 10, "s", "A", 1);
    CHECK_EQ_I64(b.n, 3);
    batch_end(&b, false);
    /* The same batch again, committed. */
    batch_rel(&b, "t", "B", 5);
    batch_acq(&b, 10, "t", "C");
    batch_ren(&b, 10, "s", "A", 1);
    batch_end(&b, true);
    CHECK_EQ_U64(engine_high_water(E), 7);

    /* t=45: s (expired at 40) goes to D (2); C releases t (6). */
    batch_acq(&b, 45, "s", "D");
    batch_rel(&b, "t", "C", 6);
    CHECK_EQ_I64(b.n, 2);
    batch_end(&b, true);

    /* t=110: collection, once undone, then committed: the tombstone t,
     * q (expired at 30) and s (at 75) go, and the floor takes their
     * highest token, q's 7. */
    struct engine_change c[64];
    size_t n = engine_collect(E, T0 + 110 * S, c, 64);
    CHECK_EQ_I64(n, 3);
    engine_check(E);
    for (size_t i = n; i-- > 0;)
        engine_finish(E, &c[i], false);
    engine_check_settled(E);
    CHECK_EQ_I64(engine_count(E), 3);
    n = engine_collect(E, T0 + 110 * S, c, 64);
    for (size_t i = 0; i < n; i++)
        engine_finish(E, &c[i], true);
    engine_check_settled(E);
    CHECK_EQ_I64(engine_count(E), 0);
    CHECK_EQ_U64(engine_floor(E), 7);

    /* t=111: a session with no entry starts above the floor. */
    batch_acq(&b, 111, "s", "E");
    batch_end(&b, true);
    struct lease_row row;
    CHECK(engine_get(E, "s", 1, &row));
    CHECK_EQ_U64(row.token, 8);
    CHECK_EQ_U64(engine_high_water(E), 8);
    teardown();
}

static bool aborted(int status)
{
    return WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT;
}

static void leave_a_change_unfinished(void)
{
    struct engine_change c;
    struct engine_grant g;
    engine_acquire(E, T0, "s", 1, "A", 1, &g, &c);
    engine_check(E); /* holds mid-batch */
    engine_check_settled(E); /* but this batch never ended */
}

/* A caller that writes through the session string engine_get() lends it
 * (const, and borrowed): the entry no longer hashes to its bucket. */
static void scribble_on_a_borrowed_session(void)
{
    acq(0, "session", "A", NULL);
    struct lease_row row;
    engine_get(E, "session", 7, &row);
    ((char *)row.session)[0] ^= 1;
    engine_check(E);
}

/* Storage handing over a held row with no token: no takeover makes one. */
static void load_a_held_row_with_token_zero(void)
{
    struct lease_row row = {"s", 1, "A", 1, 0, T0};
    engine_load(E, &row);
    engine_check(E);
}

TEST(check_catches_a_corrupted_engine)
{
    void (*cases[])(void) = {leave_a_change_unfinished,
                             scribble_on_a_borrowed_session,
                             load_a_held_row_with_token_zero};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        setup();
        CHECK(aborted(check_in_child(cases[i])));
        engine_check_settled(E); /* the child's harm stayed there */
        engine_destroy(E);
        E = NULL;
    }
}

/* Every expiry is told once, whole passes of the table at a time: past
 * its expiry and the quarantine, not before; again only after a change
 * extended or ended it; a change undone puts back its telling. */
TEST(expiries_are_told_once_until_extended)
{
    setup();
    struct engine_grant a, b;
    struct lease_row rows[8];
    acq(0, "s", "A", &a);
    acq(0, "t", "B", &b);
    CHECK_EQ_I64(engine_expiries(E, T0 + 29 * S, 1, rows, 8), 0);
    CHECK_EQ_I64(engine_expiries(E, T0 + 30 * S, 1, rows, 8), 2);
    CHECK(engine_told(E, "s", 1) && engine_told(E, "t", 1));
    CHECK_EQ_I64(engine_expiries(E, T0 + 31 * S, 1, rows, 8), 0);
    /* A reclaim says it was told, and untells; undone, told again. */
    struct engine_change c;
    struct engine_grant g;
    CHECK_EQ_I64(engine_renew(E, T0 + 32 * S, "s", 1, "A", 1, a.token, &g, &c),
                 ENGINE_OK);
    CHECK(c.was_told && !engine_told(E, "s", 1));
    engine_finish(E, &c, false);
    CHECK(engine_told(E, "s", 1));
    CHECK_EQ_I64(ren(32, "s", "A", a.token, NULL), ENGINE_OK);
    CHECK(!engine_told(E, "s", 1));
    CHECK_EQ_I64(engine_expiries(E, T0 + 61 * S, 1, rows, 8), 0);
    CHECK_EQ_I64(engine_expiries(E, T0 + 62 * S, 1, rows, 8), 1);
    CHECK(rows[0].session_len == 1 && rows[0].session[0] == 's');
    /* Set from outside (the stored events), for the token it names. */
    engine_set_told(E, "s", 1, a.token + 1, false);
    CHECK(engine_told(E, "s", 1));
    engine_set_told(E, "s", 1, a.token, false);
    CHECK(!engine_told(E, "s", 1));
    teardown();
}

/* A loaded lease is not told before the quarantine ends; max bounds a
 * call, and the next one goes on. */
TEST(expiries_wait_for_the_quarantine_and_come_max_at_a_time)
{
    setup();
    struct lease_row l1 = {"a", 1, "A", 1, 3, T0 - 100 * S};
    struct lease_row l2 = {"b", 1, "B", 1, 4, T0 - 100 * S};
    CHECK_EQ_I64(engine_load(E, &l1), ENGINE_OK);
    CHECK_EQ_I64(engine_load(E, &l2), ENGINE_OK);
    struct lease_row rows[1];
    CHECK_EQ_I64(engine_expiries(E, T0 + 29 * S, 1, rows, 1), 0);
    CHECK_EQ_I64(engine_expiries(E, T0 + 30 * S, 1, rows, 1), 1);
    CHECK_EQ_I64(engine_expiries(E, T0 + 30 * S, 1, rows, 1), 1);
    CHECK_EQ_I64(engine_expiries(E, T0 + 30 * S, 1, rows, 1), 0);
    teardown();
}

CHECK_MAIN(first_takeover_gets_token_one, expiries_are_told_once_until_extended,
           expiries_wait_for_the_quarantine_and_come_max_at_a_time,
           count_live_counts_at_once_and_leaves_the_census_alone,
           other_owner_held_until_expiry, same_owner_reacquire_keeps_token,
           renew_keeps_token_and_moves_expiry_strictly,
           renew_reclaims_expired_lease_nobody_took,
           renew_after_takeover_or_release_is_lost,
           release_needs_owner_and_token,
           revoke_frees_any_holder_and_the_next_token_is_greater,
           takeover_chain_tokens_rise, embedded_nul_is_another_session,
           quarantine_holds_loaded_leases_for_a_ttl,
           quarantined_owner_can_renew, undo_restores_every_kind_of_change,
           collect_keeps_tokens_rising, collect_undo_puts_entry_back,
           many_sessions_grow_the_table,
           census_counts_live_leases_a_slice_at_a_time,
           check_holds_between_batches_of_a_script,
           check_catches_a_corrupted_engine)
