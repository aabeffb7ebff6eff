/*
 * The gRPC front end: listeners, one completion-queue thread, and the
 * hand-off of lease calls to the libuv loop. This is the daemon's one
 * threaded seam; everything else runs on the loop.
 *
 * The completion-queue thread accepts calls, checks their bearer token
 * (UNAUTHENTICATED before anything else) and notes who made them
 * (identity.h), decodes and validates them (answering bad ones itself),
 * refuses what the policy does not allow (PERMISSION_DENIED, policy.h,
 * with an audit line: audit.h), and queues good ones for the loop, at most
 * max_pending at a time (more get RESOURCE_EXHAUSTED). Unknown methods get
 * UNIMPLEMENTED at once, and grpc.health.v1 is served there too
 * (health.h). With client certificates, each connection's verified
 * identity is logged when its first call arrives. The loop answers each
 * queued request with frontend_reply(), exactly once.
 */
#ifndef LEASED_FRONTEND_H
#define LEASED_FRONTEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "config.h"
#include "history.h"
#include "policy.h"
#include "request.h"
#include "tls.h"
#include "tokens.h"

struct frontend;

struct frontend_callbacks {
    /* On the gRPC thread, as each call that passed its checks arrives:
     * true when it was decided at once (its reply set, nothing to audit:
     * mode_arrive()); false hands it to the loop. */
    bool (*arrived)(void *arg, struct request *req);
    /* On the loop: a list of new requests linked by ->next, oldest first.
     * The loop owns answering each of them. */
    void (*requests)(void *arg, struct request *list);
    /* On the loop: after frontend_shutdown(), every call is answered and
     * the gRPC server is gone; frontend_destroy() may be called. */
    void (*stopped)(void *arg);
    /* On the loop: Wait calls it has were cancelled, passed their
     * deadline or lost their connection; each has its request's `ended`
     * set (mode_cancelled()). */
    void (*ended)(void *arg);
    void *arg;
};

struct frontend_options {
    const char *const *listen; /* HOST:PORT or unix:PATH */
    size_t nlisten;
    size_t max_pending;
    struct tls *tls;       /* TLS on every TCP listener; NULL: plaintext */
    struct tokens *tokens; /* bearer tokens every call needs; NULL: none */
    struct tokens *admin_tokens; /* admin calls need these instead; NULL:
                                  * the same as the others */
    struct policy *policy; /* what each identity may do; NULL: anything */
    unsigned socket_mode;  /* of unix sockets, e.g. 0660 */
    const struct config_limits *limits;
    int64_t drain_ns; /* after frontend_shutdown(), calls get this long */
    struct history *history; /* what Watch streams send (history.h) */
};

/* Creates the gRPC server, binds every address (the options and what they
 * point to are borrowed and must outlive the frontend), logs each as
 * `listening addr=…`, and starts the completion-queue thread. grpc_init()
 * must have been called. Returns NULL with errmsg set on failure; then the
 * server is shut down and gone, and only the frontend's uv handle is left
 * closing: the next run of the loop frees it (and needs nothing else to
 * end). */
struct frontend *frontend_create(uv_loop_t *loop,
                                 const struct frontend_options *opts,
                                 const struct frontend_callbacks *cb,
                                 char *errmsg, size_t errmsg_len);

/* On the loop: sends the reply of a request handed out by the requests
 * callback. req must not be touched afterwards. */
void frontend_reply(struct frontend *fe, struct request *req);

/* On the loop: how many new requests must wait before they wake the
 * loop (1 at first: each does); 0: none does. Until then they wait in
 * the hand-off; a lower threshold hands over those that wait, if there
 * are enough, on the next run of the loop. An owner that could only
 * queue them (every database connection busy) saves a wake-up per call,
 * and one that gains by waiting for more (a batch in flight, the next one
 * better big) saves the batches in between. */
void frontend_want_requests(struct frontend *fe, size_t at);

/* On the loop: whether storage works, for health checks (true at
 * first). */
void frontend_set_serving(struct frontend *fe, bool serving);

/* On the loop: health turns NOT_SERVING (Watch streams get it, then
 * end), new calls are refused (UNAVAILABLE), and those in progress get
 * drain_ns to finish before they are cancelled. The stopped callback
 * follows. */
void frontend_shutdown(struct frontend *fe);

/* On the loop, after the stopped callback: joins the thread and frees
 * everything (the uv handle asynchronously). Accepts NULL. */
void frontend_destroy(struct frontend *fe);

/* The completion-queue thread's tags (frontend.c's and health.c's). Each
 * batch a call can have pending has its own tag, embedded in the call;
 * its kind says which batch completed. */
enum frontend_tag_kind {
    TAG_CALL,          /* a lease, admin or unknown-method call arrived */
    TAG_HANDBACK,      /* the empty batch that brings the reply list */
    TAG_REPLY,         /* a call's final batch */
    TAG_CLOSED,        /* a Wait call is over (RECV_CLOSE_ON_SERVER) */
    TAG_SHUTDOWN,      /* the server's shutdown notification */
    TAG_HEALTH_CALL,   /* a Check or Watch call arrived */
    TAG_HEALTH_SENT,   /* a health call's send batch */
    TAG_HEALTH_CLOSED, /* a Watch call is over (RECV_CLOSE_ON_SERVER) */
    TAG_WATCH_SENT,    /* a leased.v1 Watch stream's send batch */
    TAG_WATCH_CLOSED,  /* a Watch stream is over (RECV_CLOSE_ON_SERVER) */
    TAG_WATCH_WAKE,    /* new events (watch.h's waker) */
};

struct frontend_tag {
    enum frontend_tag_kind kind;
};

#endif
