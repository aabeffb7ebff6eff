/*
 * grpc.health.v1 (see health.h).
 *
 * Each Check or Watch call is a struct health_call, on the
 * completion-queue (CQ) thread only. It moves through call_states[], a
 * checked state machine (core/sm.h: every move is checked against the
 * table, and in debug builds call_invariant() then checks the fields the
 * new state promises). A Check has one batch: its reply (status, message,
 * close). A Watch stream has two, each with its own tag: RECV_CLOSE_ON_
 * SERVER (`closed`), pending from the start until the call is over, and
 * at most one send at a time (`sent`), a status message or, to end the
 * stream, the final status. Its states are which send is pending, and
 * whether the call is over:
 *
 *   REQUESTED ---> REPLYING ---> DONE
 *     |    |
 *     |    +-----> DONE
 *     v
 *   WATCHING <---> SENDING ---> CLOSED_SENDING ---> DONE
 *     | | |          |          ^
 *     | | |          v          |
 *     | | +------> ENDED <----- ENDING
 *     | |            |          ^
 *     | |            +--> DONE  |
 *     | +-----------------------+
 *     +--> DONE
 *
 *   REQUESTED      requested from the server, no call yet. Initial.
 *   REPLYING       a Check's (or a malformed request's) reply batch is
 *                  pending
 *   WATCHING       a Watch, up to date; only the close batch is pending
 *   SENDING        a status message is pending
 *   ENDING         draining: the final status is pending
 *   ENDED          nothing more will be sent; waiting for the close
 *   CLOSED_SENDING the call is over; a send is still pending
 *   DONE           freed. Final.
 *
 * A call is on h->watchers from WATCHING on, until DONE.
 *
 * The moves, all on the CQ thread, and the functions that make them:
 *   REQUESTED -> REPLYING   accept_call() -> reply(): a Check, or a
 *                           malformed request; the one reply batch starts
 *   REQUESTED -> WATCHING   accept_call() -> watch_start(): a Watch; its
 *                           close batch starts
 *   REQUESTED -> DONE       health_on_event() -> finish(): the request
 *                           failed, the server is shutting down (or arm()
 *                           could not make it)
 *   REPLYING  -> DONE       on_sent() -> finish(): the reply completed;
 *                           or reply(): it could not start
 *   WATCHING  -> SENDING    watch_update(): a new status went out
 *   WATCHING  -> ENDING     watch_update(): draining, and NOT_SERVING was
 *                           sent: the end goes out
 *   WATCHING  -> ENDED      watch_update(): a send could not start; the
 *                           call is cancelled
 *   WATCHING  -> DONE       on_closed() -> finish(): the call is over
 *                           (the client went away); or watch_start(): the
 *                           close batch could not start
 *   SENDING   -> WATCHING   on_sent(): it was sent; what changed meanwhile
 *                           goes out next (watch_update())
 *   SENDING   -> ENDED      on_sent(): it failed: the stream broke, its
 *                           close follows
 *   SENDING   -> CLOSED_SENDING  on_closed(): the call is over first
 *   ENDING    -> ENDED      on_sent(): the final status completed
 *   ENDING    -> CLOSED_SENDING  on_closed(): the call is over first
 *   ENDED     -> DONE       on_closed() -> finish(): the call is over
 *   CLOSED_SENDING -> DONE  on_sent() -> finish(): the send completed
 */
#include "health.h"

#include <grpc/byte_buffer_reader.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec.h"
#include "log.h"
#include "metrics.h"
#include "sm.h"

/* grpc.health.v1 ServingStatus numbers. */
enum { SERVING = 1, NOT_SERVING = 2, SERVICE_UNKNOWN = 3 };

enum health_state {
    H_REQUESTED,
    H_REPLYING,
    H_WATCHING,
    H_SENDING,
    H_ENDING,
    H_ENDED,
    H_CLOSED_SENDING,
    H_DONE,
    H_NSTATES,
};

static const struct sm_conf call_states[H_NSTATES] = {
    [H_REQUESTED] = {"REQUESTED", SM_INITIAL,
                     SM_TO(H_REPLYING) | SM_TO(H_WATCHING) | SM_TO(H_DONE)},
    [H_REPLYING] = {"REPLYING", 0, SM_TO(H_DONE)},
    [H_WATCHING] = {"WATCHING", 0,
                    SM_TO(H_SENDING) | SM_TO(H_ENDING) | SM_TO(H_ENDED) |
                        SM_TO(H_DONE)},
    [H_SENDING] = {"SENDING", 0,
                   SM_TO(H_WATCHING) | SM_TO(H_ENDED) |
                       SM_TO(H_CLOSED_SENDING)},
    [H_ENDING] = {"ENDING", 0, SM_TO(H_ENDED) | SM_TO(H_CLOSED_SENDING)},
    [H_ENDED] = {"ENDED", 0, SM_TO(H_DONE)},
    [H_CLOSED_SENDING] = {"CLOSED_SENDING", 0, SM_TO(H_DONE)},
    [H_DONE] = {"DONE", SM_FINAL, 0},
};

struct health_call {
    struct frontend_tag requested, sent, closed; /* see above */
    struct health *h;
    struct sm sm; /* enum health_state */
    bool watch;    /* Watch rather than Check */
    bool known;    /* the service asked about is one we serve */
    int last_sent; /* Watch: the status last sent; 0: none yet */
    grpc_call *call;
    gpr_timespec deadline;
    grpc_metadata_array metadata;
    grpc_byte_buffer *payload; /* the request */
    grpc_byte_buffer *body;    /* the message last sent */
    grpc_slice details;        /* status details */
    int cancelled;
    struct health_call *next_watcher;
};

/* Whether c is on h->watchers. */
static bool listed(const struct health_call *c)
{
    for (const struct health_call *w = c->h->watchers; w != NULL;
         w = w->next_watcher)
        if (w == c)
            return true;
    return false;
}

/* What each state promises of c's fields, checked by sm_move() in debug
 * builds (walking h->watchers: a debug build's cost). */
static bool call_invariant(const struct sm *sm, int prev)
{
    const struct health_call *c = container_of(sm, struct health_call, sm);
    (void)prev;
    switch ((enum health_state)sm_state(sm)) {
    case H_REQUESTED: /* no call yet: gRPC fills it in */
        return c->call == NULL && !listed(c);
    case H_REPLYING:
        return c->call != NULL && !listed(c);
    case H_WATCHING:
    case H_ENDED:
        return c->watch && c->call != NULL && listed(c);
    case H_ENDING: /* the end goes out only once draining */
        if (!c->h->draining)
            return false;
        /* fall through */
    case H_SENDING:
    case H_CLOSED_SENDING: /* a send of a status already chosen */
        return c->watch && c->call != NULL && listed(c) &&
               c->last_sent != 0 && c->body != NULL;
    case H_DONE:
        return !listed(c);
    case H_NSTATES:
        break;
    }
    return false;
}

/* -> DONE: frees c. */
static void finish(struct health_call *c)
{
    struct health *h = c->h;
    int state = sm_state(&c->sm);
    if (state != H_REQUESTED && state != H_REPLYING) {
        struct health_call **p = &h->watchers;
        while (*p != c)
            p = &(*p)->next_watcher;
        *p = c->next_watcher;
    }
    sm_move(&c->sm, H_DONE); /* off the list: DONE's invariant */
    grpc_byte_buffer_destroy(c->payload);
    grpc_byte_buffer_destroy(c->body);
    grpc_slice_unref(c->details);
    grpc_metadata_array_destroy(&c->metadata);
    if (c->call != NULL)
        grpc_call_unref(c->call);
    free(c);
    h->live--;
}

static void arm(struct health *h, bool watch)
{
    struct health_call *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        log_error("arm_failed", "reason=\"out of memory\"");
        return;
    }
    c->requested.kind = TAG_HEALTH_CALL;
    c->sent.kind = TAG_HEALTH_SENT;
    c->closed.kind = TAG_HEALTH_CLOSED;
    c->h = h;
    c->watch = watch;
    sm_init(&c->sm, call_states, call_invariant, H_REQUESTED);
    c->details = grpc_empty_slice();
    grpc_metadata_array_init(&c->metadata);
    h->live++;
    grpc_call_error err = grpc_server_request_registered_call(
        h->server, h->methods[watch], &c->call, &c->deadline, &c->metadata,
        &c->payload, h->cq, h->cq, &c->requested);
    if (err != GRPC_CALL_OK) {
        log_error("arm_failed", "grpc_call_error=%d", (int)err);
        finish(c);
        return;
    }
    h->armed++;
}

/* Sets c->body to a HealthCheckResponse with status. */
static void set_body(struct health_call *c, int status)
{
    uint8_t buf[CODEC_REPLY_MAX];
    grpc_slice s = grpc_slice_from_copied_buffer(
        (const char *)buf, codec_encode_health(status, buf, sizeof(buf)));
    grpc_byte_buffer_destroy(c->body);
    c->body = grpc_raw_byte_buffer_create(&s, 1);
    grpc_slice_unref(s);
}

/* -> REPLYING: the one reply of a Check (or of a malformed request),
 * with a HealthCheckResponse of status unless it is 0. */
static void reply(struct health_call *c, grpc_status_code code,
                  const char *details, int status)
{
    grpc_op ops[4];
    memset(ops, 0, sizeof(ops));
    size_t n = 0;
    ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
    if (status != 0) {
        set_body(c, status);
        ops[n].op = GRPC_OP_SEND_MESSAGE;
        ops[n++].data.send_message.send_message = c->body;
    }
    if (details != NULL)
        c->details = grpc_slice_from_static_string(details);
    ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[n].data.send_status_from_server.status = code;
    ops[n++].data.send_status_from_server.status_details =
        details != NULL ? &c->details : NULL;
    ops[n].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    ops[n++].data.recv_close_on_server.cancelled = &c->cancelled;
    metrics_count_request(c->watch ? MM_HEALTH_WATCH : MM_HEALTH_CHECK,
                          (int)code);
    sm_move(&c->sm, H_REPLYING);
    grpc_call_error err = grpc_call_start_batch(c->call, ops, n, &c->sent,
                                                NULL);
    if (err != GRPC_CALL_OK) {
        log_error("reply_failed", "grpc_call_error=%d", (int)err);
        finish(c);
    }
}

/* WATCHING -> SENDING or ENDING: sends what the stream has not seen yet,
 * a new status, or when draining and it has seen the last one, its end.
 * Nothing in other states: what changes meanwhile goes out once the
 * pending send completed. */
static void watch_update(struct health_call *c)
{
    struct health *h = c->h;
    if (sm_state(&c->sm) != H_WATCHING)
        return;
    int want = c->known ? h->status : SERVICE_UNKNOWN;
    grpc_op ops[2];
    memset(ops, 0, sizeof(ops));
    size_t n = 0;
    enum health_state next;
    if (want != c->last_sent) {
        if (c->last_sent == 0)
            ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
        set_body(c, want);
        ops[n].op = GRPC_OP_SEND_MESSAGE;
        ops[n++].data.send_message.send_message = c->body;
        c->last_sent = want;
        next = H_SENDING;
    } else if (h->draining) {
        ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
        ops[n++].data.send_status_from_server.status = GRPC_STATUS_OK;
        metrics_count_request(MM_HEALTH_WATCH, GRPC_STATUS_OK);
        next = H_ENDING;
    } else {
        return;
    }
    if (grpc_call_start_batch(c->call, ops, n, &c->sent, NULL) !=
        GRPC_CALL_OK) {
        log_error("watch_failed", NULL);
        grpc_call_cancel(c->call, NULL);
        next = H_ENDED;
    }
    sm_move(&c->sm, next);
}

/* REQUESTED -> WATCHING: the stream opens. */
static void watch_start(struct health_call *c)
{
    struct health *h = c->h;
    c->next_watcher = h->watchers;
    h->watchers = c;
    sm_move(&c->sm, H_WATCHING); /* listed first: WATCHING's invariant */
    grpc_op op;
    memset(&op, 0, sizeof(op));
    op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    op.data.recv_close_on_server.cancelled = &c->cancelled;
    if (grpc_call_start_batch(c->call, &op, 1, &c->closed, NULL) !=
        GRPC_CALL_OK) {
        log_error("watch_failed", NULL);
        finish(c);
        return;
    }
    watch_update(c);
}

/* The request's service name into service (cap bytes); false when the
 * request is missing or malformed. */
static bool read_service(struct health_call *c, char *service, size_t cap)
{
    grpc_byte_buffer_reader reader;
    if (c->payload == NULL ||
        !grpc_byte_buffer_reader_init(&reader, c->payload))
        return false;
    grpc_slice s = grpc_byte_buffer_reader_readall(&reader);
    grpc_byte_buffer_reader_destroy(&reader);
    bool ok = codec_decode_health(GRPC_SLICE_START_PTR(s),
                                  GRPC_SLICE_LENGTH(s), service, cap) == 0;
    grpc_slice_unref(s);
    return ok;
}

/* A Check or Watch call arrived. */
static void accept_call(struct health_call *c)
{
    struct health *h = c->h;
    arm(h, c->watch);
    char service[256];
    if (!read_service(c, service, sizeof(service))) {
        reply(c, GRPC_STATUS_INVALID_ARGUMENT,
              "malformed HealthCheckRequest", 0);
        return;
    }
    c->known = service[0] == '\0' ||
               strcmp(service, codec_lease_service_name()) == 0;
    if (c->watch)
        watch_start(c);
    else if (c->known)
        reply(c, GRPC_STATUS_OK, NULL, h->status);
    else
        reply(c, GRPC_STATUS_NOT_FOUND, "unknown service", 0);
}

/* An event the state machine has no edge for: a bug. */
static void unexpected(struct health_call *c, const char *event)
{
    log_error("bad_event", "what=health event=%s state=%s", event,
              sm_name(&c->sm));
    abort();
}

/* A send batch completed: a reply, a status message or a stream's end. */
static void on_sent(struct health_call *c, bool success)
{
    switch ((enum health_state)sm_state(&c->sm)) {
    case H_REPLYING:
    case H_CLOSED_SENDING:
        finish(c);
        return;
    case H_SENDING:
        sm_move(&c->sm, success ? H_WATCHING : H_ENDED);
        watch_update(c);
        return;
    case H_ENDING:
        sm_move(&c->sm, H_ENDED);
        return;
    default:
        unexpected(c, "sent");
    }
}

/* A Watch call is over. */
static void on_closed(struct health_call *c)
{
    switch ((enum health_state)sm_state(&c->sm)) {
    case H_WATCHING:
    case H_ENDED:
        finish(c);
        return;
    case H_SENDING:
    case H_ENDING:
        sm_move(&c->sm, H_CLOSED_SENDING);
        return;
    default:
        unexpected(c, "closed");
    }
}

void health_on_event(struct health *h, struct frontend_tag *tag,
                     bool success)
{
    struct health_call *c;
    switch (tag->kind) {
    case TAG_HEALTH_CALL:
        c = container_of(tag, struct health_call, requested);
        if (sm_state(&c->sm) != H_REQUESTED)
            unexpected(c, "requested");
        h->armed--;
        if (success)
            accept_call(c);
        else
            finish(c); /* the server is shutting down */
        return;
    case TAG_HEALTH_SENT:
        on_sent(container_of(tag, struct health_call, sent), success);
        return;
    case TAG_HEALTH_CLOSED:
        on_closed(container_of(tag, struct health_call, closed));
        return;
    default:
        abort(); /* not one of health's */
    }
}

void health_set(struct health *h, bool serving, bool draining)
{
    int status = serving && !draining ? SERVING : NOT_SERVING;
    if (status == h->status && draining == h->draining)
        return;
    h->status = status;
    h->draining = draining;
    for (struct health_call *c = h->watchers; c != NULL; c = c->next_watcher)
        watch_update(c);
}

void health_init(struct health *h, grpc_server *server,
                 grpc_completion_queue *cq)
{
    memset(h, 0, sizeof(*h));
    h->server = server;
    h->cq = cq;
    h->status = SERVING;
    for (int watch = 0; watch < 2; watch++) {
        char path[128];
        codec_health_path(watch, path, sizeof(path));
        h->methods[watch] = grpc_server_register_method(
            server, path, NULL, GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER, 0);
    }
}

void health_arm(struct health *h, int n)
{
    for (int i = 0; i < n; i++) {
        arm(h, false);
        arm(h, true);
    }
}

bool health_busy(const struct health *h)
{
    return h->live != h->armed;
}

bool health_empty(const struct health *h)
{
    return h->live == 0;
}
