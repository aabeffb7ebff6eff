/* The embedded mode (daemon/mode_embedded.c) alone, on a real libuv
 * loop, over the fake store (fake_store.h) whose commits and syncs the
 * test holds, lets go and fails: the commit/fsync pipeline of
 * mode_embedded.c's design note.
 *
 * Every reply is checked as it arrives (on_reply): an OK Acquire or
 * Renew must stand on a takeover (owner and token) committed and synced; nothing is answered twice; nothing after a fatal sync error.
 * Every case also checks that the store was never used by two threads
 * at once (store_sync apart) and that no call outwaited its gate. */
#include <pthread.h>
#include <stdlib.h>
#include <uv.h>

#include "check.h"
#include "fake_store.h"
#include "mode.h"
#include "mode_harness.h"
#include "request.h"
#include "store.h"

#define MS INT64_C(1000000)
#define LONG_TTL_NS (60000 * MS) /* outlives every case */
#define MAX_BATCH 4096 /* mode_embedded.c's: the most requests one commit carries */
#define MAX_REPLIES 8192

struct harness {
    struct mode_loop ml;
    struct fake *fake;
    struct mode *srv;
    struct request *replied[MAX_REPLIES]; /* in the order of the replies */
    size_t nreplied;
    bool storage[16]; /* what the storage callback said, in order */
    size_t nstorage;
    int nfatal;
    char why[256];
    bool closing, closed;
    size_t replied_at_close;
};

static struct harness *h;
/* Harnesses of modes that reported a fatal error: mode.h says not
 * to touch such a mode again, so they stay as they are (reachable). */
static struct harness *abandoned[16];
static size_t nabandoned;

static bool answered(const struct request *r)
{
    for (size_t i = 0; i < h->nreplied; i++)
        if (h->replied[i] == r)
            return true;
    return false;
}

static void on_reply(void *arg, struct request *r)
{
    struct harness *hh = arg;
    CHECK(hh->nfatal == 0); /* nothing is answered after a failed sync */
    CHECK(!answered(r));
    if (hh->nreplied < MAX_REPLIES)
        hh->replied[hh->nreplied++] = r;
    if ((r->op == OP_ACQUIRE || r->op == OP_RENEW || r->op == OP_WAIT) &&
        r->status == REPLY_OK) {
        /* Never OK before the takeover it stands on (owner and token) is
         * on disk. Its expiry need not be: renewals are never written. */
        CHECK(fake_committed(hh->fake, r->session, r->owner, r->grant_token,
                             -1));
        CHECK(fake_synced(hh->fake, r->session, r->owner, r->grant_token));
    }
}

static void on_storage(void *arg, bool ok)
{
    struct harness *hh = arg;
    if (hh->nstorage < sizeof(hh->storage) / sizeof(hh->storage[0]))
        hh->storage[hh->nstorage++] = ok;
}

static void on_fatal(void *arg, const char *why)
{
    struct harness *hh = arg;
    hh->nfatal++;
    snprintf(hh->why, sizeof(hh->why), "%s", why);
}

static void on_closed(void *arg)
{
    struct harness *hh = arg;
    hh->closed = true;
    hh->replied_at_close = hh->nreplied;
}

/* Runs the loop until cond holds, for mode_wait_ms() at most (then
 * fails). */
#define RUN_UNTIL(cond) MODE_RUN_UNTIL(&h->ml, cond)

/* Runs the loop for ms milliseconds: for time itself to pass (an expiry,
 * a garbage-collection tick), never to wait for a thread. */
static void run_for(uint64_t ms)
{
    mode_loop_arm(&h->ml, ms);
    while (!h->ml.late)
        uv_run(&h->ml.loop, UV_RUN_ONCE);
}

/* A loop and a fake store; the mode comes with start(). */
static void begin_case(void)
{
    h = calloc(1, sizeof(*h));
    if (h == NULL)
        abort();
    mode_loop_init(&h->ml);
    h->fake = fake_create(mode_loop_wake, &h->ml);
    CHECK(h->fake != NULL);
}

static void start(int64_t ttl_ns)
{
    char err[256] = "";
    struct mode_hooks hooks = {on_reply, on_storage, NULL, on_fatal, h, NULL};
    h->srv = mode_embedded_create(&h->ml.loop, fake_open(h->fake), ttl_ns,
                                  &hooks, err, sizeof(err));
    if (h->srv == NULL) {
        fprintf(stderr, "mode_embedded_create: %s\n", err);
        abort();
    }
}

/* Closes the mode (unless a fatal error forbids it) and the loop, and
 * checks what every case must hold. */
static void end_case(void)
{
    for (int c = 0; c < FAKE_NCALLS; c++)
        fake_release(h->fake, (enum fake_call)c);
    if (h->nfatal == 0 && !h->closing) {
        h->closing = true;
        mode_close(h->srv, on_closed, h);
    }
    if (h->nfatal == 0)
        RUN_UNTIL(h->closed);
    CHECK(h->nfatal <= 1);
    CHECK_EQ_U64(fake_timeouts(h->fake), 0);
    CHECK_EQ_U64(fake_overlaps(h->fake), 0);
    for (size_t i = 0; i < h->nreplied; i++) {
        admin_result_free(h->replied[i]->admin);
        h->replied[i]->admin = NULL;
    }
    if (!h->closed) {
        if (nabandoned == sizeof(abandoned) / sizeof(abandoned[0]))
            abort();
        abandoned[nabandoned++] = h;
        h = NULL;
        return;
    }
    CHECK(fake_closed(h->fake));
    mode_loop_close(&h->ml);
    fake_destroy(h->fake);
    free(h);
    h = NULL;
}

static void renew(struct request *r, const char *session, const char *owner,
                  uint64_t token)
{
    lease_req(r, OP_RENEW, session, owner, token);
}

static void stats(struct request *r)
{
    memset(r, 0, sizeof(*r));
    r->op = OP_STATS;
    r->session = r->owner = "";
}

static void submit(struct request **rs, size_t n)
{
    mode_harness_submit(h->srv, rs, n, on_reply, h);
}

/* Submits its arguments (struct request *) as one list. */
#define SUBMIT(...)                                                        \
    submit((struct request *[]){__VA_ARGS__},                              \
           sizeof((struct request *[]){__VA_ARGS__}) /                     \
               sizeof(struct request *))

static void replied_in_order(const struct request *const *order, size_t n)
{
    CHECK_EQ_U64(h->nreplied, n);
    for (size_t i = 0; i < n && i < h->nreplied; i++)
        CHECK(h->replied[i] == order[i]);
}

/* Checks that its arguments (struct request *) were all the replies, in
 * this order. */
#define REPLIED_IN_ORDER(...)                                                  replied_in_order((const struct request *[]){__VA_ARGS__},                                   sizeof((const struct request *[]){__VA_ARGS__}) /                              sizeof(struct request *))

/* Acquires session for owner and waits for the reply (OK, token 1). */
static void acquired(struct request *r, const char *session,
                     const char *owner)
{
    acquire(r, session, owner);
    SUBMIT(r);
    RUN_UNTIL(answered(r));
    CHECK_EQ_I64(r->status, REPLY_OK);
    CHECK_EQ_U64(r->grant_token, 1);
}

/* Waits until the commit in flight has ended, on the loop: an admin
 * Stats waits for it (between batches the engine has no tentative
 * change) and is answered at once after it. With release_apply, lets
 * the commit (held) go once the Stats waits, so that a call waits for
 * the slot as it ends. */
static void stats_after_commit(bool release_apply)
{
    struct request *st = calloc(1, sizeof(*st));
    CHECK(st != NULL);
    stats(st);
    SUBMIT(st);
    if (release_apply)
        fake_release(h->fake, FAKE_APPLY);
    RUN_UNTIL(answered(st));
    /* Forgotten as a reply (others may have come after it). */
    size_t i = 0;
    while (i < h->nreplied && h->replied[i] != st)
        i++;
    if (i < h->nreplied) {
        memmove(&h->replied[i], &h->replied[i + 1],
                (h->nreplied - i - 1) * sizeof(h->replied[0]));
        h->nreplied--;
    }
    admin_result_free(st->admin);
    free(st);
}

static void commit_ended(void)
{
    stats_after_commit(false);
}

/* Submits the takeover r so that its sync is the loop's, apart from its
 * commit, as under load: a call waits for the commit slot as its commit
 * ends (see mode_embedded.c), and the slot is free for the next batch
 * while r's sync is held (syncs are held from now on). */
static void takeover_syncing_apart(struct request *r)
{
    fake_hold(h->fake, FAKE_APPLY);
    fake_hold(h->fake, FAKE_SYNC);
    SUBMIT(r);
    RUN_UNTIL(fake_waiting(h->fake, FAKE_APPLY) == 1);
    stats_after_commit(true);
    RUN_UNTIL(fake_waiting(h->fake, FAKE_SYNC) == 1);
}

/* --- The normal path ------------------------------------------------- */

/* A takeover is answered neither at its decision nor at its commit, but
 * once a sync that began after the commit succeeded. */
TEST(takeover_answered_only_after_its_commit_and_sync)
{
    begin_case();
    start(LONG_TTL_NS);
    fake_hold(h->fake, FAKE_APPLY);
    fake_hold(h->fake, FAKE_SYNC);
    struct request a;
    acquire(&a, "s1", "alice");
    SUBMIT(&a);
    RUN_UNTIL(fake_waiting(h->fake, FAKE_APPLY) == 1);
    CHECK(!answered(&a)); /* decided, not stored */
    fake_release(h->fake, FAKE_APPLY);
    /* The mode asks for a sync after the commit ended. */
    RUN_UNTIL(fake_waiting(h->fake, FAKE_SYNC) == 1);
    CHECK(fake_committed(h->fake, "s1", "alice", 1, -1));
    CHECK(!answered(&a)); /* committed, not durable */
    fake_release(h->fake, FAKE_SYNC);
    RUN_UNTIL(answered(&a));
    CHECK_EQ_I64(a.status, REPLY_OK);
    CHECK_EQ_U64(a.grant_token, 1);
    end_case();
}

/* A renewal of a lease whose takeover is synced keeps owner and token:
 * it is decided as it arrives, on the caller's thread with no run of the
 * loop, even while another session's commit and sync are held, and
 * nothing is written for it. */
TEST(renewal_answered_at_once_and_never_written)
{
    begin_case();
    start(LONG_TTL_NS);
    struct request a, b, r;
    acquired(&a, "s1", "alice");
    fake_hold(h->fake, FAKE_APPLY);
    fake_hold(h->fake, FAKE_SYNC);
    acquire(&b, "s2", "bob");
    SUBMIT(&b);
    RUN_UNTIL(fake_waiting(h->fake, FAKE_APPLY) == 1);
    renew(&r, "s1", "alice", a.grant_token);
    CHECK(mode_arrive(h->srv, &r));
    on_reply(h, &r);
    CHECK_EQ_I64(r.status, REPLY_OK);
    CHECK_EQ_U64(r.grant_token, a.grant_token);
    CHECK(r.grant_expiry_ns > a.grant_expiry_ns);
    fake_release(h->fake, FAKE_APPLY);
    fake_release(h->fake, FAKE_SYNC);
    RUN_UNTIL(answered(&b));
    size_t sizes[4];
    CHECK_EQ_U64(fake_applied(h->fake, sizes, 4), 2); /* the takeovers */
    CHECK(fake_committed(h->fake, "s1", "alice", 1, a.grant_expiry_ns));
    end_case();
}

/* An Acquire of a live lease changes no owner either: its holder's is
 * granted again (the same token, a later expiry), another owner's is
 * refused; both decided as they arrive, nothing written. */
TEST(acquire_of_a_live_lease_is_decided_as_it_arrives)
{
    begin_case();
    start(LONG_TTL_NS);
    struct request a, again, other;
    acquired(&a, "s1", "alice");
    acquire(&again, "s1", "alice");
    CHECK(mode_arrive(h->srv, &again));
    CHECK_EQ_I64(again.status, REPLY_OK);
    CHECK_EQ_U64(again.grant_token, 1);
    CHECK(again.grant_expiry_ns > a.grant_expiry_ns);
    acquire(&other, "s1", "bob");
    CHECK(mode_arrive(h->srv, &other));
    CHECK_EQ_I64(other.status, REPLY_HELD);
    CHECK_EQ_U64(fake_entered(h->fake, FAKE_APPLY), 1); /* alice's only */
    end_case();
}

/* A call that arrived and waits for the loop keeps its place: a
 * renewal arriving behind its holder's release is not decided ahead of
 * it, and is refused once the release is decided. */
TEST(a_call_arrived_before_keeps_its_place)
{
    begin_case();
    start(LONG_TTL_NS);
    struct request a, rel, r;
    acquired(&a, "s1", "alice");
    lease_req(&rel, OP_RELEASE, "s1", "alice", a.grant_token);
    renew(&r, "s1", "alice", a.grant_token);
    CHECK(!mode_arrive(h->srv, &rel)); /* a change: the loop's */
    CHECK(!mode_arrive(h->srv, &r));   /* behind it */
    rel.next = &r;
    r.next = NULL;
    mode_submit(h->srv, &rel);
    RUN_UNTIL(answered(&r));
    REPLIED_IN_ORDER(&a, &rel, &r);
    CHECK_EQ_I64(rel.status, REPLY_OK);
    CHECK_EQ_I64(r.status, REPLY_HELD);
    end_case();
}

/* A lone takeover is synced by its commit's own worker: its Stats,
 * which waits for the commit slot, waits for the sync as well; one sync
 * in all, and the answer comes once it ended. */
TEST(a_lone_takeover_syncs_on_its_commits_worker)
{
    begin_case();
    start(LONG_TTL_NS);
    fake_hold(h->fake, FAKE_SYNC);
    struct request a, st;
    acquire(&a, "s1", "alice");
    SUBMIT(&a);
    RUN_UNTIL(fake_waiting(h->fake, FAKE_SYNC) == 1);
    CHECK_EQ_U64(fake_returned(h->fake, FAKE_APPLY), 1);
    stats(&st);
    SUBMIT(&st);
    run_for(50);
    CHECK(!answered(&st)); /* the slot is still the commit's */
    fake_release(h->fake, FAKE_SYNC);
    RUN_UNTIL(answered(&a) && answered(&st));
    CHECK_EQ_I64(a.status, REPLY_OK);
    CHECK_EQ_U64(fake_entered(h->fake, FAKE_SYNC), 1);
    end_case();
}

/* Renewals decided on another thread as they arrive, while the loop
 * commits takeovers of other sessions: every renewal OK, each expiry
 * later than the one before (checked under ThreadSanitizer too). */
struct renewer {
    struct request rs[400];
    struct request *later[400]; /* not decided at once: the loop's */
    size_t nlater;
    uint64_t token;
};

static void *renew_on_a_thread(void *arg)
{
    struct renewer *w = arg;
    for (size_t i = 0; i < sizeof(w->rs) / sizeof(w->rs[0]); i++) {
        renew(&w->rs[i], "s0", "zoe", w->token);
        if (!mode_arrive(h->srv, &w->rs[i]))
            w->later[w->nlater++] = &w->rs[i];
    }
    return NULL;
}

TEST(renewals_decided_on_another_thread_beside_the_loop)
{
    enum { N = 100 };
    begin_case();
    start(LONG_TTL_NS);
    struct request z;
    acquired(&z, "s0", "zoe");
    static struct renewer w;
    memset(&w, 0, sizeof(w));
    w.token = z.grant_token;
    struct request *as = calloc(N, sizeof(*as));
    char(*names)[16] = calloc(N, sizeof(*names));
    CHECK(as != NULL && names != NULL);
    pthread_t t;
    CHECK_EQ_I64(pthread_create(&t, NULL, renew_on_a_thread, &w), 0);
    for (size_t i = 0; i < N; i++) {
        snprintf(names[i], sizeof(names[i]), "t%03zu", i);
        acquire(&as[i], names[i], "tom");
        SUBMIT(&as[i]);
        RUN_UNTIL(answered(&as[i]));
    }
    CHECK_EQ_I64(pthread_join(t, NULL), 0);
    if (w.nlater > 0) /* its session's counter was shared with a takeover */
        submit(w.later, w.nlater);
    for (size_t i = 0; i < w.nlater; i++)
        RUN_UNTIL(answered(w.later[i]));
    size_t bad = 0;
    int64_t last = z.grant_expiry_ns;
    for (size_t i = 0; i < sizeof(w.rs) / sizeof(w.rs[0]); i++) {
        bad += w.rs[i].status != REPLY_OK || w.rs[i].grant_expiry_ns <= last;
        last = w.rs[i].grant_expiry_ns;
    }
    CHECK_EQ_U64(bad, 0);
    for (size_t i = 0; i < N; i++)
        CHECK_EQ_I64(as[i].status, REPLY_OK);
    end_case();
    free(as);
    free(names);
}

/* A renewal of a session with a change in the commit in flight would
 * be decided from a change that may fail: it waits for that commit, is
 * decided after it, and answered once it is synced (still not written).
 * Decided from a takeover, it is OK; from a release, refused; from a
 * release whose commit failed (undone), OK again. */
TEST(renewal_of_a_session_in_flight_waits_for_its_commit)
{
    begin_case();
    start(LONG_TTL_NS);
    struct request a, b, rel, rel2, r1, r2, r3;
    acquired(&a, "s1", "alice");
    fake_hold(h->fake, FAKE_APPLY);
    acquire(&b, "s2", "bob");
    lease_req(&rel, OP_RELEASE, "s1", "alice", 1);
    SUBMIT(&b, &rel);
    RUN_UNTIL(fake_waiting(h->fake, FAKE_APPLY) == 1);
    renew(&r1, "s1", "alice", 1);
    renew(&r2, "s2", "bob", 1);
    SUBMIT(&r1, &r2);
    CHECK(!answered(&r1));
    CHECK(!answered(&r2));
    fake_release(h->fake, FAKE_APPLY);
    RUN_UNTIL(answered(&r2));
    REPLIED_IN_ORDER(&a, &b, &rel, &r1, &r2);
    CHECK_EQ_I64(r1.status, REPLY_HELD);
    CHECK_EQ_I64(r2.status, REPLY_OK);
    CHECK(r2.grant_expiry_ns > b.grant_expiry_ns);
    size_t sizes[4];
    CHECK_EQ_U64(fake_applied(h->fake, sizes, 4), 2);
    CHECK_EQ_U64(sizes[1], 2); /* bob's takeover, alice's release */
    /* A release that fails to commit leaves the lease to its owner. */
    fake_hold(h->fake, FAKE_APPLY);
    fake_fail(h->fake, FAKE_APPLY, STORE_EIO);
    lease_req(&rel2, OP_RELEASE, "s2", "bob", 1);
    SUBMIT(&rel2);
    RUN_UNTIL(fake_waiting(h->fake, FAKE_APPLY) == 1);
    renew(&r3, "s2", "bob", 1);
    SUBMIT(&r3);
    CHECK(!answered(&r3));
    fake_release(h->fake, FAKE_APPLY);
    RUN_UNTIL(answered(&r3));
    CHECK_EQ_I64(rel2.status, REPLY_UNAVAILABLE);
    CHECK_EQ_I64(r3.status, REPLY_OK);
    CHECK(r3.grant_expiry_ns > r2.grant_expiry_ns);
    end_case();
}

/* One commit syncs while the next commits; a sync answers only what
 * committed before it began, and the replies keep the order of the
 * requests, across batches. */
TEST(a_sync_answers_only_the_commits_ended_before_it)
{
    begin_case();
    start(LONG_TTL_NS);
    struct request z, a, b, c, r;
    acquired(&z, "s0", "zoe"); /* commit 1, synced */
    acquire(&a, "s1", "alice");
    takeover_syncing_apart(&a); /* commit 2 */
    acquire(&b, "s2", "bob");
    acquire(&c, "s3", "carol");
    renew(&r, "s0", "zoe", z.grant_token);
    SUBMIT(&b, &c, &r); /* commit 3, while commit 2 syncs */
    CHECK(answered(&r)); /* at once: it depends on no commit */
    commit_ended();
    CHECK(!answered(&a));
    CHECK(!answered(&b));
    CHECK(!answered(&c));
    fake_step(h->fake, FAKE_SYNC); /* the sync of commit 2 */
    RUN_UNTIL(answered(&a) && fake_waiting(h->fake, FAKE_SYNC) == 1);
    CHECK(!answered(&b)); /* that sync began before their commit */
    CHECK(!answered(&c));
    fake_release(h->fake, FAKE_SYNC);
    RUN_UNTIL(answered(&c));
    REPLIED_IN_ORDER(&z, &r, &a, &b, &c);
    CHECK_EQ_I64(b.status, REPLY_OK);
    CHECK_EQ_I64(c.status, REPLY_OK);
    end_case();
}

/* zoe holds s0 (synced); the sync of alice's takeover of s1 is held,
 * and bob's takeover of s2 has committed behind it; zoe's renewal r1 is
 * answered at once all the same. */
static void sync_held_over_a_commit(struct request *z, struct request *a,
                                    struct request *b, struct request *r1)
{
    acquired(z, "s0", "zoe");
    acquire(a, "s1", "alice");
    takeover_syncing_apart(a); /* the sync held covers alice */
    acquire(b, "s2", "bob");
    renew(r1, "s0", "zoe", 1);
    SUBMIT(b, r1);
    CHECK(answered(r1));
    commit_ended();
}

/* A sync that begins while a commit is in flight does not cover it,
 * even when that commit ends before the sync does. */
TEST(a_sync_begun_during_a_commit_does_not_cover_it)
{
    begin_case();
    start(LONG_TTL_NS);
    struct request z, a, b, r1, c, r2;
    sync_held_over_a_commit(&z, &a, &b, &r1);
    fake_hold(h->fake, FAKE_APPLY);
    acquire(&c, "s3", "carol");
    renew(&r2, "s0", "zoe", 1);
    SUBMIT(&c, &r2);
    CHECK(answered(&r2));
    RUN_UNTIL(fake_waiting(h->fake, FAKE_APPLY) == 1);
    /* alice's sync ends; the next one, for bob, begins while carol's
     * commit is in flight. */
    fake_step(h->fake, FAKE_SYNC);
    RUN_UNTIL(answered(&a) && fake_waiting(h->fake, FAKE_SYNC) == 1);
    fake_release(h->fake, FAKE_APPLY);
    commit_ended(); /* carol's */
    fake_step(h->fake, FAKE_SYNC);
    RUN_UNTIL(answered(&b));
    RUN_UNTIL(answered(&c) || fake_waiting(h->fake, FAKE_SYNC) == 1);
    CHECK(!answered(&c));
    fake_release(h->fake, FAKE_SYNC);
    RUN_UNTIL(answered(&c));
    CHECK_EQ_I64(c.status, REPLY_OK);
    end_case();
}

/* A refusal, and a renewal, decided from a takeover that is committed
 * but not synced wait for that sync: a power loss could undo the
 * takeover they saw. */
TEST(answers_wait_for_the_sync_of_the_takeover_they_saw)
{
    begin_case();
    start(LONG_TTL_NS);
    struct request a, b, r, st;
    acquire(&a, "s1", "alice");
    takeover_syncing_apart(&a);
    acquire(&b, "s1", "bob");
    SUBMIT(&b); /* decided at once: nothing to commit */
    CHECK(!answered(&b));
    renew(&r, "s1", "alice", 1);
    SUBMIT(&r);
    stats(&st);
    SUBMIT(&st); /* answered at once: nothing is committing */
    CHECK(answered(&st));
    CHECK(!answered(&r));
    CHECK_EQ_U64(fake_entered(h->fake, FAKE_APPLY), 1); /* alice's only */
    fake_release(h->fake, FAKE_SYNC);
    RUN_UNTIL(answered(&r));
    REPLIED_IN_ORDER(&st, &a, &b, &r);
    CHECK_EQ_I64(a.status, REPLY_OK);
    CHECK_EQ_I64(b.status, REPLY_HELD);
    CHECK_EQ_I64(r.status, REPLY_OK);
    end_case();
}

/* --- Failures -------------------------------------------------------- */

/* A commit fails while the previous one syncs: its whole batch gets
 * UNAVAILABLE and is undone in the engine, storage counts as failing;
 * the takeover syncing is not disturbed and is answered OK after its
 * sync, and so are the refusals that saw it; a renewal needs no storage
 * and is answered OK at once. */
TEST(commit_failing_while_a_sync_is_in_flight)
{
    begin_case();
    start(LONG_TTL_NS);
    struct request z, a, b, x, r, y, c;
    acquired(&z, "s0", "zoe");
    acquire(&a, "s1", "alice");
    takeover_syncing_apart(&a);
    fake_fail(h->fake, FAKE_APPLY, STORE_EIO);
    acquire(&b, "s2", "bob");
    acquire(&x, "s1", "xavier"); /* refused, from alice's takeover */
    renew(&r, "s0", "zoe", z.grant_token);
    SUBMIT(&b, &x, &r);
    CHECK(answered(&r));
    CHECK_EQ_I64(r.status, REPLY_OK);
    RUN_UNTIL(answered(&b));
    CHECK_EQ_I64(b.status, REPLY_UNAVAILABLE);
    CHECK(!answered(&a)); /* still syncing */
    CHECK(!answered(&x)); /* decided from it, not from bob's batch */
    CHECK(h->nstorage >= 1 && !h->storage[0]);
    fake_fail(h->fake, FAKE_APPLY, STORE_OK);
    acquire(&y, "s1", "yves");
    SUBMIT(&y); /* refused: waits for alice's sync too */
    CHECK(!answered(&y));
    fake_release(h->fake, FAKE_SYNC);
    RUN_UNTIL(answered(&a) && answered(&x) && answered(&y));
    CHECK_EQ_I64(a.status, REPLY_OK);
    CHECK_EQ_U64(a.grant_token, 1);
    CHECK_EQ_I64(x.status, REPLY_HELD);
    CHECK_EQ_I64(y.status, REPLY_HELD);
    /* bob's takeover was undone: carol gets the session, token 1. */
    acquired(&c, "s2", "carol");
    CHECK(h->nstorage >= 2 && h->storage[h->nstorage - 1]); /* recovered */
    REPLIED_IN_ORDER(&z, &r, &b, &a, &x, &y, &c);
    end_case();
}

static void revoke_req(struct request *r, const char *session, uint64_t token)
{
    lease_req(r, OP_REVOKE, session, "", token);
}

/* An operator's Revoke is a change of owner as a Release is: answered
 * once committed and synced, with the lease it ended; decided in its
 * turn among the session's calls (the holder's renewal after it is
 * refused); NOT_FOUND of a free session, FAILED_PRECONDITION for another
 * token; a failed commit leaves the holder its lease. */
TEST(revoke_is_answered_once_stored_and_ends_the_holders_lease)
{
    begin_case();
    start(LONG_TTL_NS);
    struct request a, k, v, r, none, other, f, r2, b;
    acquired(&a, "s1", "alice");
    revoke_req(&other, "s1", a.grant_token + 1);
    revoke_req(&none, "never", 0);
    SUBMIT(&other, &none);
    RUN_UNTIL(answered(&other) && answered(&none));
    CHECK_EQ_I64(other.status, REPLY_HELD);
    CHECK_STR(other.reason, "the lease's token is 1, not 2");
    CHECK_EQ_I64(none.status, REPLY_NOT_FOUND);
    /* A failed commit: nothing ended, alice renews. */
    fake_fail(h->fake, FAKE_APPLY, STORE_EIO);
    revoke_req(&f, "s1", 0);
    SUBMIT(&f);
    RUN_UNTIL(answered(&f));
    CHECK_EQ_I64(f.status, REPLY_UNAVAILABLE);
    fake_fail(h->fake, FAKE_APPLY, STORE_OK);
    renew(&k, "s1", "alice", a.grant_token);
    SUBMIT(&k);
    RUN_UNTIL(answered(&k));
    CHECK_EQ_I64(k.status, REPLY_OK);
    /* Held at the sync: the revoke and the renewal behind it wait. */
    fake_hold(h->fake, FAKE_SYNC);
    revoke_req(&v, "s1", a.grant_token);
    renew(&r, "s1", "alice", a.grant_token);
    SUBMIT(&v, &r);
    RUN_UNTIL(fake_waiting(h->fake, FAKE_SYNC) == 1);
    CHECK(fake_committed(h->fake, "s1", "", a.grant_token, -1));
    CHECK(!answered(&v) && !answered(&r));
    fake_release(h->fake, FAKE_SYNC);
    RUN_UNTIL(answered(&v) && answered(&r));
    CHECK_EQ_I64(v.status, REPLY_OK);
    CHECK_EQ_I64(v.change, CHANGE_REVOKE);
    CHECK(v.admin != NULL && v.admin->n == 1);
    if (v.admin != NULL && v.admin->n == 1) {
        CHECK_STR(v.admin->leases[0].owner, "alice");
        CHECK_EQ_U64(v.admin->leases[0].token, a.grant_token);
    }
    CHECK_EQ_I64(r.status, REPLY_HELD);
    revoke_req(&r2, "s1", 0); /* released now: nothing to revoke */
    acquire(&b, "s1", "bob");
    SUBMIT(&r2, &b);
    RUN_UNTIL(answered(&r2) && answered(&b));
    CHECK_EQ_I64(r2.status, REPLY_NOT_FOUND);
    CHECK_EQ_I64(b.status, REPLY_OK);
    CHECK_EQ_U64(b.grant_token, a.grant_token + 1);
    end_case();
}

/* Requests wait for a sync that will cover two commits; it fails: none
 * of them is ever answered, the mode reports the fatal error once,
 * and what the sync before it covered was answered. */
TEST(sync_failing_for_requests_spanning_two_commits)
{
    begin_case();
    start(LONG_TTL_NS);
    struct request z, a, b, r1, c, r2;
    sync_held_over_a_commit(&z, &a, &b, &r1);
    acquire(&c, "s3", "carol");
    renew(&r2, "s0", "zoe", 1);
    SUBMIT(&c, &r2);
    CHECK(answered(&r2));
    commit_ended();
    fake_step(h->fake, FAKE_SYNC);
    /* The next sync covers the commits of bob and of carol. */
    RUN_UNTIL(answered(&a) && fake_waiting(h->fake, FAKE_SYNC) == 1);
    CHECK_EQ_I64(a.status, REPLY_OK);
    CHECK(!answered(&b));
    CHECK(!answered(&c));
    fake_fail(h->fake, FAKE_SYNC, STORE_ESYNC);
    fake_release(h->fake, FAKE_SYNC);
    RUN_UNTIL(h->nfatal > 0);
    CHECK_EQ_I64(h->nfatal, 1);
    CHECK(strstr(h->why, "fdatasync") != NULL);
    CHECK(!answered(&b));
    CHECK(!answered(&c));
    CHECK(h->nstorage >= 1 && !h->storage[h->nstorage - 1]);
    end_case();
}

/* More requests arrive than one batch holds, while a commit is in
 * flight: they wait, the next commit carries MAX_BATCH of them and the
 * one after the rest, and every one is answered OK, in order. */
TEST(full_queue_spills_into_the_next_batch)
{
    enum { N = 1 + MAX_BATCH + 50 };
    begin_case();
    start(LONG_TTL_NS);
    struct request *rs = calloc(N, sizeof(*rs));
    struct request **ps = calloc(N, sizeof(*ps));
    char(*names)[16] = calloc(N, sizeof(*names));
    CHECK(rs != NULL && ps != NULL && names != NULL);
    for (size_t i = 0; i < N; i++) {
        snprintf(names[i], sizeof(names[i]), "q%05zu", i);
        acquire(&rs[i], names[i], "owner");
        ps[i] = &rs[i];
    }
    fake_hold(h->fake, FAKE_APPLY);
    SUBMIT(&rs[0]);
    RUN_UNTIL(fake_waiting(h->fake, FAKE_APPLY) == 1);
    submit(ps + 1, N - 1);
    CHECK_EQ_U64(fake_entered(h->fake, FAKE_APPLY), 1); /* they wait */
    fake_release(h->fake, FAKE_APPLY);
    RUN_UNTIL(h->nreplied == N);
    size_t sizes[4];
    CHECK_EQ_U64(fake_applied(h->fake, sizes, 4), 3);
    CHECK_EQ_U64(sizes[0], 1);
    CHECK_EQ_U64(sizes[1], MAX_BATCH);
    CHECK_EQ_U64(sizes[2], N - 1 - MAX_BATCH);
    size_t misplaced = 0, failed = 0;
    for (size_t i = 0; i < h->nreplied; i++) {
        misplaced += h->replied[i] != &rs[i];
        failed += rs[i].status != REPLY_OK || rs[i].grant_token != 1;
    }
    CHECK_EQ_U64(misplaced, 0);
    CHECK_EQ_U64(failed, 0);
    end_case();
    free(rs);
    free(ps);
    free(names);
}

/* After a takeover failed to commit, storage counts as failing until a
 * write of that kind works: a renewal (answered OK, as it needs no
 * storage) does not end it, a probe (a write of its own at a
 * garbage-collection tick) does. */
TEST(failed_takeover_is_not_cleared_by_a_renewal)
{
    begin_case();
    start(LONG_TTL_NS);
    struct request a, b, r;
    acquired(&a, "s1", "alice");
    fake_fail(h->fake, FAKE_APPLY, STORE_EIO);
    fake_fail(h->fake, FAKE_SET_META, STORE_EIO); /* probes fail too */
    acquire(&b, "s2", "bob");
    SUBMIT(&b);
    RUN_UNTIL(answered(&b));
    CHECK_EQ_I64(b.status, REPLY_UNAVAILABLE);
    CHECK(h->nstorage == 1 && !h->storage[0]);
    renew(&r, "s1", "alice", a.grant_token);
    SUBMIT(&r);
    CHECK(answered(&r));
    CHECK_EQ_I64(r.status, REPLY_OK);
    fake_fail(h->fake, FAKE_APPLY, STORE_OK);
    CHECK_EQ_U64(h->nstorage, 1); /* still failing */
    fake_fail(h->fake, FAKE_SET_META, STORE_OK);
    RUN_UNTIL(h->nstorage == 2); /* the next tick's probe */
    CHECK(h->storage[1]);
    struct fake_write w[8];
    size_t n = fake_writes(h->fake, "storage_checked_ns", w, 8);
    CHECK(n >= 1 && n <= 8);
    if (n >= 1 && n <= 8) {
        CHECK_EQ_I64(w[n - 1].err, STORE_OK);
        CHECK(!w[n - 1].on_loop);
    }
    end_case();
}

/* Closing waits for the commit and the sync in flight, whose request is
 * answered before the store is closed and done is called. */
TEST(close_waits_for_the_commit_and_sync_in_flight)
{
    begin_case();
    start(LONG_TTL_NS);
    struct request a;
    fake_hold(h->fake, FAKE_APPLY);
    fake_hold(h->fake, FAKE_SYNC);
    acquire(&a, "s1", "alice");
    SUBMIT(&a);
    RUN_UNTIL(fake_waiting(h->fake, FAKE_APPLY) == 1);
    h->closing = true;
    mode_close(h->srv, on_closed, h);
    fake_release(h->fake, FAKE_APPLY);
    RUN_UNTIL(fake_waiting(h->fake, FAKE_SYNC) == 1);
    CHECK(!h->closed);
    CHECK(!fake_closed(h->fake));
    CHECK(!answered(&a));
    fake_release(h->fake, FAKE_SYNC);
    RUN_UNTIL(h->closed);
    CHECK_EQ_U64(h->replied_at_close, 1);
    CHECK_EQ_I64(a.status, REPLY_OK);
    CHECK(fake_closed(h->fake));
    end_case();
}

/* --- Admin Stats ----------------------------------------------------- */

/* Stats counts the leases live when it is asked: right after acquires
 * and a release, and again once they have expired (the gauge of
 * /metrics is only refreshed by the ticks, a second apart). */
TEST(stats_count_the_leases_live_now)
{
    begin_case();
    start(2000 * MS);
    struct request a, b, c, rel, st, st2;
    acquire(&a, "s1", "alice");
    acquire(&b, "s2", "bob");
    acquire(&c, "s3", "carol");
    SUBMIT(&a, &b, &c);
    RUN_UNTIL(answered(&c));
    lease_req(&rel, OP_RELEASE, "s3", "carol", c.grant_token);
    SUBMIT(&rel);
    RUN_UNTIL(answered(&rel));
    stats(&st);
    SUBMIT(&st);
    RUN_UNTIL(answered(&st));
    CHECK_EQ_I64(st.status, REPLY_OK);
    CHECK(st.admin != NULL);
    if (st.admin != NULL) {
        CHECK_EQ_U64(st.admin->stats.live_leases, 2);
        CHECK_EQ_U64(st.admin->stats.lease_entries, 3);
    }
    run_for(2200); /* past every expiry */
    stats(&st2);
    SUBMIT(&st2);
    RUN_UNTIL(answered(&st2));
    CHECK(st2.admin != NULL);
    if (st2.admin != NULL)
        CHECK_EQ_U64(st2.admin->stats.live_leases, 0);
    end_case();
}

/* --- The TTL a restart waits for ------------------------------------- */

/* Restarted with a shorter TTL than the stored one: once the quarantine
 * is over, the new TTL is written down, on the commit worker (the loop
 * never waits for the disk), in turn with the batches; a failed write
 * changes nothing and is tried again at the next tick. */
TEST(quarantine_ttl_lowered_on_the_worker)
{
    begin_case();
    fake_put_meta(h->fake, "quarantine_ttl_ns", 300 * MS);
    start(100 * MS);
    struct fake_write w[8];
    CHECK_EQ_U64(fake_writes(h->fake, "quarantine_ttl_ns", w, 8), 1);
    CHECK_EQ_I64(w[0].value, 300 * MS); /* at start: the longer one */
    fake_fail(h->fake, FAKE_SET_META, STORE_EIO);
    fake_hold(h->fake, FAKE_SET_META);
    RUN_UNTIL(fake_waiting(h->fake, FAKE_SET_META) == 1); /* first tick */
    struct request a;
    acquire(&a, "s1", "alice");
    SUBMIT(&a);
    CHECK_EQ_U64(fake_entered(h->fake, FAKE_APPLY), 0); /* waits its turn */
    fake_release(h->fake, FAKE_SET_META);
    RUN_UNTIL(answered(&a));
    CHECK_EQ_I64(a.status, REPLY_OK);
    size_t n = fake_writes(h->fake, "quarantine_ttl_ns", w, 8);
    CHECK_EQ_U64(n, 2);
    if (n == 2) {
        CHECK_EQ_I64(w[1].value, 100 * MS);
        CHECK_EQ_I64(w[1].err, STORE_EIO);
        CHECK(!w[1].on_loop);
    }
    CHECK_EQ_I64(fake_meta(h->fake, "quarantine_ttl_ns"), 300 * MS);
    fake_fail(h->fake, FAKE_SET_META, STORE_OK);
    RUN_UNTIL(fake_writes(h->fake, "quarantine_ttl_ns", w, 8) == 3);
    n = fake_writes(h->fake, "quarantine_ttl_ns", w, 8);
    if (n == 3) {
        CHECK_EQ_I64(w[2].value, 100 * MS);
        CHECK_EQ_I64(w[2].err, STORE_OK);
        CHECK(!w[2].on_loop);
    }
    CHECK_EQ_I64(fake_meta(h->fake, "quarantine_ttl_ns"), 100 * MS);
    CHECK_EQ_U64(h->nstorage, 0); /* not health's business */
    end_case();
}

/* The TTL write's sync fails: as for any sync, the mode reports the
 * fatal error. */
TEST(quarantine_ttl_sync_failure_is_fatal)
{
    begin_case();
    fake_put_meta(h->fake, "quarantine_ttl_ns", 300 * MS);
    start(100 * MS);
    fake_fail(h->fake, FAKE_SET_META, STORE_ESYNC);
    RUN_UNTIL(h->nfatal > 0);
    CHECK(strstr(h->why, "syncing the WAL") != NULL);
    struct fake_write w[8];
    size_t n = fake_writes(h->fake, "quarantine_ttl_ns", w, 8);
    CHECK_EQ_U64(n, 2);
    if (n == 2)
        CHECK(!w[1].on_loop);
    CHECK(h->nstorage >= 1 && !h->storage[h->nstorage - 1]);
    end_case();
}

/* --- Waits (leased.v1.Leases/Wait) ------------------------------------ */

static void wait_req(struct request *r, const char *session, const char *owner)
{
    lease_req(r, OP_WAIT, session, owner, 0);
}

static void release_req(struct request *r, const char *session,
                        const char *owner, uint64_t token)
{
    lease_req(r, OP_RELEASE, session, owner, token);
}

/* Waits for a held lease line up, unanswered, and are granted in the
 * order they came, one as each holder lets go (a release, an operator's
 * revoke): a takeover with the next token, in the same commit as the
 * release and answered once synced (on_reply checks). An Acquire decided
 * with the release does not jump the line; one meanwhile is refused; a
 * Wait of the holder itself, or of a free session, is answered as an
 * Acquire is. */
TEST(waits_are_granted_first_come_first_served)
{
    begin_case();
    start(LONG_TTL_NS);
    struct request a, w1, w2, w3, x, own, rel1, x2, rv, rel2, fw;
    acquired(&a, "s1", "alice");
    wait_req(&w1, "s1", "bob");
    wait_req(&w2, "s1", "carol");
    wait_req(&w3, "s1", "dave");
    acquire(&x, "s1", "erin");
    wait_req(&own, "s1", "alice");
    SUBMIT(&w1, &w2, &w3, &x, &own);
    RUN_UNTIL(answered(&x) && answered(&own));
    commit_ended();
    CHECK_EQ_I64(x.status, REPLY_HELD);
    CHECK_EQ_I64(own.status, REPLY_OK);
    CHECK_EQ_U64(own.grant_token, a.grant_token);
    CHECK(!answered(&w1) && !answered(&w2) && !answered(&w3));
    release_req(&rel1, "s1", "alice", a.grant_token);
    acquire(&x2, "s1", "erin");
    SUBMIT(&rel1, &x2);
    RUN_UNTIL(answered(&rel1) && answered(&w1) && answered(&x2));
    CHECK_EQ_I64(rel1.status, REPLY_OK);
    CHECK_EQ_I64(w1.status, REPLY_OK);
    CHECK_EQ_I64(w1.change, CHANGE_TAKEOVER);
    CHECK_EQ_U64(w1.grant_token, a.grant_token + 1);
    CHECK_EQ_I64(x2.status, REPLY_HELD);
    CHECK_EQ_U64(fake_returned(h->fake, FAKE_APPLY), 2); /* one commit */
    commit_ended();
    CHECK(!answered(&w2) && !answered(&w3));
    revoke_req(&rv, "s1", 0);
    SUBMIT(&rv);
    RUN_UNTIL(answered(&rv) && answered(&w2));
    CHECK_EQ_I64(rv.status, REPLY_OK);
    CHECK_EQ_I64(w2.status, REPLY_OK);
    CHECK_EQ_U64(w2.grant_token, w1.grant_token + 1);
    commit_ended();
    CHECK(!answered(&w3));
    release_req(&rel2, "s1", "carol", w2.grant_token);
    wait_req(&fw, "s2", "frank");
    SUBMIT(&rel2, &fw);
    RUN_UNTIL(answered(&rel2) && answered(&w3) && answered(&fw));
    CHECK_EQ_I64(w3.status, REPLY_OK);
    CHECK_EQ_U64(w3.grant_token, w2.grant_token + 1);
    CHECK_EQ_I64(fw.status, REPLY_OK);
    CHECK_EQ_U64(fw.grant_token, 1);
    admin_result_free(rv.admin);
    rv.admin = NULL;
    end_case();
}

/* A lease that expires goes to the first Wait in line on the mode's own
 * wake-up, with no call to prompt it. A Wait whose call ended leaves the
 * line, answered CANCELLED: at once when the front end says so
 * (mode_cancelled()), else when its turn comes; either way it is never
 * granted, and the next one is. */
TEST(an_expiry_grants_the_first_wait_whose_call_did_not_end)
{
    begin_case();
    start(300 * MS);
    struct request a, w1, w2, w3;
    acquired(&a, "s1", "alice");
    wait_req(&w1, "s1", "bob");
    wait_req(&w2, "s1", "carol");
    wait_req(&w3, "s1", "dave");
    SUBMIT(&w1, &w2, &w3);
    commit_ended();
    CHECK(!answered(&w1) && !answered(&w2) && !answered(&w3));
    atomic_store(&w1.ended, true);
    mode_cancelled(h->srv);
    CHECK(answered(&w1));
    CHECK_EQ_I64(w1.status, REPLY_CANCELLED);
    atomic_store(&w2.ended, true); /* not said: found at its turn */
    RUN_UNTIL(answered(&w2) && answered(&w3));
    CHECK_EQ_I64(w2.status, REPLY_CANCELLED);
    CHECK_EQ_I64(w3.status, REPLY_OK);
    CHECK_EQ_U64(w3.grant_token, a.grant_token + 1);
    /* Decided at alice's expiry or after it. */
    CHECK(w3.grant_expiry_ns - 300 * MS >= a.grant_expiry_ns);
    REPLIED_IN_ORDER(&a, &w1, &w2, &w3);
    end_case();
}

/* A Wait refused while the takeover it saw waits for its sync joins the
 * line only then; the lease released meanwhile, when no one was in line
 * to be woken, it is granted all the same. */
TEST(a_wait_whose_lease_ended_before_it_joined_the_line_is_granted)
{
    begin_case();
    start(LONG_TTL_NS);
    struct request a, w, rel;
    acquire(&a, "s1", "alice");
    takeover_syncing_apart(&a);
    wait_req(&w, "s1", "bob");
    release_req(&rel, "s1", "alice", 1);
    SUBMIT(&w);
    SUBMIT(&rel);
    RUN_UNTIL(fake_returned(h->fake, FAKE_APPLY) == 2);
    CHECK(!answered(&a) && !answered(&w) && !answered(&rel));
    fake_release(h->fake, FAKE_SYNC);
    RUN_UNTIL(answered(&a) && answered(&rel) && answered(&w));
    CHECK_EQ_I64(a.status, REPLY_OK);
    CHECK_EQ_I64(rel.status, REPLY_OK);
    CHECK_EQ_I64(w.status, REPLY_OK);
    CHECK_EQ_U64(w.grant_token, 2);
    end_case();
}

/* leased drains: the Waits in line are answered UNAVAILABLE "draining"
 * at once (their callers may go to another replica), and a Wait decided
 * after that does not join the line. */
TEST(a_drain_answers_every_wait_in_line)
{
    begin_case();
    start(LONG_TTL_NS);
    struct request a, w1, w2;
    acquired(&a, "s1", "alice");
    wait_req(&w1, "s1", "bob");
    SUBMIT(&w1);
    commit_ended();
    CHECK(!answered(&w1));
    mode_drain(h->srv);
    CHECK(answered(&w1));
    CHECK_EQ_I64(w1.status, REPLY_UNAVAILABLE);
    CHECK_STR(w1.reason, "draining");
    wait_req(&w2, "s1", "carol");
    SUBMIT(&w2);
    RUN_UNTIL(answered(&w2));
    CHECK_EQ_I64(w2.status, REPLY_UNAVAILABLE);
    end_case();
}

CHECK_MAIN(takeover_answered_only_after_its_commit_and_sync,
           renewal_answered_at_once_and_never_written,
           acquire_of_a_live_lease_is_decided_as_it_arrives,
           a_call_arrived_before_keeps_its_place,
           a_lone_takeover_syncs_on_its_commits_worker,
           renewals_decided_on_another_thread_beside_the_loop,
           renewal_of_a_session_in_flight_waits_for_its_commit,
           a_sync_answers_only_the_commits_ended_before_it,
           a_sync_begun_during_a_commit_does_not_cover_it,
           answers_wait_for_the_sync_of_the_takeover_they_saw,
           commit_failing_while_a_sync_is_in_flight,
           revoke_is_answered_once_stored_and_ends_the_holders_lease,
           sync_failing_for_requests_spanning_two_commits,
           full_queue_spills_into_the_next_batch,
           failed_takeover_is_not_cleared_by_a_renewal,
           close_waits_for_the_commit_and_sync_in_flight,
           stats_count_the_leases_live_now,
           quarantine_ttl_lowered_on_the_worker,
           quarantine_ttl_sync_failure_is_fatal,
           waits_are_granted_first_come_first_served,
           an_expiry_grants_the_first_wait_whose_call_did_not_end,
           a_wait_whose_lease_ended_before_it_joined_the_line_is_granted,
           a_drain_answers_every_wait_in_line)
