/*
 * The file-lock backend beyond the conformance suite: processes racing
 * for one session, kill -9 of a holder, crash leftovers, hash collisions,
 * damaged records, and the same decisions as the in-memory backend (both
 * decide by core/rules.h).
 */
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "lease.h"

#define MS INT64_C(1000000)

static char dir[] = "/tmp/leased-filelock-XXXXXX";

static struct lease_client *open_dir(int64_t ttl_ns)
{
    struct lease_client *c;
    CHECK_EQ_I64(lease_file_open(dir, ttl_ns, NULL, NULL, &c), LEASE_OK);
    return c;
}

static void setup(void)
{
    CHECK(mkdtemp(dir) != NULL);
}

static void teardown(void)
{
    char cmd[64];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

TEST(processes_racing_for_one_session)
{
    setup();
    enum { N = 8 };
    int fds[2];
    CHECK(pipe(fds) == 0);
    for (int i = 0; i < N; i++) {
        if (fork() == 0) {
            struct lease_client *c;
            char owner[16];
            snprintf(owner, sizeof(owner), "proc-%d", i);
            struct lease l;
            char r = 'E';
            if (lease_file_open(dir, 10000 * MS, NULL, NULL, &c) == LEASE_OK)
                r = lease_acquire(c, "race", owner, &l) == LEASE_OK ? 'Y'
                                                                    : 'N';
            if (write(fds[1], &r, 1) != 1)
                _exit(2);
            _exit(0);
        }
    }
    close(fds[1]);
    int won = 0, lost = 0;
    char r;
    while (read(fds[0], &r, 1) == 1) {
        won += r == 'Y';
        lost += r == 'N';
    }
    close(fds[0]);
    while (wait(NULL) > 0)
        ;
    CHECK_EQ_I64(won, 1);
    CHECK_EQ_I64(lost, N - 1);
    teardown();
}

TEST(kill9_of_a_holder)
{
    setup();
    int fds[2];
    CHECK(pipe(fds) == 0);
    pid_t pid = fork();
    if (pid == 0) {
        struct lease_client *c = open_dir(300 * MS);
        struct lease l;
        char r = lease_acquire(c, "k", "holder", &l) == LEASE_OK ? 'Y' : 'N';
        if (write(fds[1], &r, 1) != 1)
            _exit(2);
        pause(); /* holds it until killed */
        _exit(0);
    }
    char r = 0;
    CHECK(read(fds[0], &r, 1) == 1 && r == 'Y');
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    struct lease_client *c = open_dir(300 * MS);
    struct lease l;
    CHECK_EQ_I64(lease_acquire(c, "k", "next", &l), LEASE_EHELD);
    sleep_ms(350);
    CHECK_EQ_I64(lease_acquire(c, "k", "next", &l), LEASE_OK);
    CHECK_EQ_I64(l.token, 2);
    lease_client_destroy(c);
    teardown();
}

TEST(tokens_survive_a_crash_and_its_leftovers)
{
    setup();
    struct lease_client *c = open_dir(10000 * MS);
    struct lease l;
    for (int i = 1; i <= 3; i++) {
        char owner[16];
        snprintf(owner, sizeof(owner), "o%d", i);
        CHECK_EQ_I64(lease_acquire(c, "t", owner, &l), LEASE_OK);
        CHECK_EQ_I64(l.token, (int64_t)i);
        CHECK_EQ_I64(lease_release(c, &l), LEASE_OK);
    }
    lease_client_destroy(c);
    /* A crash in the middle of a write leaves a temporary file beside
     * the record: half a record, never renamed over it. */
    char cmd[256];
    snprintf(cmd, sizeof(cmd),
             "for f in %s/*.[0-9]; do printf 'leased-lease 1 99' > "
             "\"$f.tmp.99999\"; done",
             dir);
    CHECK(system(cmd) == 0);
    c = open_dir(10000 * MS); /* "after the restart" */
    CHECK_EQ_I64(lease_acquire(c, "t", "o4", &l), LEASE_OK);
    CHECK_EQ_I64(l.token, 4);
    lease_client_destroy(c);
    teardown();
}

static uint64_t fnv(const char *s)
{
    uint64_t h = 0xcbf29ce484222325u;
    for (; *s != '\0'; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3u;
    return h;
}

TEST(a_hash_collision_gets_its_own_slot)
{
    setup();
    /* Another session's record where ours would go first. */
    char path[256];
    snprintf(path, sizeof(path), "%s/%016" PRIx64 ".0", dir, fnv("mine"));
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    fprintf(f, "leased-lease 1 7 %lld 5 5\nalicetheir", (long long)INT64_MAX);
    fclose(f);
    struct lease_client *c = open_dir(10000 * MS);
    struct lease l;
    CHECK_EQ_I64(lease_acquire(c, "mine", "bob", &l), LEASE_OK);
    CHECK_EQ_I64(l.token, 1); /* not the other session's 7 */
    CHECK_EQ_I64(lease_renew(c, &l, &l), LEASE_OK);
    f = fopen(path, "r");
    char buf[128] = "";
    CHECK(f != NULL && fread(buf, 1, sizeof(buf) - 1, f) > 0);
    fclose(f);
    CHECK(strstr(buf, "alicetheir") != NULL); /* untouched */
    lease_client_destroy(c);
    teardown();
}

TEST(a_damaged_record_is_unavailable_not_free)
{
    setup();
    struct lease_client *c = open_dir(10000 * MS);
    struct lease l;
    CHECK_EQ_I64(lease_acquire(c, "d", "alice", &l), LEASE_OK);
    char path[256];
    snprintf(path, sizeof(path), "%s/%016" PRIx64 ".0", dir, fnv("d"));
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    fputs("garbage", f);
    fclose(f);
    CHECK_EQ_I64(lease_acquire(c, "d", "bob", &l), LEASE_EUNAVAILABLE);
    CHECK(strstr(lease_errmsg(), "not a lease record") != NULL);
    lease_client_destroy(c);
    teardown();
}

static int64_t clock_of(void *arg)
{
    return *(const int64_t *)arg;
}

/* One call's answer, as a caller sees it. */
struct answer {
    int err;
    uint64_t token;
    int64_t expiry_ns;
    char why[128];
};

static void note(struct answer *a, int err, const struct lease *l)
{
    a->err = err;
    a->token = err == LEASE_OK && l != NULL ? l->token : 0;
    a->expiry_ns = err == LEASE_OK && l != NULL ? l->expiry_ns : 0;
    snprintf(a->why, sizeof(a->why), "%s", err != LEASE_OK ? lease_errmsg()
                                                           : "");
}

/* A script of every kind of decision against c, whose clock is *now;
 * fills a[] and returns how many answers. */
static size_t script(struct lease_client *c, int64_t *now, int64_t ttl,
                     struct answer *a)
{
    size_t n = 0;
    struct lease la, la2, lb, x;
    note(&a[n++], lease_acquire(c, "s", "A", &la), &la);   /* takeover */
    note(&a[n++], lease_acquire(c, "s", "A", &la2), &la2); /* refresh */
    note(&a[n++], lease_acquire(c, "s", "B", &x), &x);     /* held */
    *now += ttl / 3;
    note(&a[n++], lease_renew(c, &la, &la), &la);          /* renew */
    x = la;
    x.token++;
    note(&a[n++], lease_renew(c, &x, &x), &x);             /* lost */
    snprintf(x.owner, sizeof(x.owner), "B");
    x.token = la.token;
    note(&a[n++], lease_release(c, &x), NULL);              /* not B's */
    note(&a[n++], lease_release(c, &la), NULL);             /* freed */
    note(&a[n++], lease_renew(c, &la, &x), &x);            /* released */
    note(&a[n++], lease_acquire(c, "s", "B", &lb), &lb);   /* takeover */
    *now += ttl;
    note(&a[n++], lease_renew(c, &lb, &lb), &lb);          /* reclaim */
    note(&a[n++], lease_acquire(c, "s", "C", &x), &x);     /* held */
    *now += ttl;
    note(&a[n++], lease_acquire(c, "s", "C", &x), &x);     /* expired */
    note(&a[n++], lease_renew(c, &lb, &x), &x);            /* lost */
    note(&a[n++], lease_release(c, &lb), NULL);             /* no-op */
    note(&a[n++], lease_renew(c, &la, &x), &x);            /* ghost */
    return n;
}

TEST(decides_as_the_memory_backend_does)
{
    setup();
    const int64_t ttl = 30000 * MS, t0 = INT64_C(1700000000) * 1000 * MS;
    int64_t fnow = t0, mnow = t0;
    struct lease_client *f, *m;
    CHECK_EQ_I64(lease_file_open(dir, ttl, clock_of, &fnow, &f), LEASE_OK);
    CHECK_EQ_I64(lease_memory_open(ttl, clock_of, &mnow, &m), LEASE_OK);
    struct answer fa[32], ma[32];
    size_t fn = script(f, &fnow, ttl, fa), mn = script(m, &mnow, ttl, ma);
    CHECK_EQ_I64(fn, mn);
    for (size_t i = 0; i < fn && i < mn; i++) {
        CHECK_EQ_I64(fa[i].err, ma[i].err);
        CHECK_EQ_U64(fa[i].token, ma[i].token);
        CHECK_EQ_I64(fa[i].expiry_ns, ma[i].expiry_ns);
        CHECK_STR(fa[i].why, ma[i].why);
    }
    /* And what they both said. */
    CHECK_EQ_U64(fa[0].token, 1);
    CHECK_EQ_I64(fa[0].expiry_ns, t0 + ttl);
    CHECK_EQ_I64(fa[1].expiry_ns, t0 + ttl + 1); /* strictly later */
    CHECK_STR(fa[2].why, "held by another owner");
    CHECK_STR(fa[4].why, "lease lost: owner or token no longer match");
    CHECK_EQ_I64(fa[5].err, LEASE_OK);
    CHECK_EQ_I64(fa[7].err, LEASE_EHELD);
    /* A takeover after a release: token 2, expiry now + TTL. */
    CHECK_EQ_U64(fa[8].token, 2);
    CHECK_EQ_I64(fa[8].expiry_ns, t0 + ttl / 3 + ttl);
    CHECK_EQ_I64(fa[9].err, LEASE_OK); /* reclaimed: same token */
    CHECK_EQ_U64(fa[9].token, 2);
    CHECK_EQ_I64(fa[10].err, LEASE_EHELD);
    CHECK_EQ_U64(fa[11].token, 3);
    CHECK_EQ_I64(fa[12].err, LEASE_EHELD);
    CHECK_EQ_I64(fa[13].err, LEASE_OK);
    CHECK_EQ_I64(fa[14].err, LEASE_EHELD);
    lease_client_destroy(f);
    lease_client_destroy(m);
    teardown();
}

CHECK_MAIN(processes_racing_for_one_session, kill9_of_a_holder,
           tokens_survive_a_crash_and_its_leftovers,
           a_hash_collision_gets_its_own_slot,
           a_damaged_record_is_unavailable_not_free,
           decides_as_the_memory_backend_does)
