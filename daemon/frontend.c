/*
 * The gRPC front end (see frontend.h).
 *
 * Each lease, admin or unknown-method call is a struct rpc, used by one
 * thread at a time. It moves through rpc_states[], a checked state machine
 * (core/sm.h: every move is checked against the table, and in debug
 * builds rpc_invariant() then checks the fields the new state promises):
 *
 *                  +-------------------------------------+
 *                  |                                     v
 *   REQUESTED -----+------------------> SENDING -----> DONE
 *        |                                 ^
 *        v                                 |
 *     AT_LOOP ----------> READY -----------+
 *
 *   REQUESTED  requested from the server; gRPC fills in its call when one
 *              arrives, and the completion-queue (CQ) thread then requests
 *              a successor. Initial.
 *   AT_LOOP    a known method's call, decoded and queued for the loop,
 *              which owns it until it answers; no reply built yet
 *   READY      answered by the loop, on the reply list
 *   SENDING    its final batch (status, and the message if any) is pending
 *   DONE       freed. Final.
 *
 * The moves, and who makes them:
 *   REQUESTED -> SENDING  CQ thread: answered at once (draining, no or a
 *                         wrong bearer token, bad input, policy, queue
 *                         full, an unknown method, or decided by the mode
 *                         as it arrived: mode_arrive()); send_reply()
 *   REQUESTED -> AT_LOOP  CQ thread: hand_off() queues it for the loop
 *   REQUESTED -> DONE     CQ thread: the request failed, the server is
 *                         shutting down (or it could not be made); rpc_free()
 *   AT_LOOP   -> READY    the loop: frontend_reply() puts it on the reply
 *                         list
 *   READY     -> SENDING  CQ thread: send_replies() starts its reply
 *   SENDING   -> DONE     CQ thread: the final batch completed, or could
 *                         not start (and a Wait's close came back);
 *                         rpc_free()
 *
 * An rpc has a tag for each of its batches (see struct frontend_tag):
 * `requested` (TAG_CALL: the call arrived, or the request failed),
 * `handback` (TAG_HANDBACK, below) and `reply` (TAG_REPLY, the final
 * batch); no two are pending at once, but for a Wait's `closed`.
 *
 * Waits: a Wait may stay at the loop, in its session's line, until its
 * deadline. As it is handed over, a batch of its own waits for the end
 * of its call (RECV_CLOSE_ON_SERVER, TAG_CLOSED), which comes early if
 * the call is cancelled, passes its deadline or loses its connection:
 * then, if the loop still has it, the CQ thread sets its request's
 * `ended` and wakes the loop, which drops it from the line
 * (mode_cancelled()) and answers it CANCELLED (sent into a call that is
 * over: gRPC drops it). Such an rpc is freed once both its close and its
 * reply came back. grpc.health.v1 calls are health.c's,
 * with tags and states of their own; the CQ thread hands their events
 * over.
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
 * Watch calls (leased.v1) are admitted here as any call, then become
 * streams of watch.c's, with tags of their own.
 *
 * Drain: the loop sets `draining`. Health turns NOT_SERVING and Watch
 * streams (health's and leased's) end; every call that arrives is still
 * requested and refused at once (UNAVAILABLE "draining", which a client may
 * retry elsewhere): a call left waiting in gRPC for a request would be
 * cancelled when the server shuts down (CANCELLED, which says nothing about its
 * fate). The calls in progress are answered as usual. Only once none is left
 * and LINGER_MS went by without a call does the CQ thread shut the server down:
 * closing a connection before the client read its last replies can reset it
 * (measured: a reply or two lost in 1 of 20 drains of 100 calls when gRPC
 * closed at once). gRPC then sends GOAWAY, requests complete unsuccessfully and
 * are freed, clients close their connections; after another LINGER_MS, or
 * --drain-timeout after the drain began, it cancels what is left, which also
 * closes idle connections. (gRPC itself cancels a call that reaches it after
 * the shutdown: one sent after LINGER_MS without any call, before its client
 * saw the GOAWAY. A client that keeps calling without a pause holds the drain
 * until --drain-timeout, when the shutdown and the cancel come together.) The
 * thread ends once the notify tag has arrived and no call is left, then
 * destroys the server and the queue and wakes the loop. The drain's steps are a
 * machine of their own, on the CQ thread:
 *
 *   SERVING -> DRAINING -> SHUT_DOWN -> CANCELLED
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

#include "audit.h"
#include "clock.h"
#include "codec.h"
#include "health.h"
#include "listeners.h"
#include "log.h"
#include "metrics.h"
#include "peers.h"
#include "sm.h"
#include "ttlheader.h"
#include "watch.h"

#define ARMED_PER_METHOD 16
#define ARMED_WATCH 4
#define ARMED_UNKNOWN 2
#define NMETHODS 10   /* enum request_op: the lease and admin methods */
#define ARMED_ADMIN 2 /* per admin method */
#define ARMED_HEALTH 2 /* per health method */
#define LINGER_MS 200   /* see Drain above */
#define TICK_MS 50      /* the CQ thread's wake-up while draining */
#define IDLE_TICK_MS 200 /* and otherwise */

_Static_assert(NMETHODS == OP_SNAPSHOT + 1, "one registered method per op");

enum rpc_state {
    RPC_REQUESTED,
    RPC_AT_LOOP,
    RPC_READY,
    RPC_SENDING,
    RPC_DONE,
    RPC_NSTATES,
};

static const struct sm_conf rpc_states[RPC_NSTATES] = {
    [RPC_REQUESTED] = {"REQUESTED", SM_INITIAL,
                       SM_TO(RPC_SENDING) | SM_TO(RPC_AT_LOOP) |
                           SM_TO(RPC_DONE)},
    [RPC_AT_LOOP] = {"AT_LOOP", 0, SM_TO(RPC_READY)},
    [RPC_READY] = {"READY", 0, SM_TO(RPC_SENDING)},
    [RPC_SENDING] = {"SENDING", 0, SM_TO(RPC_DONE)},
    [RPC_DONE] = {"DONE", SM_FINAL, 0},
};

enum drain_state {
    DRAIN_SERVING,   /* the CQ thread has not seen the drain yet */
    DRAIN_DRAINING,  /* refusing new calls, answering those in progress */
    DRAIN_SHUT_DOWN, /* grpc_server_shutdown_and_notify() called */
    DRAIN_CANCELLED, /* grpc_server_cancel_all_calls() called */
    DRAIN_NSTATES,
};

static const struct sm_conf drain_states[DRAIN_NSTATES] = {
    [DRAIN_SERVING] = {"SERVING", SM_INITIAL, SM_TO(DRAIN_DRAINING)},
    [DRAIN_DRAINING] = {"DRAINING", 0, SM_TO(DRAIN_SHUT_DOWN)},
    [DRAIN_SHUT_DOWN] = {"SHUT_DOWN", 0, SM_TO(DRAIN_CANCELLED)},
    [DRAIN_CANCELLED] = {"CANCELLED", SM_FINAL, 0},
};

struct rpc {
    struct request req; /* first: the loop sees only this */
    struct frontend_tag requested, handback, reply; /* see above */
    /* A Wait's: its call is over (see Waits above); it is freed once
     * this and `reply` both came back. */
    struct frontend_tag closed;
    bool watching_close, close_done, reply_done;
    struct frontend *fe;
    /* enum rpc_state. Its state is atomic (sm.h), so that the hand-back
     * from the loop (frontend_reply) orders the loop's writes to req
     * before the CQ thread reads them in a way ThreadSanitizer can see;
     * gRPC's queue orders them too. */
    struct sm sm;
    bool unknown; /* requested for any method leased does not serve */
    grpc_call *call;
    gpr_timespec deadline;
    grpc_metadata_array metadata;
    grpc_byte_buffer *payload;
    grpc_call_details details; /* unknown methods only */
    void *msg;                 /* decoded message req points into */
    grpc_byte_buffer *body;    /* reply message */
    grpc_slice status_details;
    grpc_metadata ttl; /* an OK Acquire or Renew's (ttlheader.h) */
    int cancelled;
    struct rpc *next_reply; /* the reply list */
    int64_t accepted_ns;    /* lease calls: when they arrived */
};

struct frontend {
    uv_loop_t *loop;
    grpc_server *server;
    grpc_completion_queue *cq;
    void *methods[NMETHODS];
    size_t max_pending;
    int64_t drain_ms;
    atomic_bool serving; /* storage healthy (set by the loop) */
    struct tokens *tokens;
    struct tokens *admin_tokens; /* admin calls' own, or NULL */
    struct policy *policy;       /* or NULL */
    bool client_certs; /* clients present certificates */
    struct frontend_callbacks cb;

    /* The hand-off: the CQ thread appends, the loop takes everything. */
    pthread_mutex_t lock;
    struct request *head, *tail;
    size_t queued; /* in the list */
    uv_async_t async;
    /* The hand-back: the loop appends, the CQ thread takes everything. */
    struct rpc *replies, *replies_tail;
    atomic_size_t pending; /* handed to the loop, not yet answered */
    atomic_size_t ended;   /* Waits the loop has whose calls ended */
    /* The loop is woken once this many requests wait; 0: not at all. */
    atomic_size_t want_at;

    /* CQ thread only (and the creating thread before it starts). */
    struct peers peers;
    struct log_limit denied_log, unauthenticated_log; /* audit.h */
    struct health health;
    struct watches watches;
    pthread_t thread;
    bool thread_started;
    size_t live;  /* rpcs allocated */
    size_t armed; /* of which requested from the server, no call yet */
    struct sm drain;        /* enum drain_state */
    int64_t drain_began_ms; /* DRAINING and after: when it began */
    int64_t idle_since_ms;  /* no call in progress since; 0 while busy */
    int64_t closed_at_ms;   /* SHUT_DOWN and after: when */
    bool notified;          /* the shutdown tag came back */
    struct frontend_tag shutdown_tag;

    atomic_bool draining; /* set by the loop */
    atomic_bool thread_done;
    bool stopped_reported; /* loop only */
};

static const grpc_status_code status_codes[] = {
    [REPLY_OK] = GRPC_STATUS_OK,
    [REPLY_HELD] = GRPC_STATUS_FAILED_PRECONDITION,
    [REPLY_INVALID] = GRPC_STATUS_INVALID_ARGUMENT,
    [REPLY_UNAVAILABLE] = GRPC_STATUS_UNAVAILABLE,
    [REPLY_EXHAUSTED] = GRPC_STATUS_RESOURCE_EXHAUSTED,
    [REPLY_INTERNAL] = GRPC_STATUS_INTERNAL,
    [REPLY_NOT_FOUND] = GRPC_STATUS_NOT_FOUND,
    [REPLY_DENIED] = GRPC_STATUS_PERMISSION_DENIED,
    [REPLY_CANCELLED] = GRPC_STATUS_CANCELLED,
    [REPLY_UNIMPLEMENTED] = GRPC_STATUS_UNIMPLEMENTED,
};

/* What each state promises of r's fields, checked by sm_move() in debug
 * builds, on the thread that made the move (which owns r then). */
static bool rpc_invariant(const struct sm *sm, int prev)
{
    const struct rpc *r = container_of(sm, struct rpc, sm);
    (void)prev;
    if (r->fe == NULL)
        return false;
    switch ((enum rpc_state)sm_state(sm)) {
    case RPC_REQUESTED: /* no call yet: gRPC fills it in */
        return r->call == NULL && r->body == NULL;
    case RPC_AT_LOOP: /* a known method's, no reply built yet */
    case RPC_READY:   /* the loop's answer is in req, the body is not */
        return r->call != NULL && !r->unknown && r->body == NULL;
    case RPC_SENDING: /* the final batch is on the call */
        return r->call != NULL;
    case RPC_DONE:
        return true;
    case RPC_NSTATES:
        break;
    }
    return false;
}

/* Aborts unless r is in state, the only one event can come in. */
static void expect(struct rpc *r, enum rpc_state state, const char *event)
{
    if (sm_state(&r->sm) != (int)state) {
        log_error("bad_event", "what=rpc event=%s state=%s", event,
                  sm_name(&r->sm));
        abort();
    }
}

/* -> DONE: frees r. */
static void rpc_free(struct rpc *r)
{
    struct frontend *fe = r->fe;
    sm_move(&r->sm, RPC_DONE);
    codec_free(r->msg);
    admin_result_free(r->req.admin);
    policy_release(r->req.list_rule);
    grpc_byte_buffer_destroy(r->payload);
    grpc_byte_buffer_destroy(r->body);
    grpc_slice_unref(r->status_details);
    grpc_slice_unref(r->ttl.value);
    grpc_metadata_array_destroy(&r->metadata);
    grpc_call_details_destroy(&r->details);
    if (r->call != NULL)
        grpc_call_unref(r->call);
    free(r);
    fe->live--;
}

/* A new rpc in REQUESTED, not yet requested; NULL when out of memory. */
static struct rpc *rpc_new(struct frontend *fe)
{
    struct rpc *r = calloc(1, sizeof(*r));
    if (r == NULL) {
        log_error("arm_failed", "reason=\"out of memory\"");
        return NULL;
    }
    r->requested.kind = TAG_CALL;
    r->handback.kind = TAG_HANDBACK;
    r->reply.kind = TAG_REPLY;
    r->closed.kind = TAG_CLOSED;
    r->fe = fe;
    sm_init(&r->sm, rpc_states, rpc_invariant, RPC_REQUESTED);
    r->status_details = grpc_empty_slice();
    r->ttl.key = grpc_slice_from_static_string(TTLHEADER_KEY);
    r->ttl.value = grpc_empty_slice();
    grpc_metadata_array_init(&r->metadata);
    grpc_call_details_init(&r->details);
    fe->live++;
    return r;
}

/* Counts r as requested if err says so, else frees it. */
static void note_request(struct rpc *r, grpc_call_error err)
{
    if (err != GRPC_CALL_OK) {
        log_error("arm_failed", "grpc_call_error=%d", (int)err);
        rpc_free(r);
        return;
    }
    r->fe->armed++;
}

/* Requests the next call of the lease or admin method op. Once the server
 * shut down, the request completes at once, unsuccessfully. */
static void arm(struct frontend *fe, enum request_op op)
{
    struct rpc *r = rpc_new(fe);
    if (r == NULL)
        return;
    r->req.op = op;
    note_request(r, grpc_server_request_registered_call(
                        fe->server, fe->methods[op], &r->call, &r->deadline,
                        &r->metadata, &r->payload, fe->cq, fe->cq,
                        &r->requested));
}

/* Requests the next call of any method not registered. */
static void arm_unknown(struct frontend *fe)
{
    struct rpc *r = rpc_new(fe);
    if (r == NULL)
        return;
    r->unknown = true;
    note_request(r, grpc_server_request_call(fe->server, &r->call,
                                             &r->details, &r->metadata,
                                             fe->cq, fe->cq, &r->requested));
}

static enum metric_method metric_of(const struct rpc *r)
{
    return r->unknown ? MM_OTHER : metrics_method(r->req.op);
}

/* r's final batch is over (or never started): frees r, unless it is a
 * Wait whose close has not come back yet (on_closed() frees it then). */
static void reply_over(struct rpc *r)
{
    r->reply_done = true;
    if (!r->watching_close || r->close_done)
        rpc_free(r);
}

/* -> SENDING: starts the final batch, the status, and the message when
 * body is set (taken). */
static void send_reply(struct rpc *r, grpc_status_code code,
                       const char *details, grpc_byte_buffer *body)
{
    grpc_op ops[4];
    memset(ops, 0, sizeof(ops));
    size_t n = 0;
    ops[n].op = GRPC_OP_SEND_INITIAL_METADATA;
    if (GRPC_SLICE_LENGTH(r->ttl.value) > 0) {
        ops[n].data.send_initial_metadata.count = 1;
        ops[n].data.send_initial_metadata.metadata = &r->ttl;
    }
    n++;
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
    if (!r->watching_close) {
        ops[n].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
        ops[n++].data.recv_close_on_server.cancelled = &r->cancelled;
    }
    enum metric_method m = metric_of(r);
    metrics_count_request(m, (int)code);
    if (r->accepted_ns != 0 && m <= MM_RELEASE) /* a Wait's time: waited */
        metrics_observe(&metrics.latency[m],
                        (double)(clock_mono_ns() - r->accepted_ns) / 1e9);
    sm_move(&r->sm, RPC_SENDING);
    grpc_call_error err =
        grpc_call_start_batch(r->call, ops, n, &r->reply, NULL);
    if (err != GRPC_CALL_OK) {
        log_error("reply_failed", "grpc_call_error=%d", (int)err);
        reply_over(r);
    }
}

static grpc_byte_buffer *make_body(const uint8_t *buf, size_t n)
{
    grpc_slice s = grpc_slice_from_copied_buffer((const char *)buf, n);
    grpc_byte_buffer *body = grpc_raw_byte_buffer_create(&s, 1);
    grpc_slice_unref(s);
    return body;
}

/* A SnapshotResponse: its header, then the database, handed to gRPC
 * (which frees it once sent) rather than copied. */
static grpc_byte_buffer *snapshot_body(struct admin_result *a)
{
    uint8_t head[CODEC_SNAPSHOT_HEADER_MAX];
    size_t n = codec_snapshot_header(a->snapshot_len, head);
    grpc_slice s[2] = {
        grpc_slice_from_copied_buffer((const char *)head, n),
        grpc_slice_new(a->snapshot, a->snapshot_len, a->snapshot_free),
    };
    a->snapshot = NULL;
    grpc_byte_buffer *body = grpc_raw_byte_buffer_create(s, 2);
    grpc_slice_unref(s[0]);
    grpc_slice_unref(s[1]);
    return body;
}

static void reply_request(struct rpc *r)
{
    grpc_byte_buffer *body = NULL;
    if (r->req.status == REPLY_OK && r->req.op == OP_SNAPSHOT) {
        body = snapshot_body(r->req.admin);
    } else if (r->req.status == REPLY_OK && request_is_admin(r->req.op)) {
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
        if (r->req.op != OP_RELEASE && r->req.grant_ttl_ns > 0) {
            char ttl[TTLHEADER_LEN];
            size_t len = ttlheader_format(r->req.grant_ttl_ns, ttl);
            r->ttl.value = grpc_slice_from_copied_buffer(ttl, len);
        }
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

/* A Wait may wait long at the loop: learn when its call ends before its
 * answer (see Waits above). Without it (the batch refused), the Wait is
 * still answered, only not dropped early. */
static void watch_close(struct rpc *r)
{
    grpc_op op;
    memset(&op, 0, sizeof(op));
    op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    op.data.recv_close_on_server.cancelled = &r->cancelled;
    grpc_call_error err =
        grpc_call_start_batch(r->call, &op, 1, &r->closed, NULL);
    if (err != GRPC_CALL_OK)
        log_error("watch_close_failed", "grpc_call_error=%d", (int)err);
    r->watching_close = err == GRPC_CALL_OK;
}

/* A Wait's call is over: cancelled while the loop has it, the loop
 * hears of it; once its reply is sent too, it is freed. */
static void on_closed(struct rpc *r)
{
    struct frontend *fe = r->fe;
    r->close_done = true;
    if (r->cancelled && sm_state(&r->sm) == RPC_AT_LOOP) {
        atomic_store(&r->req.ended, true);
        atomic_fetch_add(&fe->ended, 1);
        uv_async_send(&fe->async);
    }
    if (r->reply_done)
        rpc_free(r);
}

/* -> AT_LOOP; or SENDING when too many are there already, or when the
 * mode decided it at once. */
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
    if (fe->cb.arrived(fe->cb.arg, &r->req)) {
        atomic_fetch_sub(&fe->pending, 1);
        reply_request(r);
        return;
    }
    if (r->req.op == OP_WAIT)
        watch_close(r);
    atomic_fetch_add(&metrics.queue_depth, 1);
    sm_move(&r->sm, RPC_AT_LOOP);
    r->req.next = NULL;
    pthread_mutex_lock(&fe->lock);
    if (fe->tail != NULL)
        fe->tail->next = &r->req;
    else
        fe->head = &r->req;
    fe->tail = &r->req;
    size_t queued = ++fe->queued;
    pthread_mutex_unlock(&fe->lock);
    size_t at = atomic_load(&fe->want_at);
    if (at != 0 && queued >= at)
        uv_async_send(&fe->async);
}

/* Checks the call's bearer token, notes its connection, and sets the
 * caller's identity (identity.h); false when the call was answered
 * UNAUTHENTICATED. */
static bool admit(struct rpc *r)
{
    struct frontend *fe = r->fe;
    if (fe->client_certs) {
        peers_note(&fe->peers, r->call);
        identity_of_call(r->call, r->req.identity, sizeof(r->req.identity));
    }
    struct tokens *tokens =
        !r->unknown && request_is_admin(r->req.op) && fe->admin_tokens
            ? fe->admin_tokens
            : fe->tokens;
    if (tokens == NULL)
        return true;
    _Static_assert(TOKENS_NAME_MAX <= IDENTITY_MAX, "a name is an identity");
    for (size_t i = 0; i < r->metadata.count; i++) {
        const grpc_metadata *m = &r->metadata.metadata[i];
        if (grpc_slice_str_cmp(m->key, "authorization") == 0 &&
            tokens_check(tokens,
                         (const char *)GRPC_SLICE_START_PTR(m->value),
                         GRPC_SLICE_LENGTH(m->value), r->req.identity))
            return true;
    }
    audit_unauthenticated(&fe->unauthenticated_log, r->call);
    send_reply(r, GRPC_STATUS_UNAUTHENTICATED,
               "missing or unknown bearer token", NULL);
    return false;
}

/* A Watch passed its checks: its call becomes a stream of watch.c's. */
static void start_watch(struct rpc *r)
{
    struct frontend *fe = r->fe;
    if (!watches_served(&fe->watches)) {
        send_reply(r, GRPC_STATUS_UNIMPLEMENTED,
                   "Watch is not served over PostgreSQL yet", NULL);
        return;
    }
    grpc_call *call = r->call;
    r->call = NULL;
    watches_start(&fe->watches, call, &r->req);
    rpc_free(r);
}

/* A lease or admin call arrived: refuse it while draining, decode it,
 * answer bad input at once, queue the rest for the loop. */
static void accept_call(struct rpc *r)
{
    struct frontend *fe = r->fe;
    enum request_op op = r->req.op;
    if (!request_is_admin(op))
        r->accepted_ns = clock_mono_ns();
    arm(fe, op);
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
    if (fe->policy != NULL && !policy_authorize(fe->policy, &r->req)) {
        audit_denied(&fe->denied_log, &r->req);
        reply_request(r);
        return;
    }
    if (op == OP_WATCH)
        start_watch(r);
    else
        hand_off(fe, r);
}

static void reject_unknown(struct rpc *r)
{
    arm_unknown(r->fe);
    if (!admit(r))
        return;
    char *method = grpc_slice_to_c_string(r->details.method);
    char details[256];
    snprintf(details, sizeof(details), "unknown method %s", method);
    log_debug("unimplemented", "method=%s", method);
    gpr_free(method);
    send_reply(r, GRPC_STATUS_UNIMPLEMENTED, details, NULL);
}

/* A requested call arrived, or the request failed. */
static void on_call(struct rpc *r, bool success)
{
    expect(r, RPC_REQUESTED, "call");
    r->fe->armed--;
    if (!success)
        rpc_free(r); /* the server is shutting down */
    else if (r->unknown)
        reject_unknown(r);
    else
        accept_call(r);
}

/* The head of the reply list's empty batch completed: sends every reply
 * the loop handed back. */
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
    struct frontend_tag *tag = ev.tag;
    struct rpc *r;
    switch (tag->kind) {
    case TAG_CALL:
        on_call(container_of(tag, struct rpc, requested), ev.success);
        return;
    case TAG_HANDBACK:
        send_replies(fe);
        return;
    case TAG_REPLY:
        r = container_of(tag, struct rpc, reply);
        expect(r, RPC_SENDING, "reply");
        reply_over(r);
        return;
    case TAG_CLOSED:
        on_closed(container_of(tag, struct rpc, closed));
        return;
    case TAG_SHUTDOWN:
        fe->notified = true;
        return;
    case TAG_HEALTH_CALL:
    case TAG_HEALTH_SENT:
    case TAG_HEALTH_CLOSED:
        health_on_event(&fe->health, tag, ev.success);
        return;
    case TAG_WATCH_SENT:
    case TAG_WATCH_CLOSED:
    case TAG_WATCH_WAKE:
        watches_on_event(&fe->watches, tag, ev.success);
        return;
    }
    abort(); /* not a tag of ours */
}

/* Whether a call is in progress: arrived and not yet over. */
static bool busy(const struct frontend *fe)
{
    return fe->live != fe->armed || health_busy(&fe->health) ||
           !watches_empty(&fe->watches);
}

/* Whether the server shut down and no call is left, requested ones
 * included. */
static bool finished(const struct frontend *fe)
{
    return fe->notified && fe->live == 0 && health_empty(&fe->health) &&
           watches_empty(&fe->watches);
}

/* The drain's times follow its steps. */
static bool drain_invariant(const struct sm *sm, int prev)
{
    const struct frontend *fe = container_of(sm, struct frontend, drain);
    (void)prev;
    switch ((enum drain_state)sm_state(sm)) {
    case DRAIN_SERVING:
        return fe->drain_began_ms == 0 && fe->closed_at_ms == 0;
    case DRAIN_DRAINING:
        return fe->drain_began_ms > 0 && fe->closed_at_ms == 0;
    case DRAIN_SHUT_DOWN:
    case DRAIN_CANCELLED:
        return fe->closed_at_ms >= fe->drain_began_ms;
    case DRAIN_NSTATES:
        break;
    }
    return false;
}

/* A step of the drain (see Drain above), on each wake-up while draining
 * and until CANCELLED. */
static void drain(struct frontend *fe)
{
    int64_t now = clock_mono_ns() / 1000000;
    if (sm_state(&fe->drain) == DRAIN_SERVING) {
        fe->drain_began_ms = now;
        sm_move(&fe->drain, DRAIN_DRAINING);
    }
    bool in_progress = busy(fe);
    if (in_progress)
        fe->idle_since_ms = 0;
    else if (fe->idle_since_ms == 0)
        fe->idle_since_ms = now;
    bool late = now - fe->drain_began_ms > fe->drain_ms;
    if (sm_state(&fe->drain) == DRAIN_DRAINING) {
        if (!late && (in_progress || now - fe->idle_since_ms < LINGER_MS))
            return;
        fe->closed_at_ms = now;
        sm_move(&fe->drain, DRAIN_SHUT_DOWN);
        grpc_server_shutdown_and_notify(fe->server, fe->cq, &fe->shutdown_tag);
        if (!late)
            return;
    } else if (!late && now - fe->closed_at_ms < LINGER_MS) {
        return;
    }
    if (in_progress)
        log_warn("cancelling_calls", "after_ms=%lld", (long long)fe->drain_ms);
    grpc_server_cancel_all_calls(fe->server);
    sm_move(&fe->drain, DRAIN_CANCELLED);
}

/* Destroys the server, which shut down and has no call left, and the
 * queue. */
static void close_queue(struct frontend *fe)
{
    grpc_server_destroy(fe->server);
    grpc_completion_queue_shutdown(fe->cq);
    while (grpc_completion_queue_next(fe->cq,
                                      gpr_inf_future(GPR_CLOCK_REALTIME), NULL)
               .type != GRPC_QUEUE_SHUTDOWN)
        ;
    grpc_completion_queue_destroy(fe->cq);
}

static void *cq_thread(void *arg)
{
    struct frontend *fe = arg;
    while (!finished(fe)) {
        bool draining = atomic_load(&fe->draining);
        grpc_event ev = grpc_completion_queue_next(
            fe->cq, gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                                 gpr_time_from_millis(draining ? TICK_MS
                                                               : IDLE_TICK_MS,
                                                      GPR_TIMESPAN)),
            NULL);
        health_set(&fe->health, atomic_load(&fe->serving),
                   atomic_load(&fe->draining));
        if (ev.type == GRPC_OP_COMPLETE)
            on_event(fe, ev);
        if (draining)
            watches_drain(&fe->watches);
        if (draining && sm_state(&fe->drain) != DRAIN_CANCELLED)
            drain(fe);
    }
    close_queue(fe);
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
    fe->queued = 0;
    pthread_mutex_unlock(&fe->lock);
    if (list != NULL)
        fe->cb.requests(fe->cb.arg, list);
    if (atomic_exchange(&fe->ended, 0) > 0)
        fe->cb.ended(fe->cb.arg);
    if (atomic_load(&fe->thread_done) && !fe->stopped_reported) {
        fe->stopped_reported = true;
        fe->cb.stopped(fe->cb.arg);
    }
}

void frontend_reply(struct frontend *fe, struct request *req)
{
    struct rpc *r = (struct rpc *)req;
    grpc_call *call = r->call;
    struct frontend_tag *handback = &r->handback;
    atomic_fetch_sub(&fe->pending, 1);
    atomic_fetch_sub(&metrics.queue_depth, 1);
    sm_move(&r->sm, RPC_READY);
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
    grpc_call_error err = grpc_call_start_batch(call, NULL, 0, handback,
                                                NULL);
    if (err != GRPC_CALL_OK) {
        log_error("handback_failed", "grpc_call_error=%d", (int)err);
        abort();
    }
}

void frontend_want_requests(struct frontend *fe, size_t at)
{
    size_t was = atomic_exchange(&fe->want_at, at);
    if (at == 0 || at == was)
        return;
    /* Requests queued under another threshold: the next run of the loop
     * takes them if there are enough. The hand-off either saw this one,
     * and woke the loop itself, or queued before this lock. */
    pthread_mutex_lock(&fe->lock);
    bool enough = fe->head != NULL && fe->queued >= at;
    pthread_mutex_unlock(&fe->lock);
    if (enough)
        uv_async_send(&fe->async);
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
    if (fe->watches.history != NULL)
        history_set_wake(fe->watches.history, NULL, NULL);
    watches_destroy(&fe->watches);
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
    sm_init(&fe->drain, drain_states, drain_invariant, DRAIN_SERVING);
    fe->max_pending = opts->max_pending;
    fe->drain_ms = opts->drain_ns / 1000000;
    atomic_store(&fe->serving, true);
    atomic_store(&fe->want_at, 1);
    fe->tokens = opts->tokens;
    fe->admin_tokens = opts->admin_tokens;
    fe->policy = opts->policy;
    fe->client_certs =
        opts->tls != NULL && tls_requires_client_cert(opts->tls);
    fe->cb = *cb;
    fe->shutdown_tag.kind = TAG_SHUTDOWN;
    pthread_mutex_init(&fe->lock, NULL);
    /* From here on, failing means closing this handle, whose close
     * callback frees fe: the caller's loop must run once more. */
    uv_async_init(loop, &fe->async, on_async);
    fe->async.data = fe;

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
    health_init(&fe->health, fe->server, fe->cq);
    if (watches_init(&fe->watches, opts->history) != 0) {
        snprintf(errmsg, errmsg_len, "out of memory");
        goto fail;
    }
    if (listeners_bind(fe->server, opts, errmsg, errmsg_len) != 0)
        goto fail;

    for (int op = 0; op < NMETHODS; op++) {
        int n = request_is_admin((enum request_op)op) ? ARMED_ADMIN
                : op == OP_WATCH                      ? ARMED_WATCH
                                                      : ARMED_PER_METHOD;
        for (int i = 0; i < n; i++)
            arm(fe, (enum request_op)op);
    }
    for (int i = 0; i < ARMED_UNKNOWN; i++)
        arm_unknown(fe);
    health_arm(&fe->health, ARMED_HEALTH);
    fe->thread_started = pthread_create(&fe->thread, NULL, cq_thread, fe) == 0;
    if (!fe->thread_started) {
        snprintf(errmsg, errmsg_len, "cannot start the gRPC thread");
        goto fail;
    }
    return fe;

fail:
    /* gRPC aborts when a server is destroyed before it was shut down
     * (again if listeners_bind did: that is harmless). Every request
     * comes back unsuccessfully, and a call that arrived meanwhile is
     * refused as in a drain. */
    atomic_store(&fe->draining, true);
    health_set(&fe->health, false, true);
    grpc_server_shutdown_and_notify(fe->server, fe->cq, &fe->shutdown_tag);
    grpc_server_cancel_all_calls(fe->server);
    while (!finished(fe))
        on_event(fe, grpc_completion_queue_next(
                         fe->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL));
    close_queue(fe);
    uv_close((uv_handle_t *)&fe->async, on_close);
    return NULL;
}
