/*
 * deadlinebench: how late liblease's keeper acts on its deadline when the
 * daemon stalls. Run by hand (docs/benchmarks.md), never as a timed test.
 *
 *   LEASED_BIN=build/daemon/leased deadlinebench [RUNS] [TTL]
 *
 * Starts leased (tests/daemon_proc.c) with --ttl TTL (default 1s), then
 * RUNS times (default 100): a keeper acquires a session of its own, a
 * random part of a third of the TTL later leased is stopped (SIGSTOP), so
 * that the renewal then due hangs, and the keeper's lost callback notes
 * the monotonic time. Its lateness is that time less the keeper's
 * deadline; lease_keeper_valid() must say false by then. leased is
 * continued and the next run starts. Prints the lateness's percentiles
 * (p50, p99, p100) and how many runs had valid() true in lost.
 */
#include <lease.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon_proc.h"

#define MS INT64_C(1000000)

static int64_t mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

struct run {
    pthread_mutex_t lock;
    pthread_cond_t done;
    struct lease_keeper *k; /* set before the loss can come */
    int64_t lost_at, deadline;
    int valid_then;
    int lost;
};

static void on_lost(void *arg, const struct lease *l, int err)
{
    (void)l, (void)err;
    struct run *r = arg;
    int64_t now = mono();
    pthread_mutex_lock(&r->lock);
    r->lost_at = now;
    r->deadline = lease_keeper_deadline(r->k);
    r->valid_then = lease_keeper_valid(r->k);
    r->lost = 1;
    pthread_cond_signal(&r->done);
    pthread_mutex_unlock(&r->lock);
}

static int cmp(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static double pct_ms(const int64_t *v, int n, double p)
{
    int i = (int)(p * (n - 1) + 0.5);
    return (double)v[i] / MS;
}

int main(int argc, char **argv)
{
    int runs = argc > 1 ? atoi(argv[1]) : 100;
    const char *ttl = argc > 2 ? argv[2] : "1s";
    struct daemon_proc d;
    if (runs < 1 || daemon_start(&d, ttl, NULL) != 0)
        return 2;
    struct lease_client *c;
    struct lease_grpc_options o = {.timeout_ms = 5000};
    if (lease_grpc_open(d.addr, &o, &c) != LEASE_OK) {
        fprintf(stderr, "%s\n", lease_errmsg());
        return 2;
    }
    int64_t *late = calloc((size_t)runs, sizeof(*late));
    int still_valid = 0, failed = 0;
    srand((unsigned)mono());
    for (int i = 0; i < runs && late != NULL; i++) {
        struct run r = {.lock = PTHREAD_MUTEX_INITIALIZER,
                        .done = PTHREAD_COND_INITIALIZER};
        struct lease_keeper_callbacks cb = {.lost = on_lost, .arg = &r};
        char session[32];
        snprintf(session, sizeof(session), "deadline-%d", i);
        pthread_mutex_lock(&r.lock); /* the loss waits for r.k */
        struct lease l;
        if (lease_keeper_start(c, session, "bench", NULL, &cb, &r.k, &l) !=
            LEASE_OK) {
            pthread_mutex_unlock(&r.lock);
            fprintf(stderr, "run %d: %s\n", i, lease_errmsg());
            failed++;
            continue;
        }
        pthread_mutex_unlock(&r.lock);
        int64_t phase = rand() % (l.ttl_ns / 3 / MS) * MS;
        struct timespec ts = {phase / 1000000000, phase % 1000000000};
        nanosleep(&ts, NULL);
        kill(d.pid, SIGSTOP);
        pthread_mutex_lock(&r.lock);
        while (!r.lost)
            pthread_cond_wait(&r.done, &r.lock);
        pthread_mutex_unlock(&r.lock);
        kill(d.pid, SIGCONT);
        late[i - failed] = r.lost_at - r.deadline;
        still_valid += r.valid_then;
        lease_keeper_stop(r.k);
    }
    int n = runs - failed;
    if (late != NULL && n > 0) {
        qsort(late, (size_t)n, sizeof(*late), cmp);
        printf("runs %d (ttl %s): lost after the deadline by p50 %.3f ms, "
               "p99 %.3f ms, p100 %.3f ms; valid() true in lost: %d\n",
               n, ttl, pct_ms(late, n, 0.5), pct_ms(late, n, 0.99),
               pct_ms(late, n, 1.0), still_valid);
    }
    free(late);
    lease_client_destroy(c);
    lease_grpc_wait_shutdown(1000);
    int rc = daemon_stop(&d);
    return late == NULL || failed > 0 || still_valid > 0 || rc != 0;
}
