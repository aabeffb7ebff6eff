/*
 * Watch streams (see watch.h).
 *
 * Each stream is a struct watcher, on the completion-queue thread only.
 * It has two batches, each with its own tag: RECV_CLOSE_ON_SERVER
 * (`closed`), pending from the start until the call is over, and at
 * most one send at a time (`sent`): a message, or the end (the final
 * status, after a last message when the revision asked for is gone).
 * It moves through watcher_states[], a checked state machine (core/sm.h;
 * in debug builds watcher_invariant() checks the fields each state
 * promises):
 *
 *   WATCHING <---> SENDING ---> CLOSED_SENDING ---> DONE
 *     | | |          |          ^
 *     | | |          v          |
 *     | | +------> ENDED <----- ENDING
 *     | |            |          ^
 *     | |            +--> DONE  |
 *     | +-----------------------+
 *     +--> DONE
 *
 *   WATCHING       only the close batch is pending; the stream has sent
 *                  every event it matches up to `after`. Initial.
 *   SENDING        a message is pending
 *   ENDING         the end is pending
 *   ENDED          nothing more will be sent; waiting for the close
 *   CLOSED_SENDING the call is over; a send is still pending
 *   DONE           freed. Final.
 *
 * The moves, and the functions that make them:
 *   WATCHING -> SENDING   update(): the first message (where the stream
 *                         starts), or the events after `after`
 *   WATCHING -> ENDING    update(): draining, or the revision after
 *                         `after` is no longer kept (or never was)
 *   WATCHING -> ENDED     update(): a send could not start; the call is
 *                         cancelled
 *   WATCHING -> DONE      on_closed(): the call is over (the client went
 *                         away); or start(): the close batch could not
 *                         start
 *   SENDING  -> WATCHING  on_sent(): sent; what came meanwhile goes out
 *                         next (update())
 *   SENDING  -> ENDED     on_sent(): it failed: the stream broke
 *   SENDING, ENDING -> CLOSED_SENDING  on_closed(): the call is over first
 *   ENDING   -> ENDED     on_sent(): the end went out
 *   ENDED -> DONE, CLOSED_SENDING -> DONE  the last batch came back
 *
 * A stream that falls behind the history (a slow reader, while more than
 * --watch-history events come) ends as one that asked for a revision no
 * longer kept: OUT_OF_RANGE, and it reads again. So no stream holds more
 * than one message, and leased keeps no queue per watcher.
 */
#include "watch.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec.h"
#include "engine.h"
#include "log.h"
#include "metrics.h"
#include "sm.h"

#define EVENTS_PER_MESSAGE 64
#define WATCH_BUCKETS 8192 /* chains of the streams of one session */

enum watcher_state {
    W_WATCHING,
    W_SENDING,
    W_ENDING,
    W_ENDED,
    W_CLOSED_SENDING,
    W_DONE,
    W_NSTATES,
};

static const struct sm_conf watcher_states[W_NSTATES] = {
    [W_WATCHING] = {"WATCHING", SM_INITIAL,
                    SM_TO(W_SENDING) | SM_TO(W_ENDING) | SM_TO(W_ENDED) |
                        SM_TO(W_DONE)},
    [W_SENDING] = {"SENDING", 0,
                   SM_TO(W_WATCHING) | SM_TO(W_ENDED) |
                       SM_TO(W_CLOSED_SENDING)},
    [W_ENDING] = {"ENDING", 0, SM_TO(W_ENDED) | SM_TO(W_CLOSED_SENDING)},
    [W_ENDED] = {"ENDED", 0, SM_TO(W_DONE)},
    [W_CLOSED_SENDING] = {"CLOSED_SENDING", 0, SM_TO(W_DONE)},
    [W_DONE] = {"DONE", SM_FINAL, 0},
};

struct watcher {
    struct frontend_tag sent, closed;
    struct watches *w;
    struct sm sm; /* enum watcher_state */
    grpc_call *call;
    bool started;   /* the first message went out */
    uint64_t after; /* every event it matches up to here was sent */
    struct history_filter filter;
    char key[ENGINE_SESSION_MAX];
    grpc_byte_buffer *body; /* the message pending, or last sent */
    grpc_slice details;     /* the final status's */
    int cancelled;
    struct watcher *next;      /* every stream */
    struct watcher *next_same; /* its session's chain, or the prefixed */
    struct watcher *next_due;  /* woken (on_wake) */
    bool due;
    uint64_t ask; /* ahead of a copy that may lag: its ticket (history.h) */
};

/* What each state promises: a call, and a body while a message may be
 * pending. */
static bool watcher_invariant(const struct sm *sm, int prev)
{
    const struct watcher *c = container_of(sm, struct watcher, sm);
    (void)prev;
    switch ((enum watcher_state)sm_state(sm)) {
    case W_WATCHING:
    case W_ENDED:
    case W_ENDING:
    case W_CLOSED_SENDING:
        return c->call != NULL;
    case W_SENDING:
        return c->call != NULL && c->body != NULL && c->started;
    case W_DONE:
        return true;
    case W_NSTATES:
        break;
    }
    return false;
}

/* The chain c is on: its session's, or the prefixed streams'. */
static struct watcher **chain_of(struct watches *w, const char *key, size_t len,
                                 bool prefix)
{
    if (prefix)
        return &w->prefixed;
    return &w->by_session[siphash24(&w->key, key, len) % WATCH_BUCKETS];
}

/* -> DONE: frees c. */
static void finish(struct watcher *c)
{
    struct watches *w = c->w;
    struct watcher **p = &w->list;
    while (*p != c)
        p = &(*p)->next;
    *p = c->next;
    p = chain_of(w, c->key, c->filter.key_len, c->filter.prefix);
    while (*p != c)
        p = &(*p)->next_same;
    *p = c->next_same;
    sm_move(&c->sm, W_DONE);
    w->asking -= c->ask != 0;
    atomic_fetch_sub(&metrics.watch_streams, 1);
    grpc_byte_buffer_destroy(c->body);
    grpc_slice_unref(c->details);
    grpc_call_unref(c->call);
    free(c);
    w->live--;
}

struct encoded {
    uint8_t *buf;
    size_t len;
};

static void encode(void *arg, const struct store_event *const *evs, size_t n,
                   uint64_t seen)
{
    struct encoded *e = arg;
    if (n > 0)
        e->buf = codec_encode_watch(evs, n, seen, 0, &e->len);
}

/* Sets c->body to buf (taken). */
static void set_body(struct watcher *c, uint8_t *buf, size_t len)
{
    grpc_slice s = grpc_slice_from_copied_buffer((const char *)buf, len);
    free(buf);
    grpc_byte_buffer_destroy(c->body);
    c->body = grpc_raw_byte_buffer_create(&s, 1);
    grpc_slice_unref(s);
}

/* Starts ops (n of them) as c's send, moving to next; a send that cannot
 * start cancels the call (-> ENDED). */
static void start_send(struct watcher *c, grpc_op *ops, size_t n,
                       enum watcher_state next)
{
    if (!c->started) {
        memmove(ops + 1, ops, n * sizeof(*ops));
        memset(ops, 0, sizeof(*ops));
        ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
        n++;
        c->started = true;
    }
    if (grpc_call_start_batch(c->call, ops, n, &c->sent, NULL) !=
        GRPC_CALL_OK) {
        log_error("watch_failed", NULL);
        grpc_call_cancel(c->call, NULL);
        next = W_ENDED;
    }
    sm_move(&c->sm, next);
}

/* WATCHING -> ENDING: the end, with code and details, after a message
 * saying the oldest revision kept when compact is set. */
static void end(struct watcher *c, grpc_status_code code, const char *details,
                bool compact, uint64_t oldest)
{
    grpc_op ops[3];
    memset(ops, 0, sizeof(ops));
    size_t n = 0;
    if (compact) {
        size_t len;
        uint8_t *buf = codec_encode_watch(NULL, 0, c->after, oldest, &len);
        if (buf != NULL) {
            set_body(c, buf, len);
            ops[n].op = GRPC_OP_SEND_MESSAGE;
            ops[n++].data.send_message.send_message = c->body;
        }
    }
    c->details = grpc_slice_from_copied_string(details);
    ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[n].data.send_status_from_server.status = code;
    ops[n++].data.send_status_from_server.status_details = &c->details;
    metrics_count_request(MM_WATCH, (int)code);
    start_send(c, ops, n, W_ENDING);
}

/* WATCHING -> SENDING or ENDING: what the stream has not sent yet. */
static void update(struct watcher *c)
{
    struct watches *w = c->w;
    if (sm_state(&c->sm) != W_WATCHING)
        return;
    if (w->draining) {
        end(c, GRPC_STATUS_UNAVAILABLE, "draining", false, 0);
        return;
    }
    struct encoded e = {NULL, 0};
    uint64_t seen = c->after, oldest = 0;
    enum history_read rc =
        history_read(w->history, c->after, &c->filter, EVENTS_PER_MESSAGE,
                     encode, &e, &seen, &oldest);
    char why[160];
    switch (rc) {
    case HISTORY_READ:
        w->asking -= c->ask != 0;
        c->ask = 0;
        break;
    case HISTORY_COMPACTED:
        snprintf(why, sizeof(why),
                 "revision %llu is no longer kept (the oldest is %llu): "
                 "read the leases again and watch from 0",
                 (unsigned long long)(c->after + 1),
                 (unsigned long long)oldest);
        end(c, GRPC_STATUS_OUT_OF_RANGE, why, true, oldest);
        return;
    case HISTORY_AHEAD:
        /* A copy that may lag its store: ahead for sure only once a read
         * of the store begun since says so. */
        if (c->ask == 0 && (c->ask = history_ask(w->history)) != 0)
            w->asking++;
        if (c->ask != 0 && !history_answered(w->history, c->ask))
            return;
        snprintf(why, sizeof(why),
                 "revision %llu is ahead of this store's newest (%llu): "
                 "read the leases again and watch from 0",
                 (unsigned long long)c->after,
                 (unsigned long long)history_newest(w->history));
        end(c, GRPC_STATUS_OUT_OF_RANGE, why, true, oldest);
        return;
    }
    c->after = seen;
    if (e.buf == NULL && c->started)
        return; /* nothing of its own, or out of memory: the next wake */
    if (e.buf == NULL)
        e.buf = codec_encode_watch(NULL, 0, c->after, 0, &e.len);
    if (e.buf == NULL)
        return;
    set_body(c, e.buf, e.len);
    grpc_op ops[2];
    memset(ops, 0, sizeof(ops));
    ops[0].op = GRPC_OP_SEND_MESSAGE;
    ops[0].data.send_message.send_message = c->body;
    start_send(c, ops, 1, W_SENDING);
}

void watches_start(struct watches *w, grpc_call *call,
                   const struct request *req)
{
    struct watcher *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        log_error("watch_failed", "reason=\"out of memory\"");
        grpc_call_cancel(call, NULL);
        grpc_call_unref(call);
        return;
    }
    c->sent.kind = TAG_WATCH_SENT;
    c->closed.kind = TAG_WATCH_CLOSED;
    c->w = w;
    c->call = call;
    c->details = grpc_empty_slice();
    memcpy(c->key, req->session, req->session_len);
    c->filter.key = c->key;
    c->filter.key_len = req->session_len;
    c->filter.prefix = req->prefix;
    c->after = req->after_revision != 0 ? req->after_revision
                                        : history_newest(w->history);
    c->next = w->list;
    w->list = c;
    struct watcher **chain =
        chain_of(w, c->key, c->filter.key_len, c->filter.prefix);
    c->next_same = *chain;
    *chain = c;
    w->live++;
    atomic_fetch_add(&metrics.watch_streams, 1);
    sm_init(&c->sm, watcher_states, watcher_invariant, W_WATCHING);
    pthread_mutex_lock(&w->lock);
    if (w->waker == NULL && !w->draining) {
        grpc_call_ref(call);
        w->waker = call;
    }
    pthread_mutex_unlock(&w->lock);
    grpc_op op;
    memset(&op, 0, sizeof(op));
    op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    op.data.recv_close_on_server.cancelled = &c->cancelled;
    if (grpc_call_start_batch(call, &op, 1, &c->closed, NULL) != GRPC_CALL_OK) {
        log_error("watch_failed", NULL);
        finish(c);
        return;
    }
    update(c);
}

static void unexpected(struct watcher *c, const char *event)
{
    log_error("bad_event", "what=watch event=%s state=%s", event,
              sm_name(&c->sm));
    abort();
}

static void on_sent(struct watcher *c, bool success)
{
    switch ((enum watcher_state)sm_state(&c->sm)) {
    case W_SENDING:
        sm_move(&c->sm, success ? W_WATCHING : W_ENDED);
        update(c);
        return;
    case W_ENDING:
        sm_move(&c->sm, W_ENDED);
        return;
    case W_CLOSED_SENDING:
        finish(c);
        return;
    default:
        unexpected(c, "sent");
    }
}

static void on_closed(struct watcher *c)
{
    switch ((enum watcher_state)sm_state(&c->sm)) {
    case W_WATCHING:
        metrics_count_request(MM_WATCH, GRPC_STATUS_CANCELLED);
        /* fall through */
    case W_ENDED:
        finish(c);
        return;
    case W_SENDING:
    case W_ENDING:
        sm_move(&c->sm, W_CLOSED_SENDING);
        return;
    default:
        unexpected(c, "closed");
    }
}

struct waking {
    struct watches *w;
    struct watcher *due;
};

/* A session changed: its streams are due (called under the history's
 * lock: they look once it is let go). */
static void session_changed(void *arg, const char *session, size_t len)
{
    struct waking *k = arg;
    for (struct watcher *c = *chain_of(k->w, session, len, false); c != NULL;
         c = c->next_same)
        if (!c->due && c->filter.key_len == len &&
            memcmp(c->key, session, len) == 0) {
            c->due = true;
            c->next_due = k->due;
            k->due = c;
        }
}

static void on_wake(struct watches *w)
{
    pthread_mutex_lock(&w->lock);
    w->wake_pending = false;
    pthread_mutex_unlock(&w->lock);
    struct waking k = {w, NULL};
    uint64_t newest;
    if (history_sessions(w->history, w->dispatched, session_changed, &k,
                         &newest) != HISTORY_READ ||
        newest < w->dispatched) {
        /* It fell behind, or the history started again lower (a copy
         * of a store gone back): every stream looks. */
        for (struct watcher *c = w->list; c != NULL; c = c->next)
            update(c);
    } else {
        for (struct watcher *c = w->prefixed; c != NULL; c = c->next_same)
            update(c);
    }
    w->dispatched = newest;
    for (struct watcher *c = w->list; w->asking > 0 && c != NULL;
         c = c->next)
        if (c->ask != 0 && !c->due)
            update(c);
    for (struct watcher *c = k.due, *next; c != NULL; c = next) {
        next = c->next_due;
        c->due = false;
        update(c);
    }
}

void watches_on_event(struct watches *w, struct frontend_tag *tag, bool success)
{
    switch (tag->kind) {
    case TAG_WATCH_SENT:
        on_sent(container_of(tag, struct watcher, sent), success);
        return;
    case TAG_WATCH_CLOSED:
        on_closed(container_of(tag, struct watcher, closed));
        return;
    case TAG_WATCH_WAKE:
        on_wake(w);
        return;
    default:
        abort(); /* not one of watch's */
    }
}

void watches_wake(void *arg)
{
    struct watches *w = arg;
    pthread_mutex_lock(&w->lock);
    if (w->waker != NULL && !w->wake_pending) {
        w->wake_pending = true;
        if (grpc_call_start_batch(w->waker, NULL, 0, &w->wake_tag, NULL) !=
            GRPC_CALL_OK) {
            log_error("watch_wake_failed", NULL);
            w->wake_pending = false;
        }
    }
    pthread_mutex_unlock(&w->lock);
}

void watches_drain(struct watches *w)
{
    if (w->draining)
        return;
    pthread_mutex_lock(&w->lock);
    w->draining = true;
    grpc_call *waker = w->waker;
    w->waker = NULL;
    pthread_mutex_unlock(&w->lock);
    if (waker != NULL)
        grpc_call_unref(waker);
    for (struct watcher *c = w->list; c != NULL; c = c->next)
        update(c);
}

int watches_init(struct watches *w, struct history *history)
{
    memset(w, 0, sizeof(*w));
    w->history = history;
    w->wake_tag.kind = TAG_WATCH_WAKE;
    pthread_mutex_init(&w->lock, NULL);
    siphash_random_key(&w->key);
    w->by_session = calloc(WATCH_BUCKETS, sizeof(*w->by_session));
    if (w->by_session == NULL)
        return -1;
    if (history != NULL) {
        w->dispatched = history_newest(history);
        history_set_wake(history, watches_wake, w);
    }
    return 0;
}

void watches_destroy(struct watches *w)
{
    free(w->by_session);
    pthread_mutex_destroy(&w->lock);
}

bool watches_served(const struct watches *w)
{
    return history_served(w->history);
}

bool watches_empty(const struct watches *w)
{
    return w->live == 0;
}
