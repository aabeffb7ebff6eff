/* Metrics kept in atomics, and their exposition text (see metrics.h). */
#include "metrics.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "version.h"

struct metrics metrics;

static void (*extra_write)(void *arg, FILE *f);
static void *extra_arg;

static const double latency_bounds[] = {0.0001, 0.00025, 0.0005, 0.001,
                                        0.0025, 0.005,   0.01,   0.025,
                                        0.05,   0.1,     0.25,   1,
                                        2.5,    10};
static const double io_bounds[] = {0.00005, 0.0001, 0.00025, 0.0005, 0.001,
                                   0.0025,  0.005,  0.01,    0.025,  0.05,
                                   0.1,     0.25,   1,       10};
static const double batch_bounds[] = {1,   2,   4,   8,    16,   32,  64,
                                      128, 256, 512, 1024, 2048, 4096};

static const char *const method_names[MM_COUNT] = {
    [MM_ACQUIRE] = "Acquire",
    [MM_RENEW] = "Renew",
    [MM_RELEASE] = "Release",
    [MM_WAIT] = "leased.v1.Leases/Wait",
    [MM_WATCH] = "leased.v1.Leases/Watch",
    [MM_HEALTH_CHECK] = "grpc.health.v1.Health/Check",
    [MM_HEALTH_WATCH] = "grpc.health.v1.Health/Watch",
    [MM_ADMIN] = "leased.admin.v1.Admin",
    [MM_OTHER] = "other",
};

#define NBOUNDS(a) (sizeof(a) / sizeof((a)[0]))

static void set_bounds(struct histogram *h, const double *b, size_t n)
{
    _Static_assert(NBOUNDS(latency_bounds) < METRIC_BUCKETS, "buckets");
    _Static_assert(NBOUNDS(io_bounds) < METRIC_BUCKETS, "buckets");
    _Static_assert(NBOUNDS(batch_bounds) < METRIC_BUCKETS, "buckets");
    h->bounds = b;
    h->nbounds = n;
}

void metrics_init(void)
{
    for (int i = 0; i < 3; i++)
        set_bounds(&metrics.latency[i], latency_bounds,
                   NBOUNDS(latency_bounds));
    set_bounds(&metrics.commit_seconds, io_bounds, NBOUNDS(io_bounds));
    set_bounds(&metrics.fsync_seconds, io_bounds, NBOUNDS(io_bounds));
    set_bounds(&metrics.batch_changes, batch_bounds, NBOUNDS(batch_bounds));
    set_bounds(&metrics.pg_round_trip_seconds, io_bounds, NBOUNDS(io_bounds));
    set_bounds(&metrics.pg_batch_calls, batch_bounds, NBOUNDS(batch_bounds));
    metrics.start_time_s = (int64_t)time(NULL);
}

void metrics_observe(struct histogram *h, double value)
{
    size_t b = 0;
    while (b < h->nbounds && value > h->bounds[b])
        b++;
    atomic_fetch_add_explicit(&h->counts[b], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->count, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->sum_micros, (uint64_t)(value * 1e6),
                              memory_order_relaxed);
}

void metrics_count_request(enum metric_method m, int grpc_code)
{
    if (grpc_code < 0 || grpc_code >= METRIC_CODES)
        grpc_code = 2; /* UNKNOWN */
    atomic_fetch_add_explicit(&metrics.requests[m][grpc_code], 1,
                              memory_order_relaxed);
}

enum metric_method metrics_method(enum request_op op)
{
    static const enum metric_method lease[] = {
        [OP_ACQUIRE] = MM_ACQUIRE, [OP_RENEW] = MM_RENEW,
        [OP_RELEASE] = MM_RELEASE, [OP_WAIT] = MM_WAIT,
        [OP_WATCH] = MM_WATCH,
    };
    return request_is_admin(op) ? MM_ADMIN : lease[op];
}

static uint64_t get(_Atomic uint64_t *v)
{
    return atomic_load_explicit(v, memory_order_relaxed);
}

static void header(FILE *f, const char *name, const char *type,
                   const char *help)
{
    fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void counter(FILE *f, const char *name, const char *help,
                    _Atomic uint64_t *v)
{
    header(f, name, "counter", help);
    fprintf(f, "%s %llu\n", name, (unsigned long long)get(v));
}

static void gauge(FILE *f, const char *name, const char *help, double v)
{
    header(f, name, "gauge", help);
    fprintf(f, "%s %.15g\n", name, v);
}

/* One histogram's series; label is "" or `method="Acquire"`. */
static void histogram_series(FILE *f, const char *name, const char *label,
                             struct histogram *h)
{
    const char *sep = label[0] != '\0' ? "," : "";
    uint64_t cumulative = 0;
    for (size_t b = 0; b <= h->nbounds; b++) {
        cumulative += get(&h->counts[b]);
        if (b < h->nbounds)
            fprintf(f, "%s_bucket{%s%sle=\"%.15g\"} %llu\n", name, label,
                    sep, h->bounds[b], (unsigned long long)cumulative);
        else
            fprintf(f, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", name, label,
                    sep, (unsigned long long)cumulative);
    }
    const char *open = label[0] != '\0' ? "{" : "";
    const char *close = label[0] != '\0' ? "}" : "";
    fprintf(f, "%s_sum%s%s%s %.6f\n", name, open, label, close,
            (double)get(&h->sum_micros) / 1e6);
    fprintf(f, "%s_count%s%s%s %llu\n", name, open, label, close,
            (unsigned long long)cumulative);
}

static void histogram(FILE *f, const char *name, const char *help,
                      struct histogram *h)
{
    header(f, name, "histogram", help);
    histogram_series(f, name, "", h);
}

void metrics_set_extra(void (*write)(void *arg, FILE *f), void *arg)
{
    extra_write = write;
    extra_arg = arg;
}

char *metrics_render(size_t *len)
{
    char *text = NULL;
    FILE *f = open_memstream(&text, len);
    if (f == NULL)
        return NULL;
    header(f, "leased_requests_total", "counter",
           "Calls answered, by method and gRPC status code.");
    for (int m = 0; m < MM_COUNT; m++) {
        for (int c = 0; c < METRIC_CODES; c++) {
            uint64_t v = get(&metrics.requests[m][c]);
            if (v > 0 || (m <= MM_RELEASE && c == 0))
                fprintf(f,
                        "leased_requests_total{method=\"%s\",code=\"%s\"} "
                        "%llu\n",
                        method_names[m], status_name(c),
                        (unsigned long long)v);
        }
    }
    header(f, "leased_request_duration_seconds", "histogram",
           "Time from a lease call's arrival to its reply, in the daemon.");
    for (int m = 0; m < 3; m++) {
        char label[64];
        snprintf(label, sizeof(label), "method=\"%s\"", method_names[m]);
        histogram_series(f, "leased_request_duration_seconds", label,
                         &metrics.latency[m]);
    }
    gauge(f, "leased_leases_live", "Leases held and not expired.",
          (double)atomic_load(&metrics.leases_live));
    gauge(f, "leased_lease_entries",
          "Sessions in memory: live, expired or released, not yet "
          "collected.",
          (double)atomic_load(&metrics.lease_entries));
    counter(f, "leased_takeovers_total",
            "Acquires that gave a session a new owner and token.",
            &metrics.takeovers);
    counter(f, "leased_expiries_total",
            "Leases that ended by running out, seen at a takeover or "
            "garbage collection.",
            &metrics.expiries);
    counter(f, "leased_reclaims_total",
            "Renewals of an expired lease nobody took over.",
            &metrics.reclaims);
    counter(f, "leased_revokes_total",
            "Leases ended by an operator's Revoke (by this process).",
            &metrics.revokes);
    int64_t q_ms = atomic_load(&metrics.quarantine_remaining_ms);
    gauge(f, "leased_quarantine_active",
          "1 while the restart quarantine lasts.", q_ms > 0 ? 1 : 0);
    gauge(f, "leased_quarantine_remaining_seconds",
          "Time left in the restart quarantine.", (double)q_ms / 1e3);
    histogram(f, "leased_commit_batch_changes",
              "Changes per storage transaction (group commit).",
              &metrics.batch_changes);
    histogram(f, "leased_commit_duration_seconds",
              "Time to apply and commit one transaction.",
              &metrics.commit_seconds);
    histogram(f, "leased_fsync_duration_seconds",
              "Time to fsync the WAL before answering takeovers and "
              "releases.",
              &metrics.fsync_seconds);
    gauge(f, "leased_queue_depth",
          "Lease calls handed to the loop and not yet answered.",
          (double)atomic_load(&metrics.queue_depth));
    gauge(f, "leased_waiting_calls",
          "Wait calls in line for a lease another holds (in "
          "leased_queue_depth too).",
          (double)atomic_load(&metrics.waiting_calls));
    gauge(f, "leased_watch_streams", "Watch streams open.",
          (double)atomic_load(&metrics.watch_streams));
    gauge(f, "leased_storage_failing",
          "1 while storage fails (health NOT_SERVING).",
          atomic_load(&metrics.storage_failing) ? 1 : 0);
    counter(f, "leased_clock_steps_total",
            "Jumps of the wall clock against the monotonic clock (over "
            "1 s); leases are timed on the monotonic one.",
            &metrics.clock_steps);
    if (metrics.postgres) {
        histogram(f, "leased_pg_round_trip_seconds",
                  "Time for one batch's transaction over PostgreSQL, from "
                  "sending it to its COMMIT's answer.",
                  &metrics.pg_round_trip_seconds);
        histogram(f, "leased_pg_batch_calls",
                  "Lease calls per PostgreSQL transaction (group commit).",
                  &metrics.pg_batch_calls);
        counter(f, "leased_pg_failovers_total",
                "Connections that found a different primary than the "
                "database last saw (a failover, or a restart).",
                &metrics.pg_failovers);
        counter(f, "leased_pg_errors_total",
                "Round trips to PostgreSQL that failed (the calls in them "
                "got UNAVAILABLE), and failed connection attempts.",
                &metrics.pg_errors);
        counter(f, "leased_pg_clock_steps_total",
                "Jumps (over 1 s) of the database host's wall clock, which "
                "decides expiry, against this replica's monotonic clock.",
                &metrics.pg_clock_steps);
        counter(f, "leased_pg_warnings_total",
                "Warnings from PostgreSQL that change no call's outcome "
                "(transaction ID wraparound coming near, a trigger's).",
                &metrics.pg_warnings);
    }
    if (extra_write != NULL)
        extra_write(extra_arg, f);
    gauge(f, "leased_start_time_seconds", "When leased started (Unix time).",
          (double)metrics.start_time_s);
    header(f, "leased_build_info", "gauge", "The version of leased.");
    fprintf(f, "leased_build_info{version=\"%s\"} 1\n", LEASED_VERSION);
    if (fclose(f) != 0) {
        free(text);
        return NULL;
    }
    return text;
}
