/*
 * leasebench: shared types. A run has threads; each thread has slots (one
 * call in flight each) and a target (the system under test's client).
 * The workload (workload.c) decides each slot's next operation and keeps
 * what the slot holds, so that every measured operation is one that
 * succeeds in its intent; the target only carries it out.
 */
#ifndef LEASEBENCH_BENCH_H
#define LEASEBENCH_BENCH_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hist.h"

enum bench_op { OP_ACQUIRE, OP_RENEW, OP_RELEASE, OP_COUNT };

/* How an operation ended. */
enum bench_result {
    RESULT_OK,
    RESULT_HELD,  /* held by another owner / lost: the contend workload's
                     expected refusal, an error elsewhere */
    RESULT_ERROR, /* any other failure; `status` says which */
};

enum bench_workload { WL_RENEW, WL_CHURN, WL_CONTEND };

enum bench_phase { PHASE_PREPARE, PHASE_WARMUP, PHASE_MEASURE, PHASE_STOP };

#define STATUS_MAX 32 /* gRPC status codes and a few of our own */
#define STATUS_CONNECT 20 /* the target could not carry the call out */

struct bench_run;
struct bench_thread;

/* A lease a slot may hold. */
struct held {
    bool held;
    uint64_t token;   /* the lease's fencing token (0 if none) */
    int64_t lease_id; /* a target's own handle (etcd lease id) */
};

struct slot {
    struct bench_thread *thread;
    int id;
    char owner[48];
    /* Sessions this slot works on (indices into the run's names). */
    uint32_t *sessions;
    size_t nsessions;
    struct held *held; /* one per session, in the same order */
    size_t prepared;   /* renew workload: sessions acquired so far */
    bool ready;        /* done preparing (counted in run->ready_slots) */
    /* The operation in flight, if busy. */
    bool busy;
    enum bench_op op;
    size_t cur; /* index into sessions */
    int64_t start_ns;
    void *target; /* the target's per-slot state */
};

struct bench_target_ops {
    const char *scheme; /* "leased", "null", "etcd", "redis" */
    /* Per thread: connect to host:port (borrowed). Returns 0 or -1. */
    int (*thread_init)(struct bench_thread *t, const char *hostport);
    /* Starts s->op on session s->sessions[s->cur]. When it ends, the
     * target calls bench_done() from the thread's loop: never from inside
     * start() itself (report a failure to start on the next tick). */
    void (*start)(struct slot *s);
    /* Runs the thread's event loop until bench_thread_finished(). */
    void (*run)(struct bench_thread *t);
    void (*thread_close)(struct bench_thread *t);
};

struct bench_thread {
    struct bench_run *run;
    int id;
    struct slot *slots;
    size_t nslots;
    size_t in_flight;
    void *target; /* the target's per-thread state */
    /* Results of the measured phase. */
    struct hist hist;
    uint64_t ops[OP_COUNT];
    uint64_t held;
    uint64_t errors[STATUS_MAX];
    uint64_t unexpected_held;
};

struct bench_run {
    const struct bench_target_ops *target;
    const char *hostport;
    enum bench_workload workload;
    size_t sessions;
    size_t concurrency;
    size_t connections;
    size_t threads;
    int64_t ttl_ms; /* for targets that must say it (redis, etcd) */
    char **names;   /* session names */
    _Atomic int phase;
    atomic_size_t ready_slots; /* renew: slots done preparing */
};

/* Called by a target when slot s's operation ended. result: RESULT_OK
 * with the lease's token (and lease_id) on Acquire/Renew; status: the
 * gRPC status (or STATUS_CONNECT) of an error. Starts the slot's next
 * operation unless the run is stopping; after an error the slot rests
 * until the next tick, so that a failing target is not hammered. */
void bench_done(struct slot *s, enum bench_result result, int status,
                uint64_t token, int64_t lease_id);

/* Called by a target's loop now and then (say every 50 ms): starts the
 * slots that had nothing to do, once the phase lets them. */
void bench_tick(struct bench_thread *t);

/* True when the thread's loop may return: stopping and nothing in
 * flight. */
bool bench_thread_finished(const struct bench_thread *t);

/* Monotonic nanoseconds. */
int64_t bench_now_ns(void);

/* The workload (workload.c): picks s's next op and session. Returns false
 * when the slot has nothing to do in this phase. */
bool workload_next(struct slot *s, enum bench_workload w, int phase);
/* Applies the outcome of s's op to what the slot holds. Returns true when
 * the outcome is the intended one for this workload. */
bool workload_apply(struct slot *s, enum bench_workload w,
                    enum bench_result result, uint64_t token,
                    int64_t lease_id);

#endif
