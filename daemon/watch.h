/*
 * leased.v1.Leases/Watch streams, on the completion-queue thread beside
 * the calls of frontend.c, which admits each Watch call (token, request,
 * policy) and hands it here. Each stream sends what the history
 * (history.h) holds after the revision it reached, a message at a time,
 * for as long as its call lasts.
 *
 * The loop appends to the history; the history's wake function
 * (watches_wake, on any thread) brings the completion-queue thread by an
 * empty batch on a call kept for it (the waker), so that the streams
 * send what is new without waiting for the thread's idle tick. Only the
 * streams that may want it look: those of a session that changed (found
 * by a hash table of sessions) and those of a prefix.
 */
#ifndef LEASED_WATCH_H
#define LEASED_WATCH_H

#include <grpc/grpc.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#include "frontend.h"
#include "history.h"
#include "request.h"
#include "siphash.h"

struct watcher;

struct watches {
    struct history *history; /* borrowed */
    struct watcher *list;    /* every stream */
    size_t live;
    bool draining;
    /* The streams of one session, by its hash (WATCH_BUCKETS chains),
     * and those of a prefix; the newest revision they were woken for. */
    struct siphash_key key;
    struct watcher **by_session;
    struct watcher *prefixed;
    uint64_t dispatched;
    size_t asking; /* streams ahead of a copy, waiting for its answer */
    /* The waker (see above), shared with the thread that appends. */
    pthread_mutex_t lock;
    grpc_call *waker; /* a ref of one Watch call's; NULL: none or drained */
    bool wake_pending;
    struct frontend_tag wake_tag;
};

/* Before the completion-queue thread starts: w serves history's events
 * (history NULL or not served: every Watch is UNIMPLEMENTED). Returns -1
 * when out of memory. */
int watches_init(struct watches *w, struct history *history);
void watches_destroy(struct watches *w); /* once empty */

/* Whether Watch is served: frontend.c answers UNIMPLEMENTED otherwise. */
bool watches_served(const struct watches *w);

/* A Watch call passed its checks: the stream of req's filter (copied)
 * starts; call is taken (its reference). */
void watches_start(struct watches *w, grpc_call *call,
                   const struct request *req);

/* One of the streams' tags (TAG_WATCH_*) completed. */
void watches_on_event(struct watches *w, struct frontend_tag *tag,
                      bool success);

/* Draining: every stream ends UNAVAILABLE "draining" and the waker is
 * let go (a call kept would hold the server's shutdown). Idempotent. */
void watches_drain(struct watches *w);

/* Whether no stream is left. */
bool watches_empty(const struct watches *w);

/* The history's wake function (arg: the struct watches). */
void watches_wake(void *arg);

#endif
