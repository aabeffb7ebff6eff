/* The shared mode (daemon/mode_shared.c) alone, on a real libuv loop,
 * over the fake database (fake_pg.h), whose batches the test answers,
 * fails and loses, whose connections it breaks, and whose blocking calls
 * it holds and fails: the pipelines, the per-session order, health and
 * reconnection of mode_shared.c's design note.
 *
 * Every reply is checked as it arrives (on_reply): a lease call's
 * answer other than UNAVAILABLE, and an OK Revoke, must stand on a
 * decision of its own in a transaction the fake committed before the
 * reply; nothing is answered twice, nor after close. Every case also
 * checks, at its end, that each request it submitted was answered, that
 * the mode closed every connection once, that it kept postgres.h's
 * rules of use and that no call outwaited its gate.
 *
 * tests/meson.build also builds this file against broken copies of
 * mode_shared.c (negative controls), and expects named cases to fail. */
#include <stdlib.h>
#include <uv.h>

#include "check.h"
#include "fake_pg.h"
#include "metrics.h"
#include "mode.h"
#include "mode_harness.h"
#include "postgres.h"
#include "request.h"

#define MS INT64_C(1000000)
#define LONG_TTL_NS (60000 * MS) /* outlives every case */
#define MAX_REPLIES 256

struct harness {
    struct mode_loop ml;
    struct fake_pg *fake;
    size_t nconns;
    struct mode *srv;
    struct request *submitted[MAX_REPLIES];
    size_t nsubmitted;
    struct request *replied[MAX_REPLIES]; /* in the order of the replies */
    size_t storage_seen[MAX_REPLIES];     /* nstorage as each came */
    size_t nreplied;
    bool storage[16]; /* what the storage hook said, in order */
    size_t nstorage;
    size_t wanted;    /* what the wanted hook said last */
    size_t nwanted;
    bool closing;
    int nclosed;
    size_t replied_at_close;
};

static struct harness *h;

static bool answered(const struct request *r)
{
    for (size_t i = 0; i < h->nreplied; i++)
        if (h->replied[i] == r)
            return true;
    return false;
}

/* How many times the storage hook had spoken when r was answered. */
static size_t storage_seen(const struct request *r)
{
    for (size_t i = 0; i < h->nreplied; i++)
        if (h->replied[i] == r)
            return h->storage_seen[i];
    return SIZE_MAX;
}

static enum rules_op rules_op_of(enum request_op op)
{
    return op == OP_ACQUIRE ? RULES_ACQUIRE
           : op == OP_RENEW ? RULES_RENEW
                            : RULES_RELEASE;
}

/* The rule's outcome a lease call's reply says. */
static int code_of(const struct request *r)
{
    if (r->status == REPLY_HELD)
        return r->op == OP_ACQUIRE ? RULES_HELD : RULES_LOST;
    if (r->op == OP_RELEASE && r->change != CHANGE_RELEASE)
        return RULES_NOOP;
    return RULES_OK;
}

static void on_reply(void *arg, struct request *r)
{
    struct harness *hh = arg;
    CHECK(!answered(r));
    CHECK(hh->nclosed == 0);
    if (hh->nreplied < MAX_REPLIES) {
        hh->storage_seen[hh->nreplied] = hh->nstorage;
        hh->replied[hh->nreplied++] = r;
    }
    if (!request_is_admin(r->op) && r->status != REPLY_UNAVAILABLE) {
        /* Never before the transaction that decided it committed. */
        CHECK(r->status == REPLY_OK || r->status == REPLY_HELD);
        bool claimed = fake_pg_claim(hh->fake, rules_op_of(r->op),
                                     r->session, r->owner, r->token,
                                     code_of(r), r->grant_token,
                                     r->grant_expiry_ns);
        if (!claimed)
            fprintf(stderr,
                    "a reply (op %d, %s, %s, status %d, token %llu) that "
                    "no committed decision stands behind\n",
                    (int)r->op, r->session, r->owner, (int)r->status,
                    (unsigned long long)r->grant_token);
        CHECK(claimed);
    }
    if (r->op == OP_REVOKE && r->change == CHANGE_REVOKE) {
        CHECK(r->admin != NULL && r->admin->n == 1);
        if (r->admin != NULL && r->admin->n == 1)
            CHECK(fake_pg_claim(hh->fake, RULES_REVOKE, r->session, "",
                                r->token, RULES_OK,
                                r->admin->leases[0].token,
                                r->admin->leases[0].expiry_ns));
    }
}

static void on_storage(void *arg, bool ok)
{
    struct harness *hh = arg;
    if (hh->nstorage < sizeof(hh->storage) / sizeof(hh->storage[0]))
        hh->storage[hh->nstorage++] = ok;
}

static void on_wanted(void *arg, size_t at)
{
    struct harness *hh = arg;
    hh->wanted = at;
    hh->nwanted++;
}

static void on_fatal(void *arg, const char *why)
{
    CHECK(!"the shared mode has no fatal error");
}

static void on_closed(void *arg)
{
    struct harness *hh = arg;
    hh->nclosed++;
    hh->replied_at_close = hh->nreplied;
}

/* Runs the loop until cond holds, for mode_wait_ms() at most (then
 * fails). */
#define RUN_UNTIL(cond) MODE_RUN_UNTIL(&h->ml, cond)

static bool all_on_loop(void)
{
    for (size_t i = 0; i < h->nconns; i++)
        if (!fake_pg_on_loop(h->fake, i))
            return false;
    return true;
}

/* A loop, a fake database and the mode over nconns connections to it;
 * returns once the mode's first garbage collection (at its first tick)
 * is over, so that every connection is idle. */
static void begin_case(size_t nconns)
{
    h = calloc(1, sizeof(*h));
    if (h == NULL)
        abort();
    mode_loop_init(&h->ml);
    h->fake = fake_pg_create(LONG_TTL_NS, mode_loop_wake, &h->ml);
    if (h->fake == NULL)
        abort();
    struct pgstore *dbs[MODE_MAX_CONNECTIONS];
    for (size_t i = 0; i < nconns; i++)
        if ((dbs[i] = fake_pg_open(h->fake)) == NULL)
            abort();
    h->nconns = nconns;
    struct mode_hooks hooks = {on_reply, on_storage, on_wanted,
                               on_fatal, h,          NULL};
    h->srv =
        mode_shared_create(&h->ml.loop, dbs, nconns, NULL, LONG_TTL_NS, &hooks);
    if (h->srv == NULL)
        abort();
    /* A fixed key instead of a random one, so that which sessions share
     * an order counter (and wait for each other) is the same in every
     * run: none of the cases' sessions do (distinct_slots). */
    h->srv->order_key = (struct siphash_key){1, 2};
    RUN_UNTIL(fake_pg_returned(h->fake, FAKE_PG_COLLECT) == 1 &&
              all_on_loop());
    CHECK_EQ_U64(h->nstorage, 0); /* serving from the start */
}

/* Closes the mode and the loop, and checks what every case must hold. */
static void end_case(void)
{
    for (int c = 0; c < FAKE_PG_NCALLS; c++) {
        fake_pg_release(h->fake, (enum fake_pg_call)c);
        fake_pg_fail(h->fake, (enum fake_pg_call)c, STORE_OK, 0);
    }
    fake_pg_hold_batches(h->fake, false);
    /* Closing waits for what is in flight; nothing may be queued. */
    RUN_UNTIL(h->nreplied == h->nsubmitted);
    if (!h->closing) {
        h->closing = true;
        mode_close(h->srv, on_closed, h);
    }
    RUN_UNTIL(h->nclosed > 0);
    mode_loop_close(&h->ml);
    CHECK_EQ_I64(h->nclosed, 1);
    /* Every request answered, once (on_reply checks once). */
    size_t unanswered = 0;
    for (size_t i = 0; i < h->nsubmitted; i++)
        unanswered += !answered(h->submitted[i]);
    CHECK_EQ_U64(unanswered, 0);
    CHECK_EQ_U64(h->nreplied, h->nsubmitted);
    CHECK_EQ_U64(fake_pg_closed(h->fake), h->nconns);
    char why[256];
    unsigned misuses = fake_pg_misuses(h->fake, why, sizeof(why));
    if (misuses > 0)
        fprintf(stderr, "postgres.h misused: %s\n", why);
    CHECK_EQ_U64(misuses, 0);
    CHECK_EQ_U64(fake_pg_timeouts(h->fake), 0);
    for (size_t i = 0; i < h->nreplied; i++) {
        admin_result_free(h->replied[i]->admin);
        h->replied[i]->admin = NULL;
    }
    fake_pg_destroy(h->fake);
    free(h);
    h = NULL;
}

static void admin_req(struct request *r, enum request_op op,
                      const char *session, uint64_t token)
{
    lease_req(r, op, session, "", token);
}

static void submit(struct request **rs, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        rs[i]->next = i + 1 < n ? rs[i + 1] : NULL;
        if (h->nsubmitted == MAX_REPLIES)
            abort();
        h->submitted[h->nsubmitted++] = rs[i];
    }
    mode_harness_submit(h->srv, rs, n, on_reply, h);
}

/* Submits its arguments (struct request *) as one list. */
#define SUBMIT(...)                                                        \
    submit((struct request *[]){__VA_ARGS__},                              \
           sizeof((struct request *[]){__VA_ARGS__}) /                     \
               sizeof(struct request *))

/* Whether the sessions' calls have order counters of their own. */
static bool distinct_slots(const char *const *sessions, size_t n)
{
    uint32_t slots[16];
    for (size_t i = 0; i < n && i < 16; i++) {
        struct request r;
        lease_req(&r, OP_ACQUIRE, sessions[i], "o", 0);
        mode_order_slot(h->srv, &r);
        slots[i] = r.order_slot;
        for (size_t j = 0; j < i; j++)
            if (slots[j] == slots[i])
                return false;
    }
    return true;
}

static size_t sent(size_t conn, size_t *sizes, size_t max)
{
    return fake_pg_sent(h->fake, conn, sizes, max);
}

/* --- The normal path ------------------------------------------------- */

/* A takeover is answered only once the transaction of its batch has
 * committed, with the database's token and expiry; a refusal too. */
TEST(takeover_answered_only_after_its_batch_committed)
{
    begin_case(1);
    fake_pg_hold_batches(h->fake, true);
    struct request a, b;
    acquire(&a, "s1", "alice");
    SUBMIT(&a);
    RUN_UNTIL(fake_pg_waiting(h->fake, 0) == 1);
    acquire(&b, "s1", "bob");
    SUBMIT(&b); /* a second batch, behind the first */
    RUN_UNTIL(fake_pg_waiting(h->fake, 0) == 2);
    CHECK(!answered(&a));
    CHECK(!answered(&b));
    CHECK_EQ_U64(fake_pg_commits(h->fake), 0);
    CHECK_EQ_U64(fake_pg_answer(h->fake, 0, 1), 1);
    RUN_UNTIL(answered(&a));
    CHECK(!answered(&b)); /* its batch waits at the database */
    CHECK_EQ_I64(a.status, REPLY_OK);
    CHECK_EQ_U64(a.grant_token, 1);
    CHECK_EQ_I64(a.grant_expiry_ns, INT64_C(1000000000000) + LONG_TTL_NS);
    CHECK_EQ_I64(a.change, CHANGE_TAKEOVER);
    CHECK_EQ_U64(fake_pg_answer(h->fake, 0, 1), 1);
    RUN_UNTIL(answered(&b));
    CHECK_EQ_I64(b.status, REPLY_HELD);
    end_case();
}

/* Calls of one session are decided in the order they arrived: while a
 * batch with alice's takeover of s1 is in flight on connection 0 (whose
 * pipeline is full) and connection 1 is free, her release and bob's
 * takeover of s1 wait, while carol's call on another session goes on
 * connection 1 at once; they are decided after alice's takeover. */
TEST(one_session_decided_in_arrival_order_across_connections)
{
    begin_case(2);
    CHECK(distinct_slots((const char *[]){"s1", "s2", "s3"}, 3));
    fake_pg_hold_batches(h->fake, true);
    struct request a, x, rel, b, c;
    acquire(&a, "s1", "alice");
    SUBMIT(&a);
    acquire(&x, "s3", "xavier");
    SUBMIT(&x);
    CHECK_EQ_U64(fake_pg_waiting(h->fake, 0), 2); /* pipeline full */
    lease_req(&rel, OP_RELEASE, "s1", "alice", 1);
    acquire(&b, "s1", "bob");
    acquire(&c, "s2", "carol");
    SUBMIT(&rel, &b, &c);
    size_t sizes[8];
    CHECK_EQ_U64(sent(1, sizes, 8), 1);
    CHECK_EQ_U64(sizes[0], 1); /* carol's alone */
    /* The free connection answers first: s1's calls still wait. */
    CHECK_EQ_U64(fake_pg_answer(h->fake, 1, 1), 1);
    RUN_UNTIL(answered(&c));
    CHECK_EQ_I64(c.status, REPLY_OK);
    struct fake_pg_decision d[8];
    CHECK_EQ_U64(fake_pg_decisions(h->fake, "s1", d, 8), 0);
    CHECK(!answered(&rel));
    CHECK(!answered(&b));
    CHECK_EQ_U64(fake_pg_answer(h->fake, 0, 1), 1);
    RUN_UNTIL(answered(&a));
    fake_pg_hold_batches(h->fake, false);
    RUN_UNTIL(answered(&rel) && answered(&b) && answered(&x));
    size_t n = fake_pg_decisions(h->fake, "s1", d, 8);
    CHECK_EQ_U64(n, 3);
    if (n == 3) {
        CHECK(d[0].op == RULES_ACQUIRE && strcmp(d[0].owner, "alice") == 0);
        CHECK(d[1].op == RULES_RELEASE && d[1].code == RULES_OK);
        CHECK(d[2].op == RULES_ACQUIRE && strcmp(d[2].owner, "bob") == 0);
    }
    CHECK_EQ_I64(a.status, REPLY_OK);
    CHECK_EQ_U64(a.grant_token, 1);
    CHECK_EQ_I64(rel.change, CHANGE_RELEASE);
    CHECK_EQ_I64(b.status, REPLY_OK);
    CHECK_EQ_U64(b.grant_token, 2);
    end_case();
}

/* The database's clock decides expiry: once alice's lease has run out
 * on it, bob takes s1 over (token 2, an expiry from the database's now),
 * and the mode counts what the database said it did: a takeover that
 * ended an expired lease; alice's renewal is then refused. The minute
 * the database's clock jumped between two batches on one connection is
 * counted as a step of its host's clock. */
TEST(expiry_is_decided_on_the_database_clock)
{
    begin_case(1);
    struct request a, b, r;
    acquire(&a, "s1", "alice");
    SUBMIT(&a);
    RUN_UNTIL(answered(&a));
    CHECK_EQ_I64(a.status, REPLY_OK);
    int64_t later = a.grant_expiry_ns + 1;
    fake_pg_set_now(h->fake, later);
    uint64_t takeovers = atomic_load(&metrics.takeovers);
    uint64_t expiries = atomic_load(&metrics.expiries);
    uint64_t steps = atomic_load(&metrics.pg_clock_steps);
    acquire(&b, "s1", "bob");
    SUBMIT(&b);
    RUN_UNTIL(answered(&b));
    CHECK_EQ_I64(b.status, REPLY_OK);
    CHECK_EQ_U64(b.grant_token, 2);
    CHECK_EQ_I64(b.grant_expiry_ns, later + LONG_TTL_NS);
    CHECK_EQ_U64(atomic_load(&metrics.takeovers), takeovers + 1);
    CHECK_EQ_U64(atomic_load(&metrics.expiries), expiries + 1);
    CHECK_EQ_U64(atomic_load(&metrics.pg_clock_steps), steps + 1);
    lease_req(&r, OP_RENEW, "s1", "alice", 1);
    SUBMIT(&r);
    RUN_UNTIL(answered(&r));
    CHECK_EQ_I64(r.status, REPLY_HELD);
    end_case();
}

/* A connection whose socket is full keeps what was sent until it is
 * writable: the batch reaches the database only then. */
TEST(a_full_socket_sends_once_writable)
{
    begin_case(1);
    fake_pg_set_full(h->fake, 0, true);
    struct request a;
    acquire(&a, "s1", "alice");
    SUBMIT(&a);
    CHECK_EQ_U64(fake_pg_in_flight(h->fake, 0), 1);
    CHECK_EQ_U64(fake_pg_waiting(h->fake, 0), 0); /* not at the database */
    CHECK_EQ_U64(fake_pg_commits(h->fake), 0);
    fake_pg_set_full(h->fake, 0, false);
    RUN_UNTIL(answered(&a));
    CHECK_EQ_I64(a.status, REPLY_OK);
    end_case();
}

/* --- Failures -------------------------------------------------------- */

/* The connection breaks with two batches in flight: both are answered
 * UNAVAILABLE (the fake never committed them); the idle connection is
 * closed too, and with none up health turns NOT_SERVING, before those
 * answers (a caller told UNAVAILABLE reads NOT_SERVING); calls that
 * arrive meanwhile are answered at once, UNAVAILABLE, but Stats, which
 * says storage is failing; the mode keeps reconnecting, and once the
 * database is back serves again. */
TEST(lost_connection_refuses_and_reconnects)
{
    begin_case(2);
    fake_pg_hold_batches(h->fake, true);
    struct request a1, a2, c, st, d;
    acquire(&a1, "s1", "alice");
    SUBMIT(&a1);
    acquire(&a2, "s2", "alice");
    SUBMIT(&a2);
    CHECK_EQ_U64(fake_pg_waiting(h->fake, 0), 2);
    fake_pg_fail(h->fake, FAKE_PG_CONNECT, STORE_EDOWN, 0);
    fake_pg_break(h->fake, 0);
    RUN_UNTIL(answered(&a1) && answered(&a2));
    CHECK_EQ_I64(a1.status, REPLY_UNAVAILABLE);
    CHECK_EQ_I64(a2.status, REPLY_UNAVAILABLE);
    CHECK_EQ_U64(fake_pg_commits(h->fake), 0);
    CHECK_EQ_U64(h->nstorage, 1);
    CHECK(!h->storage[0]);
    CHECK_EQ_U64(storage_seen(&a1), 1);
    CHECK_EQ_U64(storage_seen(&a2), 1);
    CHECK(!fake_pg_connected(h->fake, 1)); /* most likely lost too */
    acquire(&c, "s3", "carol");
    admin_req(&st, OP_STATS, "", 0);
    SUBMIT(&c, &st);
    CHECK(answered(&c)); /* within mode_submit */
    CHECK(answered(&st));
    CHECK_EQ_I64(c.status, REPLY_UNAVAILABLE);
    CHECK_EQ_I64(st.status, REPLY_OK);
    CHECK(st.admin != NULL && st.admin->stats.storage_failing);
    CHECK_EQ_I64(h->wanted, 1); /* each call wakes the loop, to be refused */
    /* It keeps trying, with a backoff. */
    unsigned tried = fake_pg_returned(h->fake, FAKE_PG_CONNECT);
    RUN_UNTIL(fake_pg_returned(h->fake, FAKE_PG_CONNECT) >= tried + 4);
    CHECK_EQ_U64(h->nstorage, 1);
    fake_pg_fail(h->fake, FAKE_PG_CONNECT, STORE_OK, 0);
    RUN_UNTIL(h->nstorage == 2);
    CHECK(h->storage[1]);
    fake_pg_hold_batches(h->fake, false);
    acquire(&d, "s1", "dave");
    SUBMIT(&d);
    RUN_UNTIL(answered(&d));
    CHECK_EQ_I64(d.status, REPLY_OK);
    CHECK_EQ_U64(d.grant_token, 1); /* alice's was never committed */
    end_case();
}

/* On two connections: an Acquire a in a batch held on the first, and a
 * Get g in a job held on the second. */
static void batch_and_job_in_flight(struct request *a, struct request *g)
{
    fake_pg_hold_batches(h->fake, true);
    fake_pg_hold(h->fake, FAKE_PG_GET);
    acquire(a, "s1", "alice");
    SUBMIT(a);
    admin_req(g, OP_GET, "s1", 0);
    SUBMIT(g);
    RUN_UNTIL(fake_pg_waiting_calls(h->fake, FAKE_PG_GET) == 1);
    CHECK_EQ_U64(fake_pg_waiting(h->fake, 0), 1);
}

/* A connection breaks with a batch in flight while the other's is with a
 * job (a Get): that one is most likely lost too, so health turns
 * NOT_SERVING before the batch is answered; once the job is back, having
 * worked, the connection counts again and health SERVING. */
TEST(a_connection_in_a_job_is_doubted_after_another_is_lost)
{
    begin_case(2);
    struct request a, g;
    batch_and_job_in_flight(&a, &g);
    fake_pg_fail(h->fake, FAKE_PG_CONNECT, STORE_EDOWN, 0);
    fake_pg_break(h->fake, 0);
    RUN_UNTIL(answered(&a));
    CHECK_EQ_I64(a.status, REPLY_UNAVAILABLE);
    CHECK(h->nstorage == 1 && !h->storage[0]);
    CHECK_EQ_U64(storage_seen(&a), 1);
    CHECK(!answered(&g));
    fake_pg_release(h->fake, FAKE_PG_GET);
    RUN_UNTIL(answered(&g));
    CHECK_EQ_I64(g.status, REPLY_NOT_FOUND); /* the job worked */
    RUN_UNTIL(h->nstorage == 2);
    CHECK(h->storage[1]);
    end_case();
}

/* The same with batches: the first connection breaks with two batches in
 * flight while the second has one; health turns NOT_SERVING before the
 * first two are answered, and SERVING again once the second connection
 * answers its batch. */
TEST(a_connection_with_batches_is_doubted_after_another_is_lost)
{
    begin_case(2);
    CHECK(distinct_slots((const char *[]){"s1", "s2", "s3"}, 3));
    fake_pg_hold_batches(h->fake, true);
    struct request a, x, c;
    acquire(&a, "s1", "alice");
    SUBMIT(&a);
    acquire(&x, "s3", "xavier");
    SUBMIT(&x);
    CHECK_EQ_U64(fake_pg_waiting(h->fake, 0), 2); /* pipeline full */
    acquire(&c, "s2", "carol");
    SUBMIT(&c);
    CHECK_EQ_U64(fake_pg_waiting(h->fake, 1), 1);
    fake_pg_fail(h->fake, FAKE_PG_CONNECT, STORE_EDOWN, 0);
    fake_pg_break(h->fake, 0);
    RUN_UNTIL(answered(&a) && answered(&x));
    CHECK_EQ_I64(a.status, REPLY_UNAVAILABLE);
    CHECK_EQ_I64(x.status, REPLY_UNAVAILABLE);
    CHECK(h->nstorage == 1 && !h->storage[0]);
    CHECK_EQ_U64(storage_seen(&a), 1);
    CHECK(!answered(&c));
    CHECK_EQ_U64(fake_pg_answer(h->fake, 1, 1), 1);
    RUN_UNTIL(answered(&c));
    CHECK_EQ_I64(c.status, REPLY_OK);
    CHECK(h->nstorage == 2 && h->storage[1]);
    end_case();
}

/* A batch that fails (nothing applied, the connection good) answers its
 * own calls UNAVAILABLE; the batch behind it in the pipeline is decided
 * as usual, health never changes, and a retry then succeeds. */
TEST(failed_batch_answers_only_its_calls)
{
    begin_case(1);
    fake_pg_hold_batches(h->fake, true);
    struct request a, b, a2;
    acquire(&a, "s1", "alice");
    SUBMIT(&a);
    acquire(&b, "s2", "bob");
    SUBMIT(&b);
    CHECK_EQ_U64(fake_pg_waiting(h->fake, 0), 2);
    fake_pg_fail_batches(h->fake, 0, 1);
    CHECK_EQ_U64(fake_pg_answer(h->fake, 0, 1), 1);
    RUN_UNTIL(answered(&a));
    CHECK_EQ_I64(a.status, REPLY_UNAVAILABLE);
    CHECK(!answered(&b));
    CHECK(fake_pg_connected(h->fake, 0));
    CHECK_EQ_U64(fake_pg_answer(h->fake, 0, 1), 1);
    RUN_UNTIL(answered(&b));
    CHECK_EQ_I64(b.status, REPLY_OK);
    CHECK_EQ_U64(b.grant_token, 1);
    fake_pg_hold_batches(h->fake, false);
    acquire(&a2, "s1", "alice");
    SUBMIT(&a2);
    RUN_UNTIL(answered(&a2));
    CHECK_EQ_I64(a2.status, REPLY_OK);
    CHECK_EQ_U64(a2.grant_token, 1);
    char hist[64];
    fake_pg_history(h->fake, 0, hist, sizeof(hist));
    CHECK_STR(hist, "CSFBB"); /* the collection (and its stats) first */
    CHECK_EQ_U64(h->nstorage, 0);
    end_case();
}

/* An admin call that fails is answered UNAVAILABLE; a lost connection
 * during one counts as lost as a batch's does, and is made again. */
TEST(failed_admin_call_is_unavailable)
{
    begin_case(1);
    struct request g, g2;
    fake_pg_fail(h->fake, FAKE_PG_GET, STORE_EFAIL, 1);
    admin_req(&g, OP_GET, "s1", 0);
    SUBMIT(&g);
    RUN_UNTIL(answered(&g));
    CHECK_EQ_I64(g.status, REPLY_UNAVAILABLE);
    CHECK(fake_pg_connected(h->fake, 0));
    fake_pg_break(h->fake, 0);
    fake_pg_hold(h->fake, FAKE_PG_CONNECT);
    admin_req(&g2, OP_GET, "s1", 0);
    SUBMIT(&g2);
    RUN_UNTIL(answered(&g2));
    CHECK_EQ_I64(g2.status, REPLY_UNAVAILABLE);
    RUN_UNTIL(fake_pg_waiting_calls(h->fake, FAKE_PG_CONNECT) == 1);
    CHECK(h->nstorage == 1 && !h->storage[0]);
    fake_pg_release(h->fake, FAKE_PG_CONNECT);
    RUN_UNTIL(h->nstorage == 2);
    CHECK(h->storage[1]);
    end_case();
}

/* --- Admin calls and batches ----------------------------------------- */

/* A steady stream of lease calls on one connection, and Get, Stats and
 * Revoke waiting: each admin call gets the connection once its pipeline
 * drains, then a batch goes before the next one; neither starves. */
TEST(admin_calls_take_turns_with_a_stream_of_batches)
{
    enum { STREAM = 12 };
    begin_case(1);
    fake_pg_hold_batches(h->fake, true);
    struct request l[STREAM], g, st, v;
    char names[STREAM][8];
    for (size_t i = 0; i < STREAM; i++) {
        snprintf(names[i], sizeof(names[i]), "q%zu", i);
        acquire(&l[i], names[i], "owner");
    }
    SUBMIT(&l[0]);
    SUBMIT(&l[1]);
    CHECK_EQ_U64(fake_pg_waiting(h->fake, 0), 2);
    admin_req(&g, OP_GET, "q0", 0);
    admin_req(&st, OP_STATS, "", 0);
    admin_req(&v, OP_REVOKE, "q1", 0);
    SUBMIT(&g, &st, &v);
    size_t next = 2;
    for (int round = 0; round < 8 && !answered(&v); round++) {
        SUBMIT(&l[next]); /* the stream goes on */
        next++;
        RUN_UNTIL(fake_pg_waiting(h->fake, 0) >= 1);
        CHECK_EQ_U64(fake_pg_answer(h->fake, 0, 1), 1);
    }
    RUN_UNTIL(answered(&g) && answered(&st) && answered(&v));
    char hist[64];
    fake_pg_history(h->fake, 0, hist, sizeof(hist));
    /* The first collection (and its stats), the two batches in flight,
     * then each admin call with a batch after it. */
    CHECK(strncmp(hist, "CSBBGBSBR", 9) == 0);
    if (strncmp(hist, "CSBBGBSBR", 9) != 0)
        fprintf(stderr, "history: %s\n", hist);
    CHECK_EQ_I64(g.status, REPLY_OK);
    CHECK(g.admin != NULL && g.admin->n == 1 &&
          g.admin->leases[0].token == 1);
    CHECK_EQ_I64(st.status, REPLY_OK);
    CHECK(st.admin != NULL && !st.admin->stats.storage_failing &&
          st.admin->stats.live_leases >= 2);
    CHECK_EQ_I64(v.status, REPLY_OK);
    CHECK_EQ_I64(v.change, CHANGE_REVOKE);
    fake_pg_hold_batches(h->fake, false);
    while (next < STREAM) {
        SUBMIT(&l[next]);
        next++;
    }
    RUN_UNTIL(h->nreplied == h->nsubmitted);
    for (size_t i = 0; i < STREAM; i++)
        CHECK_EQ_I64(l[i].status, REPLY_OK);
    end_case();
}

/* The wanted hook: 1 while a connection is idle; with a batch in flight
 * on the freest one, that batch's size; 0 once every pipeline is full. */
TEST(wanted_follows_the_pipelines)
{
    begin_case(2);
    CHECK(distinct_slots(
        (const char *[]){"s1", "s2", "s3", "s4", "s5", "s6"}, 6));
    CHECK_EQ_U64(h->wanted, 1);
    fake_pg_hold_batches(h->fake, true);
    struct request a, b, c[3], d;
    acquire(&a, "s1", "alice");
    SUBMIT(&a);
    acquire(&b, "s2", "bob");
    SUBMIT(&b);
    CHECK_EQ_U64(fake_pg_waiting(h->fake, 0), 2);
    CHECK_EQ_U64(h->wanted, 1); /* connection 1 is idle */
    acquire(&c[0], "s3", "carol");
    acquire(&c[1], "s4", "carol");
    acquire(&c[2], "s5", "carol");
    SUBMIT(&c[0], &c[1], &c[2]);
    CHECK_EQ_U64(fake_pg_waiting(h->fake, 1), 1);
    CHECK_EQ_U64(h->wanted, 3);
    acquire(&d, "s6", "dave");
    SUBMIT(&d);
    CHECK_EQ_U64(fake_pg_waiting(h->fake, 1), 2);
    CHECK_EQ_U64(h->wanted, 0); /* every pipeline full */
    fake_pg_hold_batches(h->fake, false);
    RUN_UNTIL(h->nreplied == 6);
    CHECK_EQ_U64(h->wanted, 1);
    end_case();
}

/* --- Closing --------------------------------------------------------- */

/* Closing waits for a batch in flight on one connection and a Get held
 * on the other; both are answered, and only then are the connections
 * closed and done called, once. */
TEST(close_waits_for_batches_and_jobs_in_flight)
{
    begin_case(2);
    struct request a, g;
    batch_and_job_in_flight(&a, &g);
    h->closing = true;
    mode_close(h->srv, on_closed, h);
    CHECK_EQ_U64(fake_pg_answer(h->fake, 0, 1), 1);
    RUN_UNTIL(answered(&a));
    CHECK_EQ_I64(a.status, REPLY_OK);
    CHECK_EQ_I64(h->nclosed, 0);
    CHECK_EQ_U64(fake_pg_closed(h->fake), 0);
    fake_pg_release(h->fake, FAKE_PG_GET);
    RUN_UNTIL(h->nclosed > 0);
    CHECK_EQ_U64(h->replied_at_close, 2);
    CHECK(answered(&g));
    CHECK_EQ_U64(fake_pg_closed(h->fake), 2);
    end_case();
}

CHECK_MAIN(takeover_answered_only_after_its_batch_committed,
           one_session_decided_in_arrival_order_across_connections,
           expiry_is_decided_on_the_database_clock,
           a_full_socket_sends_once_writable,
           lost_connection_refuses_and_reconnects,
           a_connection_in_a_job_is_doubted_after_another_is_lost,
           a_connection_with_batches_is_doubted_after_another_is_lost,
           failed_batch_answers_only_its_calls,
           failed_admin_call_is_unavailable,
           admin_calls_take_turns_with_a_stream_of_batches,
           wanted_follows_the_pipelines,
           close_waits_for_batches_and_jobs_in_flight)
