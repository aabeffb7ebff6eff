/*
 * One lease call on its way through the daemon: decoded and validated by
 * the codec on the gRPC thread, decided and committed on the loop, and
 * answered by the front end. The strings are borrowed from the decoded
 * message, which lives until the call is answered.
 */
#ifndef LEASED_REQUEST_H
#define LEASED_REQUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum request_op { OP_ACQUIRE, OP_RENEW, OP_RELEASE };

/* The outcome, mapped to a gRPC status in one place (frontend.c). */
enum reply_status {
    REPLY_OK,
    REPLY_HELD,        /* FAILED_PRECONDITION */
    REPLY_INVALID,     /* INVALID_ARGUMENT */
    REPLY_UNAVAILABLE, /* UNAVAILABLE */
    REPLY_EXHAUSTED,   /* RESOURCE_EXHAUSTED */
    REPLY_INTERNAL,    /* INTERNAL */
};

struct request {
    struct request *next; /* the loop's queues */
    enum request_op op;
    const char *session;
    size_t session_len;
    const char *owner;
    size_t owner_len;
    uint64_t token; /* Renew, Release */

    /* Set by the loop before the reply. */
    enum reply_status status;
    bool needs_sync; /* changed ownership: answer only once on disk */
    uint64_t commit_seq; /* the loop's: which commit it waits to be synced */
    char reason[128]; /* status_details when not OK; may be empty */
    uint64_t grant_token;
    int64_t grant_expiry_ns;
};

#endif
