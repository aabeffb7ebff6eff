/*
 * The gRPC front end (see frontend.h).
 *
 * Each call is a struct rpc, used by one thread at a time:
 *
 *   ARMED    requested from the server for a lease method; the
 *            completion-queue (CQ) thread gets it when a call arrives,
 *            arms a successor, decodes it, and either answers it (bad
 *            input, queue full) -> SENDING, or queues it -> AT_LOOP
 *   UNKNOWN  requested for any other method -> SENDING (UNIMPLEMENTED)
 *   AT_LOOP  owned by the loop until frontend_reply() puts it on the
 *            reply list -> READY
 *   READY    on the reply list; the CQ thread encodes and sends the
 *            reply -> SENDING
 *   SENDING  the final batch completes; the CQ thread frees it
 *
 * Replies are built and started on the CQ thread: a batch started there
 * needs no hop through gRPC's executor (measured: 10-20% CPU). The reply
 * list goes back in one piece: the reply that finds it empty posts an
 * empty batch on its call, which completes at once on the queue, and the
 * CQ thread then sends every reply on the list; one wake-up carries a
 * whole batch. Only the head of the list can have an empty batch pending,
 * and only that batch's completion takes the list (a reply that finds the
 * list non-empty posts nothing), so no rpc is freed while its empty batch
 * is pending.
 *
 * Drain: the loop sets `draining`. Health turns NOT_SERVING, Watch
 * streams end, calls that arrive now are refused (UNAVAILABLE), nothing
 * new is armed, and the calls in progress are answered as usual. Only
 * once none is left and LINGER_MS went by does the CQ thread shut the
 * server down: closing a connection before the client read its last
 * replies can reset it (measured: a reply or two lost in 1 of 20 drains
 * of 100 calls when gRPC closed at once). gRPC then sends GOAWAY, armed
 * requests complete unsuccessfully and are freed, clients close their
 * connections; after another LINGER_MS, or --drain-timeout after the
 * drain began, it cancels what is left, which also closes idle
 * connections. The thread ends once the notify tag has arrived and no
 * rpc is left, then destroys the server and the queue and wakes the loop.
 */
#include "frontend.h"

#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "codec.h"
#include "listeners.h"
#include "log.h"
#include "metrics.h"
#include "peers.h"

#define ARMED_PER_METHOD 16
#define ARMED_UNKNOWN 2
#define NMETHODS 6 /* enum request_op: the lease and admin methods */
#define ARMED_ADMIN 2 /* per admin method */
#define ARMED_HEALTH 2 /* per health method */
#define LINGER_MS 200   /* see Drain above */
#define TICK_MS 50      /* the CQ thread's wake-up while draining */

enum rpc_state {
    RPC_ARMED,
    RPC_UNKNOWN,
    RPC_HEALTH, /* requested for Check or Watch (see health) */
    RPC_AT_LOOP,
    RPC_READY,
    RPC_SENDING,
    RPC_WATCHING,
};

/* grpc.health.v1 ServingStatus numbers. */
enum { HEALTH_SERVING = 1, HEALTH_NOT_SERVING = 2, HEALTH_UNKNOWN_SERVICE = 3 };

struct rpc {
    struct request req; /* first: the loop sees only this */
    struct frontend *fe;
    /* Atomic so that the hand-back from the loop (frontend_reply) orders
     * the loop's writes to req before the CQ thread reads them in a way
     * ThreadSanitizer can see; gRPC's queue orders them too. */
    _Atomic enum rpc_state state;
    grpc_call *call;
    gpr_timespec deadline;
    grpc_metadata_array metadata;
    grpc_byte_buffer *payload;
    grpc_call_details details; /* RPC_UNKNOWN only */
    void *msg;                 /* decoded message req points into */
    grpc_byte_buffer *body;    /* reply message */
    grpc_slice status_details;
    int cancelled;
    struct rpc *next_reply; /* the reply list */

    enum metric_method method; /* for metrics */
    int64_t accepted_ns;       /* lease calls: when they arrived */

    /* Health calls (RPC_HEALTH, RPC_WATCHING). */
    bool watch;                /* Watch rather than Check */
    bool watch_known;          /* the service asked about is one we serve */
    int watch_sent;            /* the status last sent; 0 none yet */
    bool watch_sending;        /* a send batch is pending */
    bool watch_closed;         /* the call is over (close batch done) */
    bool watch_ending;         /* the final status went out */
    struct rpc *next_watcher;
};

struct frontend {
    uv_loop_t *loop;
    grpc_server *server;
    grpc_completion_queue *cq;
    void *methods[NMETHODS];
    void *health_methods[2]; /* Check, Watch */
    size_t max_pending;
    int64_t drain_ms;
    atomic_bool serving; /* storage healthy (set by the loop) */
    struct tokens *tokens;
    struct tokens *admin_tokens; /* admin calls' own, or NULL */
    bool log_identities; /* clients present certificates */
    struct frontend_callbacks cb;

    /* The hand-off: the CQ thread appends, the loop takes everything. */
    pthread_mutex_t lock;
    struct request *head, *tail;
    uv_async_t async;
    /* The hand-back: the loop appends, the CQ thread takes everything. */
    struct rpc *replies, *replies_tail;
    atomic_size_t pending; /* handed to the loop, not yet answered */

    /* CQ thread only (and the creating thread before it starts). */
    struct peers peers;
    struct rpc *watchers; /* open Watch streams */
    int health_seen;      /* the status watchers were last updated to */
    pthread_t thread;
    bool thread_started;
    size_t live;  /* rpcs allocated */
    size_t armed; /* of which requested from the server, no call yet */
    int64_t drain_began_ms; /* 0 before the CQ thread saw the drain */
    int64_t idle_since_ms;  /* no call in progress since; 0 while busy */
    int64_t closed_at_ms;   /* the server was shut down; 0 before */
    bool notified;          /* the shutdown tag came back */
    bool cancelled_all;

    atomic_bool draining; /* set by the loop */
    atomic_bool thread_done;
    bool stopped_reported; /* loop only */
    char shutdown_tag;     /* its address is the tag */
};

static const grpc_status_code status_codes[] = {
    [REPLY_OK] = GRPC_STATUS_OK,
    [REPLY_HELD] = GRPC_STATUS_FAILED_PRECONDITION,
    [REPLY_INVALID] = GRPC_STATUS_INVALID_ARGUMENT,
    [REPLY_UNAVAILABLE] = GRPC_STATUS_UNAVAILABLE,
    [REPLY_EXHAUSTED] = GRPC_STATUS_RESOURCE_EXHAUSTED,
    [REPLY_INTERNAL] = GRPC_STATUS_INTERNAL,
    [REPLY_NOT_FOUND] = GRPC_STATUS_NOT_FOUND,
};

static void rpc_free(struct rpc *r)
{
    struct frontend *fe = r->fe;
    codec_free(r->msg);
    admin_result_free(r->req.admin);
    grpc_byte_buffer_destroy(r->payload);
    grpc_byte_buffer_destroy(r->body);
    grpc_slice_unref(r->status_details);
    grpc_metadata_array_destroy(&r->metadata);
    grpc_call_details_destroy(&r->details);
    if (r->call != NULL)
        grpc_call_unref(r->call);
    free(r);
    fe->live--;
}

static struct rpc *rpc_new(struct frontend *fe, enum rpc_state state)
{
    struct rpc *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return NULL;
    r->fe = fe;
    r->state = state;
    r->status_details = grpc_empty_slice();
    grpc_metadata_array_init(&r->metadata);
    grpc_call_details_init(&r->details);
    fe->live++;
    return r;
}

/* Requests the next call, unless shutting down: of lease method `method`
 * (state RPC_ARMED), of any unknown method (RPC_UNKNOWN), or of Check
 * (method 0) or Watch (1) (RPC_HEALTH). */
static void arm(struct frontend *fe, enum rpc_state state, int method)
{
    if (atomic_load(&fe->draining))
        return;
    struct rpc *r = rpc_new(fe, state);
    if (r == NULL) {
        log_error("arm_failed", "reason=\"out of memory\"");
        return;
    }
    void *registered = NULL;
    r->method = MM_OTHER;
    if (state == RPC_ARMED) {
        r->req.op = (enum request_op)method;
        r->method = method >= OP_GET ? MM_ADMIN
                                     : (enum metric_method)(MM_ACQUIRE + method);
        registered = fe->methods[method];
    } else if (state == RPC_HEALTH) {
        r->watch = method == 1;
        r->method = r->watch ? MM_HEALTH_WATCH : MM_HEALTH_CHECK;
        registered = fe->health_methods[method];
    }
    grpc_call_error err =
        registered == NULL
            ? grpc_server_request_call(fe->server, &r->call, &r->details,
                                       &r->metadata, fe->cq, fe->cq, r)
            : grpc_server_request_registered_call(
                  fe->server, registered, &r->call, &r->deadline,
                  &r->metadata, &r->payload, fe->cq, fe->cq, r);
    if (err != GRPC_CALL_OK) {
        log_error("arm_failed", "grpc_call_error=%d", (int)err);
        rpc_free(r);
        return;
    }
    fe->armed++;
}

/* Starts the final batch: the status, and the message when body is set
 * (taken). */
static void send_reply(struct rpc *r, grpc_status_code code,
                       const char *details, grpc_byte_buffer *body)
{
    grpc_op ops[4];
    memset(ops, 0, sizeof(ops));
    size_t n = 0;
    ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
    if (body != NULL) {
        r->body = body;
        ops[n].op = GRPC_OP_SEND_MESSAGE;
        ops[n++].data.send_message.send_message = body;
    }
    if (details != NULL && details[0] != '\0')
        r->status_details = grpc_slice_from_copied_string(details);
    ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[n].data.send_status_from_server.status = code;
    ops[n++].data.send_status_from_server.status_details =
        GRPC_SLICE_LENGTH(r->status_details) > 0 ? &r->status_details : NULL;
    ops[n].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    ops[n++].data.recv_close_on_server.cancelled = &r->cancelled;
    metrics_count_request(r->method, (int)code);
    if (r->accepted_ns != 0)
        metrics_observe(&metrics.latency[r->method],
                        (double)(clock_mono_ns() - r->accepted_ns) / 1e9);
    r->state = RPC_SENDING;
    grpc_call_error err = grpc_call_start_batch(r->call, ops, n, r, NULL);
    if (err != GRPC_CALL_OK) {
        log_error("reply_failed", "grpc_call_error=%d", (int)err);
        rpc_free(r);
    }
}

static grpc_byte_buffer *make_body(const uint8_t *buf, size_t n)
{
    grpc_slice s = grpc_slice_from_copied_buffer((const char *)buf, n);
    grpc_byte_buffer *body = grpc_raw_byte_buffer_create(&s, 1);
    grpc_slice_unref(s);
    return body;
}

static void reply_request(struct rpc *r)
{
    grpc_byte_buffer *body = NULL;
    if (r->req.status == REPLY_OK && r->req.op >= OP_GET) {
        size_t n;
        uint8_t *buf = codec_encode_admin(&r->req, &n);
        if (buf == NULL) {
            send_reply(r, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory",
                       NULL);
            return;
        }
        body = make_body(buf, n);
        free(buf);
    } else if (r->req.status == REPLY_OK) {
        uint8_t buf[CODEC_REPLY_MAX];
        body = make_body(buf, codec_encode_reply(&r->req, buf, sizeof(buf)));
    }
    send_reply(r, status_codes[r->req.status], r->req.reason, body);
}

/* The request message in one slice (unref it), or false when there is
 * none or it cannot be read. */
static bool read_payload(struct rpc *r, grpc_slice *out)
{
    grpc_byte_buffer_reader reader;
    if (r->payload == NULL || !grpc_byte_buffer_reader_init(&reader,
                                                            r->payload))
        return false;
    *out = grpc_byte_buffer_reader_readall(&reader);
    grpc_byte_buffer_reader_destroy(&reader);
    return true;
}

static void hand_off(struct frontend *fe, struct rpc *r)
{
    if (atomic_fetch_add(&fe->pending, 1) >= fe->max_pending) {
        atomic_fetch_sub(&fe->pending, 1);
        r->req.status = REPLY_EXHAUSTED;
        snprintf(r->req.reason, sizeof(r->req.reason),
                 "too many requests in progress");
        reply_request(r);
        return;
    }
    atomic_fetch_add(&metrics.queue_depth, 1);
    r->state = RPC_AT_LOOP;
    r->req.next = NULL;
    pthread_mutex_lock(&fe->lock);
    if (fe->tail != NULL)
        fe->tail->next = &r->req;
    else
        fe->head = &r->req;
    fe->tail = &r->req;
    pthread_mutex_unlock(&fe->lock);
    uv_async_send(&fe->async);
}

/* Checks the call's bearer token and notes its connection; false when
 * the call was answered UNAUTHENTICATED. */
static bool admit(struct rpc *r)
{
    struct frontend *fe = r->fe;
    if (fe->log_identities)
        peers_note(&fe->peers, r->call);
    struct tokens *tokens =
        r->state == RPC_ARMED && r->req.op >= OP_GET && fe->admin_tokens
            ? fe->admin_tokens
            : fe->tokens;
    if (tokens == NULL)
        return true;
    for (size_t i = 0; i < r->metadata.count; i++) {
        const grpc_metadata *m = &r->metadata.metadata[i];
        if (grpc_slice_str_cmp(m->key, "authorization") == 0 &&
            tokens_check(tokens,
                         (const char *)GRPC_SLICE_START_PTR(m->value),
                         GRPC_SLICE_LENGTH(m->value)))
            return true;
    }
    log_debug("unauthenticated", NULL);
    send_reply(r, GRPC_STATUS_UNAUTHENTICATED,
               "missing or unknown bearer token", NULL);
    return false;
}

/* A lease call arrived: decode it, answer bad input at once. */
static void accept_call(struct rpc *r)
{
    struct frontend *fe = r->fe;
    enum request_op op = r->req.op;
    if (op < OP_GET)
        r->accepted_ns = clock_mono_ns();
    arm(fe, RPC_ARMED, op);
    if (atomic_load(&fe->draining)) {
        send_reply(r, GRPC_STATUS_UNAVAILABLE, "draining", NULL);
        return;
    }
    if (!admit(r))
        return;
    grpc_slice s;
    if (!read_payload(r, &s)) {
        r->req.status = REPLY_INVALID;
        snprintf(r->req.reason, sizeof(r->req.reason), "no request message");
        reply_request(r);
        return;
    }
    int rc = codec_decode(op, GRPC_SLICE_START_PTR(s), GRPC_SLICE_LENGTH(s),
                          &r->req, &r->msg);
    grpc_slice_unref(s);
    if (rc != 0) {
        log_debug("bad_request", "reason=\"%s\"", r->req.reason);
        reply_request(r);
        return;
    }
    hand_off(fe, r);
}

static void reject_unknown(struct rpc *r)
{
    arm(r->fe, RPC_UNKNOWN, 0);
    if (!admit(r))
        return;
    char *method = grpc_slice_to_c_string(r->details.method);
    char details[256];
    snprintf(details, sizeof(details), "unknown method %s", method);
    log_debug("unimplemented", "method=%s", method);
    gpr_free(method);
    send_reply(r, GRPC_STATUS_UNIMPLEMENTED, details, NULL);
}

/* --- grpc.health.v1 ------------------------------------------------------
 *
 * Answered on this thread, without a bearer token (probes send none), for
 * the whole server ("") and the lease service: NOT_SERVING while the
 * storage fails or once draining began, SERVING otherwise. A Watch stream
 * has two batches: RECV_CLOSE_ON_SERVER, pending until the call is over
 * (its tag is the rpc's address + 1), and at most one send at a time; it
 * gets each new status, and when draining, NOT_SERVING and then its end.
 */

static int health_now(struct frontend *fe)
{
    return atomic_load(&fe->draining) || !atomic_load(&fe->serving)
               ? HEALTH_NOT_SERVING
               : HEALTH_SERVING;
}

static void *close_tag(struct rpc *r)
{
    return (char *)r + 1; /* rpcs are malloc'd: the low bit is free */
}

static void watcher_free(struct rpc *r)
{
    struct frontend *fe = r->fe;
    struct rpc **p = &fe->watchers;
    while (*p != r)
        p = &(*p)->next_watcher;
    *p = r->next_watcher;
    rpc_free(r);
}

/* Sends what the watcher has not seen yet: a new status, or, when
 * draining and it has seen NOT_SERVING, the end of the stream. */
static void watch_update(struct rpc *r)
{
    struct frontend *fe = r->fe;
    if (r->watch_sending || r->watch_closed || r->watch_ending)
        return;
    int want = r->watch_known ? health_now(fe) : HEALTH_UNKNOWN_SERVICE;
    grpc_op ops[2];
    memset(ops, 0, sizeof(ops));
    size_t n = 0;
    if (want != r->watch_sent) {
        if (r->watch_sent == 0)
            ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
        uint8_t buf[CODEC_REPLY_MAX];
        grpc_byte_buffer_destroy(r->body);
        r->body = make_body(buf, codec_encode_health(want, buf, sizeof(buf)));
        ops[n].op = GRPC_OP_SEND_MESSAGE;
        ops[n++].data.send_message.send_message = r->body;
        r->watch_sent = want;
    } else if (atomic_load(&fe->draining)) {
        ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
        ops[n++].data.send_status_from_server.status = GRPC_STATUS_OK;
        r->watch_ending = true;
        metrics_count_request(MM_HEALTH_WATCH, GRPC_STATUS_OK);
    } else {
        return;
    }
    if (grpc_call_start_batch(r->call, ops, n, r, NULL) == GRPC_CALL_OK) {
        r->watch_sending = true;
    } else {
        log_error("watch_failed", NULL);
        r->watch_ending = true;
        grpc_call_cancel(r->call, NULL);
    }
}

/* Brings every watcher up to date once the status changed, and while
 * draining. */
static void update_watchers(struct frontend *fe)
{
    int now = health_now(fe);
    if (now == fe->health_seen && !atomic_load(&fe->draining))
        return;
    fe->health_seen = now;
    for (struct rpc *w = fe->watchers; w != NULL; w = w->next_watcher)
        watch_update(w);
}

/* A Check or Watch call arrived. */
static void accept_health(struct rpc *r)
{
    struct frontend *fe = r->fe;
    arm(fe, RPC_HEALTH, r->watch);
    char service[256];
    grpc_slice s;
    bool ok = read_payload(r, &s);
    if (ok) {
        ok = codec_decode_health(GRPC_SLICE_START_PTR(s),
                                 GRPC_SLICE_LENGTH(s), service,
                                 sizeof(service)) == 0;
        grpc_slice_unref(s);
    }
    if (!ok) {
        send_reply(r, GRPC_STATUS_INVALID_ARGUMENT,
                   "malformed HealthCheckRequest", NULL);
        return;
    }
    bool known = service[0] == '\0' ||
                 strcmp(service, codec_lease_service_name()) == 0;
    if (!r->watch) {
        uint8_t buf[CODEC_REPLY_MAX];
        if (known)
            send_reply(r, GRPC_STATUS_OK, NULL,
                       make_body(buf, codec_encode_health(health_now(fe), buf,
                                                          sizeof(buf))));
        else
            send_reply(r, GRPC_STATUS_NOT_FOUND, "unknown service", NULL);
        return;
    }
    r->state = RPC_WATCHING;
    r->watch_known = known;
    r->next_watcher = fe->watchers;
    fe->watchers = r;
    grpc_op op;
    memset(&op, 0, sizeof(op));
    op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    op.data.recv_close_on_server.cancelled = &r->cancelled;
    if (grpc_call_start_batch(r->call, &op, 1, close_tag(r), NULL) !=
        GRPC_CALL_OK) {
        log_error("watch_failed", NULL);
        watcher_free(r);
        return;
    }
    watch_update(r);
}

/* A watcher's send batch completed. */
static void watch_sent(struct rpc *r, bool success)
{
    r->watch_sending = false;
    if (r->watch_closed) {
        watcher_free(r);
        return;
    }
    if (!success)
        r->watch_ending = true; /* the stream broke; its close follows */
    watch_update(r);
}

/* A watcher's call is over. */
static void watch_closed(struct rpc *r)
{
    r->watch_closed = true;
    if (!r->watch_sending)
        watcher_free(r);
}

/* Sends every reply the loop handed back. */
static void send_replies(struct frontend *fe)
{
    pthread_mutex_lock(&fe->lock);
    struct rpc *r = fe->replies;
    fe->replies = fe->replies_tail = NULL;
    pthread_mutex_unlock(&fe->lock);
    while (r != NULL) {
        struct rpc *next = r->next_reply;
        reply_request(r);
        r = next;
    }
}

static void on_event(struct frontend *fe, grpc_event ev)
{
    if (ev.tag == &fe->shutdown_tag) {
        fe->notified = true;
        return;
    }
    if ((uintptr_t)ev.tag & 1) {
        watch_closed((struct rpc *)((char *)ev.tag - 1));
        return;
    }
    struct rpc *r = ev.tag;
    if (r->state == RPC_ARMED || r->state == RPC_UNKNOWN ||
        r->state == RPC_HEALTH)
        fe->armed--;
    switch (r->state) {
    case RPC_ARMED:
        if (ev.success)
            accept_call(r);
        else
            rpc_free(r); /* the server is shutting down */
        return;
    case RPC_UNKNOWN:
        if (ev.success)
            reject_unknown(r);
        else
            rpc_free(r);
        return;
    case RPC_HEALTH:
        if (ev.success)
            accept_health(r);
        else
            rpc_free(r);
        return;
    case RPC_WATCHING:
        watch_sent(r, ev.success);
        return;
    case RPC_READY:
        send_replies(fe);
        return;
    case RPC_SENDING:
        rpc_free(r);
        return;
    case RPC_AT_LOOP:
        break;
    }
    abort(); /* an event for an rpc the loop owns */
}

static int64_t now_ms(void)
{
    return clock_mono_ns() / 1000000;
}

/* A step of the drain (see Drain above), on each wake-up while draining. */
static void drain(struct frontend *fe)
{
    int64_t now = now_ms();
    if (fe->drain_began_ms == 0)
        fe->drain_began_ms = now;
    bool busy = fe->live != fe->armed;
    if (busy)
        fe->idle_since_ms = 0;
    else if (fe->idle_since_ms == 0)
        fe->idle_since_ms = now;
    bool late = now - fe->drain_began_ms > fe->drain_ms;
    if (fe->closed_at_ms == 0) {
        if (!late && (busy || now - fe->idle_since_ms < LINGER_MS))
            return;
        fe->closed_at_ms = now;
        grpc_server_shutdown_and_notify(fe->server, fe->cq, &fe->shutdown_tag);
        if (!late)
            return;
    } else if (!late && now - fe->closed_at_ms < LINGER_MS) {
        return;
    }
    if (busy)
        log_warn("cancelling_calls", "after_ms=%lld", (long long)fe->drain_ms);
    grpc_server_cancel_all_calls(fe->server);
    fe->cancelled_all = true;
}

static void *cq_thread(void *arg)
{
    struct frontend *fe = arg;
    for (;;) {
        if (fe->notified && fe->live == 0)
            break;
        bool draining = atomic_load(&fe->draining);
        grpc_event ev = grpc_completion_queue_next(
            fe->cq, gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                                 gpr_time_from_millis(draining ? TICK_MS : 200,
                                                      GPR_TIMESPAN)),
            NULL);
        if (ev.type == GRPC_OP_COMPLETE)
            on_event(fe, ev);
        update_watchers(fe);
        if (draining && !fe->cancelled_all)
            drain(fe);
    }
    grpc_server_destroy(fe->server);
    grpc_completion_queue_shutdown(fe->cq);
    while (grpc_completion_queue_next(fe->cq,
                                      gpr_inf_future(GPR_CLOCK_REALTIME), NULL)
               .type != GRPC_QUEUE_SHUTDOWN)
        ;
    grpc_completion_queue_destroy(fe->cq);
    atomic_store(&fe->thread_done, true);
    uv_async_send(&fe->async);
    return NULL;
}

/* On the loop: new requests, or the thread's end. */
static void on_async(uv_async_t *h)
{
    struct frontend *fe = h->data;
    pthread_mutex_lock(&fe->lock);
    struct request *list = fe->head;
    fe->head = fe->tail = NULL;
    pthread_mutex_unlock(&fe->lock);
    if (list != NULL)
        fe->cb.requests(fe->cb.arg, list);
    if (atomic_load(&fe->thread_done) && !fe->stopped_reported) {
        fe->stopped_reported = true;
        fe->cb.stopped(fe->cb.arg);
    }
}

void frontend_reply(struct frontend *fe, struct request *req)
{
    struct rpc *r = (struct rpc *)req;
    grpc_call *call = r->call;
    atomic_fetch_sub(&fe->pending, 1);
    atomic_fetch_sub(&metrics.queue_depth, 1);
    r->state = RPC_READY;
    r->next_reply = NULL;
    pthread_mutex_lock(&fe->lock);
    bool first = fe->replies == NULL;
    if (first)
        fe->replies = r;
    else
        fe->replies_tail->next_reply = r;
    fe->replies_tail = r;
    pthread_mutex_unlock(&fe->lock);
    if (!first)
        return; /* the head's empty batch brings the CQ thread */
    grpc_call_error err = grpc_call_start_batch(call, NULL, 0, r, NULL);
    if (err != GRPC_CALL_OK) {
        log_error("handback_failed", "grpc_call_error=%d", (int)err);
        abort();
    }
}

void frontend_set_serving(struct frontend *fe, bool serving)
{
    atomic_store(&fe->serving, serving);
}

void frontend_shutdown(struct frontend *fe)
{
    atomic_store(&fe->draining, true);
}

static void on_close(uv_handle_t *h)
{
    struct frontend *fe = h->data;
    pthread_mutex_destroy(&fe->lock);
    free(fe);
}

void frontend_destroy(struct frontend *fe)
{
    if (fe == NULL)
        return;
    if (fe->thread_started)
        pthread_join(fe->thread, NULL);
    uv_close((uv_handle_t *)&fe->async, on_close);
}

struct frontend *frontend_create(uv_loop_t *loop,
                                 const struct frontend_options *opts,
                                 const struct frontend_callbacks *cb,
                                 char *errmsg, size_t errmsg_len)
{
    struct frontend *fe = calloc(1, sizeof(*fe));
    if (fe == NULL) {
        snprintf(errmsg, errmsg_len, "out of memory");
        return NULL;
    }
    fe->loop = loop;
    fe->max_pending = opts->max_pending;
    fe->drain_ms = opts->drain_ns / 1000000;
    atomic_store(&fe->serving, true);
    fe->tokens = opts->tokens;
    fe->admin_tokens = opts->admin_tokens;
    fe->log_identities =
        opts->tls != NULL && tls_requires_client_cert(opts->tls);
    fe->cb = *cb;
    pthread_mutex_init(&fe->lock, NULL);

    fe->server = listeners_server_create(opts->limits);
    fe->cq = grpc_completion_queue_create_for_next(NULL);
    grpc_server_register_completion_queue(fe->server, fe->cq, NULL);
    for (int op = 0; op < NMETHODS; op++) {
        char path[128];
        codec_method_path((enum request_op)op, path, sizeof(path));
        fe->methods[op] = grpc_server_register_method(
            fe->server, path, NULL, GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER,
            0);
    }
    for (int watch = 0; watch < 2; watch++) {
        char path[128];
        codec_health_path(watch, path, sizeof(path));
        fe->health_methods[watch] = grpc_server_register_method(
            fe->server, path, NULL, GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER,
            0);
    }
    if (listeners_bind(fe->server, opts, errmsg, errmsg_len) != 0) {
        grpc_server_destroy(fe->server);
        grpc_completion_queue_shutdown(fe->cq);
        while (grpc_completion_queue_next(
                   fe->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL)
                   .type != GRPC_QUEUE_SHUTDOWN)
            ;
        grpc_completion_queue_destroy(fe->cq);
        pthread_mutex_destroy(&fe->lock);
        free(fe);
        return NULL;
    }

    uv_async_init(loop, &fe->async, on_async);
    fe->async.data = fe;
    for (int op = 0; op < NMETHODS; op++) {
        int n = op >= OP_GET ? ARMED_ADMIN : ARMED_PER_METHOD;
        for (int i = 0; i < n; i++)
            arm(fe, RPC_ARMED, op);
    }
    for (int i = 0; i < ARMED_UNKNOWN; i++)
        arm(fe, RPC_UNKNOWN, 0);
    for (int i = 0; i < ARMED_HEALTH; i++) {
        arm(fe, RPC_HEALTH, 0);
        arm(fe, RPC_HEALTH, 1);
    }
    fe->thread_started = pthread_create(&fe->thread, NULL, cq_thread, fe) == 0;
    if (!fe->thread_started) {
        snprintf(errmsg, errmsg_len, "cannot start the gRPC thread");
        /* Unreachable in practice; exiting the process is the cleanup. */
        return NULL;
    }
    return fe;
}
