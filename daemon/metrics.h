/*
 * Prometheus metrics: counters, gauges and histograms kept in atomics in
 * one process-wide struct, written by whichever thread sees the event
 * (the completion-queue thread, the loop), read when /metrics is scraped
 * (libmicrohttpd's thread, --metrics-listen). Nothing here blocks a
 * writer. The names and their meanings are listed in docs/operations.md.
 */
#ifndef LEASED_METRICS_H
#define LEASED_METRICS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "request.h"
#include "status.h"

/* The methods requests are counted by. */
enum metric_method {
    MM_ACQUIRE,
    MM_RENEW,
    MM_RELEASE,
    MM_WAIT,
    MM_WATCH,
    MM_HEALTH_CHECK,
    MM_HEALTH_WATCH,
    MM_ADMIN, /* leased.admin.v1.Admin, any method */
    MM_OTHER, /* any method leased does not serve */
    MM_COUNT,
};

#define METRIC_CODES STATUS_CODES /* gRPC status codes 0..16 */
#define METRIC_BUCKETS 16

struct histogram {
    const double *bounds; /* upper bounds, ascending, nbounds of them */
    size_t nbounds;
    _Atomic uint64_t counts[METRIC_BUCKETS]; /* per bucket, not cumulative */
    _Atomic uint64_t count;
    _Atomic uint64_t sum_micros; /* sum of observations x 1e6 */
};

struct metrics {
    _Atomic uint64_t requests[MM_COUNT][METRIC_CODES];
    struct histogram latency[3]; /* Acquire, Renew, Release: seconds */
    _Atomic uint64_t takeovers, expiries, reclaims, revokes, clock_steps;
    _Atomic int64_t leases_live, lease_entries, queue_depth, waiting_calls;
    _Atomic int64_t watch_streams;
    _Atomic int64_t quarantine_remaining_ms;
    _Atomic bool storage_failing;
    struct histogram batch_changes;  /* changes per commit */
    struct histogram commit_seconds; /* store_apply */
    struct histogram fsync_seconds;  /* store_sync */
    /* Over PostgreSQL (shown only then): */
    bool postgres;
    struct histogram pg_round_trip_seconds; /* one batch's transaction */
    struct histogram pg_batch_calls;        /* calls per transaction */
    _Atomic uint64_t pg_failovers, pg_errors, pg_clock_steps, pg_warnings;
    int64_t start_time_s;
};

extern struct metrics metrics;

/* Sets the histograms' buckets and the start time; call once at start. */
void metrics_init(void);

/* Adds one observation (in seconds, or a plain count). Any thread. */
void metrics_observe(struct histogram *h, double value);

void metrics_count_request(enum metric_method m, int grpc_code);

/* The method a call of op is counted by: its own for a lease call,
 * MM_ADMIN for any admin call. */
enum metric_method metrics_method(enum request_op op);

/* Lets another part add its own metrics to the exposition text:
 * write(arg, f) writes them (any thread, while a scrape renders). Set it
 * before --metrics-listen serves; NULL removes it. */
void metrics_set_extra(void (*write)(void *arg, FILE *f), void *arg);

/* Writes the exposition text (Prometheus text format 0.0.4) of every
 * metric to a new malloc'd string (*len bytes). Returns NULL when out of
 * memory. */
char *metrics_render(size_t *len);

#endif
