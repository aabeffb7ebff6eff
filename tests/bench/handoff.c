/*
 * handoffbench: how long a lease takes to pass from one holder to the next
 * one waiting for it. Run by hand (docs/benchmarks.md), never as a timed
 * test.
 *
 *   LEASED_BIN=build/daemon/leased handoffbench [RUNS]
 *
 * Starts leased (tests/daemon_proc.c) with --ttl 300ms, then for each of
 * four ways RUNS times (default 200), one call in flight at a time:
 *  - release, Wait: A holds a session; B waits for it with lease_wait
 *    (leased's Wait: in line); 20 ms later A releases it. The handoff is
 *    from the start of A's Release to B's grant in hand; and B's grant
 *    is also timed from A's answer (leased decides and commits both
 *    together: about 0, either side of it).
 *  - release, polling: the same, B asking with lease_acquire every 250 ms
 *    (what leasectl --wait did before Wait).
 *  - release, nobody waiting: A's Release alone, after the same 20 ms of
 *    idle (what the handoff adds to it).
 *  - expiry, Wait: A acquires and never renews; B waits. The lateness is
 *    from A's expiry (the wall clock of this host, which leased shares)
 *    to B's grant in hand.
 * And the disk's fdatasync: 200 of a 4 KiB write in leased's data
 * directory's file system, back to back, then each after 20 ms of idle.
 * Prints the percentiles (p50, p90, p99) of each.
 */
#include <fcntl.h>
#include <lease.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "daemon_proc.h"

#define MS INT64_C(1000000)
#define S INT64_C(1000000000)
#define FSYNCS 200

static int64_t clock_ns(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (int64_t)ts.tv_sec * S + ts.tv_nsec;
}

static void nap(int64_t ns)
{
    struct timespec ts = {ns / S, ns % S};
    nanosleep(&ts, NULL);
}

static int cmp(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static void report(const char *what, int64_t *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp);
    printf("%-27s n=%-4d p50 %8.3f ms  p90 %8.3f ms  p99 %8.3f ms\n", what,
           n, (double)v[n / 2] / 1e6, (double)v[n * 9 / 10] / 1e6,
           (double)v[n * 99 / 100] / 1e6);
}

enum how { WAIT, POLL, NONE };

struct waiter {
    struct lease_client *c;
    const char *session;
    enum how how;
    int err;
    struct lease got;
    int64_t mono_at, wall_at; /* when the grant was in hand */
};

static void *wait_for(void *arg)
{
    struct waiter *w = arg;
    if (w->how == WAIT) {
        w->err = lease_wait(w->c, w->session, "B", clock_ns(CLOCK_MONOTONIC) +
                                                       10 * S,
                            &w->got);
    } else {
        while ((w->err = lease_acquire(w->c, w->session, "B", &w->got)) ==
               LEASE_EHELD)
            nap(250 * MS);
    }
    w->mono_at = clock_ns(CLOCK_MONOTONIC);
    w->wall_at = clock_ns(CLOCK_REALTIME);
    return NULL;
}

/* One handoff of a fresh session: A's release (or expiry, with no
 * release) to B's grant. Returns the time, or -1; *after_answer: B's
 * grant less the end of A's Release. */
static int64_t handoff(struct lease_client *c, int run, enum how how,
                       int expiry, int64_t *after_answer)
{
    char session[64];
    snprintf(session, sizeof(session), "handoff-%d-%d-%d", (int)how, expiry,
             run);
    struct lease a;
    if (lease_acquire(c, session, "A", &a) != LEASE_OK) {
        fprintf(stderr, "acquire: %s\n", lease_errmsg());
        return -1;
    }
    struct waiter w = {.c = c, .session = session, .how = how};
    pthread_t t;
    if (how != NONE)
        pthread_create(&t, NULL, wait_for, &w);
    nap(20 * MS); /* B is in line (or has asked) by then */
    int64_t start = clock_ns(CLOCK_MONOTONIC);
    if (!expiry && lease_release(c, &a) != LEASE_OK)
        fprintf(stderr, "release: %s\n", lease_errmsg());
    int64_t answered = clock_ns(CLOCK_MONOTONIC);
    if (how == NONE)
        return answered - start;
    pthread_join(t, NULL);
    *after_answer = w.mono_at - answered;
    if (w.err != LEASE_OK || w.got.token <= a.token) {
        fprintf(stderr, "B: %s\n", lease_strerror(w.err));
        return -1;
    }
    return expiry ? w.wall_at - a.expiry_ns : w.mono_at - start;
}

/* Percentiles of FSYNCS fdatasyncs of a 4 KiB write in dir, each after
 * idle_ns of nothing (the handoffs' 20 ms: a sync after an idle spell
 * costs more on a VM than one of a busy stream). */
static void fsyncs(const char *dir, int64_t idle_ns, const char *what)
{
    char path[256];
    snprintf(path, sizeof(path), "%s/fsync-probe", dir);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) {
        perror(path);
        return;
    }
    static char block[4096];
    int64_t v[FSYNCS];
    for (int i = 0; i < FSYNCS; i++) {
        if (idle_ns > 0)
            nap(idle_ns);
        int64_t t0 = clock_ns(CLOCK_MONOTONIC);
        if (pwrite(fd, block, sizeof(block), (off_t)i * 4096) < 0 ||
            fdatasync(fd) != 0)
            perror("write");
        v[i] = clock_ns(CLOCK_MONOTONIC) - t0;
    }
    close(fd);
    unlink(path);
    report(what, v, FSYNCS);
}

int main(int argc, char **argv)
{
    int runs = argc > 1 ? atoi(argv[1]) : 200;
    if (runs < 10)
        runs = 10;
    struct daemon_proc d;
    if (daemon_start(&d, "300ms", NULL) != 0)
        return 1;
    struct lease_client *c;
    if (lease_grpc_open(d.addr, NULL, &c) != LEASE_OK) {
        fprintf(stderr, "open: %s\n", lease_errmsg());
        daemon_stop(&d);
        return 1;
    }
    nap(400 * MS); /* past the restart quarantine */
    int64_t *v = calloc((size_t)runs, sizeof(*v));
    int64_t *after = calloc((size_t)runs, sizeof(*after));
    static const struct {
        const char *name;
        enum how how;
        int expiry;
    } ways[] = {{"release -> Wait", WAIT, 0},
                {"release -> polling", POLL, 0},
                {"release, nobody waiting", NONE, 0},
                {"expiry -> Wait", WAIT, 1}};
    int failed = 0;
    for (size_t k = 0; k < sizeof(ways) / sizeof(ways[0]); k++) {
        int n = ways[k].how == POLL ? runs / 4 : runs; /* 125 ms each */
        for (int i = 0; i < n; i++)
            if ((v[i] = handoff(c, i, ways[k].how, ways[k].expiry,
                                &after[i])) < 0)
                failed = 1;
        report(ways[k].name, v, n);
        if (k == 0)
            report("  grant - release's answer", after, n);
    }
    fsyncs(d.dir, 0, "fdatasync (4 KiB)");
    fsyncs(d.dir, 20 * MS, "  after 20 ms idle");
    free(v);
    free(after);
    lease_client_destroy(c);
    lease_grpc_wait_shutdown(1000);
    return daemon_stop(&d) != 0 || failed;
}
