/*
 * leasebench: throughput and latency of a lease service under a workload
 * (see workload.c), the same model for every target system, so that runs
 * compare as ratios.
 *
 *   leasebench --target leased://127.0.0.1:7443 --workload renew \
 *              --sessions 1024 --concurrency 64 --connections 1 \
 *              --duration 10s --warmup 2s [--json]
 *
 * Output: ops/s, p50/p99/p999 latency, errors by status, client CPU.
 */
#include <errno.h>
#include <getopt.h>
#include <grpc/grpc.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

extern const struct bench_target_ops bench_target_leased, bench_target_null,
    bench_target_etcd, bench_target_redis;
static const struct bench_target_ops *const targets[] = {
    &bench_target_leased, &bench_target_null, &bench_target_etcd,
    &bench_target_redis};

static const char *const workload_names[] = {
    [WL_RENEW] = "renew", [WL_CHURN] = "churn", [WL_CONTEND] = "contend"};

static const char usage[] =
    "Usage: leasebench --target SCHEME://HOST:PORT [FLAGS]\n"
    "\n"
    "  --target URL        leased://, null:// (leasebench-null), etcd://\n"
    "                      (etcd v3 gRPC API) or redis://\n"
    "  --workload W        renew (90 in 100 renew, 5 acquire, 5 release of\n"
    "                      its own leases), churn (acquire/release), or\n"
    "                      contend (many owners, few sessions) [renew]\n"
    "  --sessions N        sessions [1024; contend: 8]\n"
    "  --concurrency N     calls in flight [64]\n"
    "  --connections N     connections, at least one per thread [1]\n"
    "  --threads N         client threads [1]\n"
    "  --duration D        measured time, e.g. 10s [10s]\n"
    "  --warmup D          unmeasured time before it [2s]\n"
    "  --ttl D             lease TTL for targets that take one [30s]\n"
    "  --json              one JSON object instead of text\n";

int64_t bench_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void start_slot(struct slot *s)
{
    struct bench_run *run = s->thread->run;
    if (!workload_next(s, run->workload, atomic_load(&run->phase)))
        return;
    s->start_ns = bench_now_ns();
    s->busy = true;
    s->thread->in_flight++;
    run->target->start(s);
}

void bench_done(struct slot *s, enum bench_result result, int status,
                uint64_t token, int64_t lease_id)
{
    struct bench_thread *t = s->thread;
    struct bench_run *run = t->run;
    int64_t took = bench_now_ns() - s->start_ns;
    s->busy = false;
    t->in_flight--;
    bool intended = workload_apply(s, run->workload, result, token, lease_id);
    if (atomic_load(&run->phase) == PHASE_MEASURE) {
        if (intended) {
            hist_add(&t->hist, took);
            t->ops[s->op]++;
            t->held += result == RESULT_HELD;
        } else if (result == RESULT_HELD) {
            t->unexpected_held++;
        } else if (result == RESULT_ERROR) {
            t->errors[status >= 0 && status < STATUS_MAX ? status : 2]++;
        }
    }
    if (result != RESULT_ERROR)
        start_slot(s);
}

void bench_tick(struct bench_thread *t)
{
    for (size_t i = 0; i < t->nslots && t->in_flight < t->nslots; i++) {
        if (!t->slots[i].busy)
            start_slot(&t->slots[i]);
    }
}

bool bench_thread_finished(const struct bench_thread *t)
{
    return atomic_load(&t->run->phase) == PHASE_STOP && t->in_flight == 0;
}

static void *thread_main(void *arg)
{
    struct bench_thread *t = arg;
    bench_tick(t);
    t->run->target->run(t);
    return NULL;
}

static int parse_duration_ms(const char *text, int64_t *ms)
{
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (errno != 0 || end == text || v < 0)
        return -1;
    if (strcmp(end, "ms") == 0)
        *ms = (int64_t)v;
    else if (strcmp(end, "s") == 0 || *end == '\0')
        *ms = (int64_t)(v * 1000);
    else if (strcmp(end, "m") == 0)
        *ms = (int64_t)(v * 60000);
    else
        return -1;
    return 0;
}

static void sleep_ms(int64_t ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

static double cpu_seconds(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 +
           (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
}

/* Sessions go to slots: each slot its own share (renew, churn), or every
 * slot all of them (contend). */
static int make_slots(struct bench_run *run, struct bench_thread *threads,
                      uint64_t run_id)
{
    run->names = calloc(run->sessions, sizeof(*run->names));
    for (size_t i = 0; i < run->sessions; i++) {
        run->names[i] = malloc(64);
        snprintf(run->names[i], 64, "bench-%016" PRIx64 "-%zu", run_id, i);
    }
    size_t slot_no = 0;
    for (size_t t = 0; t < run->threads; t++) {
        struct bench_thread *th = &threads[t];
        th->run = run;
        th->id = (int)t;
        th->nslots = run->concurrency / run->threads +
                     (t < run->concurrency % run->threads);
        th->slots = calloc(th->nslots, sizeof(*th->slots));
        for (size_t i = 0; i < th->nslots; i++, slot_no++) {
            struct slot *s = &th->slots[i];
            s->thread = th;
            s->id = (int)slot_no;
            snprintf(s->owner, sizeof(s->owner), "leasebench-%016" PRIx64
                     "-%zu", run_id, slot_no);
            bool shared = run->workload == WL_CONTEND;
            size_t n = shared ? run->sessions
                              : run->sessions / run->concurrency +
                                    (slot_no < run->sessions % run->concurrency);
            s->sessions = calloc(n > 0 ? n : 1, sizeof(*s->sessions));
            s->held = calloc(n > 0 ? n : 1, sizeof(*s->held));
            s->nsessions = n;
            if (n == 0) {
                s->ready = true;
                atomic_fetch_add(&run->ready_slots, 1);
            }
            for (size_t k = 0; k < n; k++)
                s->sessions[k] = (uint32_t)(shared ? k
                                                   : slot_no + k * run->concurrency);
        }
    }
    return 0;
}

static const char *const op_names[OP_COUNT] = {"acquire", "renew",
                                               "release"};

static void report(const struct bench_run *run, const char *url,
                   const struct bench_thread *threads, double seconds,
                   double cpu, bool json)
{
    struct hist h = {0};
    uint64_t ops[OP_COUNT] = {0}, errors[STATUS_MAX] = {0};
    uint64_t held = 0, unexpected = 0, total_errors = 0;
    for (size_t t = 0; t < run->threads; t++) {
        hist_merge(&h, &threads[t].hist);
        for (int o = 0; o < OP_COUNT; o++)
            ops[o] += threads[t].ops[o];
        for (int e = 0; e < STATUS_MAX; e++)
            errors[e] += threads[t].errors[e];
        held += threads[t].held;
        unexpected += threads[t].unexpected_held;
    }
    for (int e = 0; e < STATUS_MAX; e++)
        total_errors += errors[e];
    total_errors += unexpected;
    double rate = (double)h.count / seconds;
    double p50 = hist_quantile(&h, 0.5) / 1e3, p99 = hist_quantile(&h, 0.99) / 1e3,
           p999 = hist_quantile(&h, 0.999) / 1e3;
    if (json) {
        printf("{\"target\":\"%s\",\"workload\":\"%s\",\"sessions\":%zu,"
               "\"concurrency\":%zu,\"connections\":%zu,\"threads\":%zu,"
               "\"seconds\":%.3f,\"ops\":%" PRIu64 ",\"ops_per_sec\":%.1f,"
               "\"p50_us\":%.1f,\"p99_us\":%.1f,\"p999_us\":%.1f,"
               "\"acquire\":%" PRIu64 ",\"renew\":%" PRIu64
               ",\"release\":%" PRIu64 ",\"held\":%" PRIu64
               ",\"errors\":%" PRIu64 ",\"errors_by_status\":{",
               url, workload_names[run->workload], run->sessions,
               run->concurrency, run->connections, run->threads, seconds,
               h.count, rate, p50, p99, p999, ops[OP_ACQUIRE],
               ops[OP_RENEW], ops[OP_RELEASE], held, total_errors);
        const char *sep = "";
        for (int e = 0; e < STATUS_MAX; e++) {
            if (errors[e] > 0) {
                printf("%s\"%d\":%" PRIu64, sep, e, errors[e]);
                sep = ",";
            }
        }
        if (unexpected > 0)
            printf("%s\"held\":%" PRIu64, sep, unexpected);
        printf("},\"client_cpu\":%.3f}\n", cpu / seconds);
        return;
    }
    printf("target %s  workload %s  sessions %zu  concurrency %zu  "
           "connections %zu  threads %zu\n",
           url, workload_names[run->workload], run->sessions,
           run->concurrency, run->connections, run->threads);
    printf("ops %" PRIu64 " in %.2fs: %.0f ops/s  (", h.count, seconds, rate);
    for (int o = 0; o < OP_COUNT; o++)
        printf("%s%s %" PRIu64, o ? ", " : "", op_names[o], ops[o]);
    if (run->workload == WL_CONTEND)
        printf(", held %" PRIu64, held);
    printf(")\nlatency p50 %.0fus  p99 %.0fus  p999 %.0fus\n", p50, p99,
           p999);
    printf("errors %" PRIu64, total_errors);
    for (int e = 0; e < STATUS_MAX; e++) {
        if (errors[e] > 0)
            printf("  status %d: %" PRIu64, e, errors[e]);
    }
    if (unexpected > 0)
        printf("  unexpected held/lost: %" PRIu64, unexpected);
    printf("\nclient cpu %.0f%%\n", 100 * cpu / seconds);
}

int main(int argc, char **argv)
{
    static const struct option options[] = {
        {"target", required_argument, NULL, 'T'},
        {"workload", required_argument, NULL, 'w'},
        {"sessions", required_argument, NULL, 's'},
        {"concurrency", required_argument, NULL, 'c'},
        {"connections", required_argument, NULL, 'n'},
        {"threads", required_argument, NULL, 't'},
        {"duration", required_argument, NULL, 'd'},
        {"warmup", required_argument, NULL, 'W'},
        {"ttl", required_argument, NULL, 'L'},
        {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0}};
    struct bench_run run = {.workload = WL_RENEW, .concurrency = 64,
                            .connections = 1, .threads = 1, .ttl_ms = 30000};
    const char *url = NULL;
    int64_t duration_ms = 10000, warmup_ms = 2000;
    long sessions = -1;
    bool json = false;
    int opt;
    while ((opt = getopt_long(argc, argv, "", options, NULL)) != -1) {
        switch (opt) {
        case 'T':
            url = optarg;
            break;
        case 'w': {
            int w;
            for (w = 0; w < 3 && strcmp(optarg, workload_names[w]) != 0; w++)
                ;
            if (w == 3)
                goto bad;
            run.workload = (enum bench_workload)w;
            break;
        }
        case 's':
            sessions = atol(optarg);
            break;
        case 'c':
            run.concurrency = (size_t)atol(optarg);
            break;
        case 'n':
            run.connections = (size_t)atol(optarg);
            break;
        case 't':
            run.threads = (size_t)atol(optarg);
            break;
        case 'd':
            if (parse_duration_ms(optarg, &duration_ms) != 0)
                goto bad;
            break;
        case 'W':
            if (parse_duration_ms(optarg, &warmup_ms) != 0)
                goto bad;
            break;
        case 'L':
            if (parse_duration_ms(optarg, &run.ttl_ms) != 0)
                goto bad;
            break;
        case 'j':
            json = true;
            break;
        case 'h':
            fputs(usage, stdout);
            return 0;
        default:
            goto bad;
        }
    }
    if (url == NULL || optind != argc)
        goto bad;
    const char *sep = strstr(url, "://");
    if (sep == NULL)
        goto bad;
    for (size_t i = 0; i < sizeof(targets) / sizeof(targets[0]); i++) {
        if (strlen(targets[i]->scheme) == (size_t)(sep - url) &&
            strncmp(url, targets[i]->scheme, (size_t)(sep - url)) == 0)
            run.target = targets[i];
    }
    if (run.target == NULL)
        goto bad;
    run.hostport = sep + 3;
    run.sessions = sessions > 0 ? (size_t)sessions
                   : run.workload == WL_CONTEND ? 8 : 1024;
    if (run.concurrency < 1 || run.threads < 1 || run.connections < 1 ||
        run.threads > run.concurrency || duration_ms <= 0)
        goto bad;
    if (run.connections < run.threads)
        run.connections = run.threads; /* each thread has its own */

    grpc_init();
    struct timespec seed;
    clock_gettime(CLOCK_REALTIME, &seed);
    uint64_t run_id = (uint64_t)seed.tv_nsec ^ ((uint64_t)getpid() << 32) ^
                      (uint64_t)seed.tv_sec;
    struct bench_thread *threads = calloc(run.threads, sizeof(*threads));
    make_slots(&run, threads, run_id);
    atomic_store(&run.phase, PHASE_PREPARE);
    for (size_t t = 0; t < run.threads; t++) {
        if (run.target->thread_init(&threads[t], run.hostport) != 0) {
            fprintf(stderr, "leasebench: cannot connect to %s\n", url);
            return 1;
        }
    }
    pthread_t *tids = calloc(run.threads, sizeof(*tids));
    for (size_t t = 0; t < run.threads; t++)
        pthread_create(&tids[t], NULL, thread_main, &threads[t]);

    /* Preparing (the renew workload acquires its leases) is not timed,
     * but bounded. */
    if (run.workload == WL_RENEW) {
        /* 60 s, or a millisecond per session for very many. */
        int64_t limit_ms = run.sessions > 60000 ? (int64_t)run.sessions : 60000;
        int64_t until = bench_now_ns() + limit_ms * 1000000;
        for (;;) {
            if (atomic_load(&run.ready_slots) == run.concurrency)
                break;
            if (bench_now_ns() > until) {
                fprintf(stderr, "leasebench: preparing took over %llds\n",
                        (long long)(limit_ms / 1000));
                return 1;
            }
            sleep_ms(10);
        }
    }
    atomic_store(&run.phase, PHASE_WARMUP);
    sleep_ms(warmup_ms);
    double cpu0 = cpu_seconds();
    int64_t t0 = bench_now_ns();
    atomic_store(&run.phase, PHASE_MEASURE);
    sleep_ms(duration_ms);
    atomic_store(&run.phase, PHASE_STOP);
    double seconds = (double)(bench_now_ns() - t0) / 1e9;
    double cpu = cpu_seconds() - cpu0;
    for (size_t t = 0; t < run.threads; t++)
        pthread_join(tids[t], NULL);
    report(&run, url, threads, seconds, cpu, json);
    uint64_t errors = 0;
    for (size_t t = 0; t < run.threads; t++) {
        for (int e = 0; e < STATUS_MAX; e++)
            errors += threads[t].errors[e];
        errors += threads[t].unexpected_held;
        run.target->thread_close(&threads[t]);
        for (size_t i = 0; i < threads[t].nslots; i++) {
            free(threads[t].slots[i].sessions);
            free(threads[t].slots[i].held);
        }
        free(threads[t].slots);
    }
    for (size_t i = 0; i < run.sessions; i++)
        free(run.names[i]);
    free(run.names);
    free(threads);
    free(tids);
    grpc_shutdown();
    return errors == 0 ? 0 : 3;
bad:
    fputs(usage, stderr);
    return 2;
}
