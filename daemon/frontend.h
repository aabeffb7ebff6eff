/*
 * The gRPC front end: listeners, one completion-queue thread, and the
 * hand-off of lease calls to the libuv loop. This is the daemon's one
 * threaded seam; everything else runs on the loop.
 *
 * The completion-queue thread accepts calls, decodes and validates them
 * (answering bad ones itself), and queues good ones for the loop, at most
 * max_pending at a time (more get RESOURCE_EXHAUSTED). Unknown methods get
 * UNIMPLEMENTED at once. The loop answers each queued request with
 * frontend_reply(), exactly once.
 */
#ifndef LEASED_FRONTEND_H
#define LEASED_FRONTEND_H

#include <stddef.h>
#include <uv.h>

#include "request.h"

struct frontend;

struct frontend_callbacks {
    /* On the loop: a list of new requests linked by ->next, oldest first.
     * The loop owns answering each of them. */
    void (*requests)(void *arg, struct request *list);
    /* On the loop: after frontend_shutdown(), every call is answered and
     * the gRPC server is gone; frontend_destroy() may be called. */
    void (*stopped)(void *arg);
    void *arg;
};

/* Creates the gRPC server, binds every address in listen[] (borrowed),
 * logs each as `listening addr=…`, and starts the completion-queue thread.
 * grpc_init() must have been called. Returns NULL with errmsg set on
 * failure. */
struct frontend *frontend_create(uv_loop_t *loop, const char *const *listen,
                                 size_t nlisten, size_t max_pending,
                                 const struct frontend_callbacks *cb,
                                 char *errmsg, size_t errmsg_len);

/* On the loop: sends the reply of a request handed out by the requests
 * callback. req must not be touched afterwards. */
void frontend_reply(struct frontend *fe, struct request *req);

/* On the loop: stops accepting calls; those in progress finish. The
 * stopped callback follows. */
void frontend_shutdown(struct frontend *fe);

/* On the loop, after the stopped callback: joins the thread and frees
 * everything (the uv handle asynchronously). Accepts NULL. */
void frontend_destroy(struct frontend *fe);

#endif
