/*
 * One lease call on its way through the daemon: decoded and validated by
 * the codec on the gRPC thread, decided and committed on the loop, and
 * answered by the front end. The strings are borrowed from the decoded
 * message, which lives until the call is answered.
 */
#ifndef LEASED_REQUEST_H
#define LEASED_REQUEST_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "identity.h"

struct policy_rule;

enum request_op {
    OP_ACQUIRE,
    OP_RENEW,
    OP_RELEASE,
    /* leased.v1.Leases: an Acquire that waits in line (mode.h), and a
     * stream of changes (watch.h: never handed to the loop). */
    OP_WAIT,
    OP_WATCH,
    /* leased.admin.v1.Admin (request_is_admin()). */
    OP_GET,
    OP_LIST,
    OP_STATS,
    OP_REVOKE,
    OP_SNAPSHOT,
};

/* Whether op is a leased.admin.v1.Admin call, made with the admin tokens
 * when there are any. Otherwise it is a lease call (Acquire, Renew,
 * Release, Wait) or a Watch. */
static inline bool request_is_admin(enum request_op op)
{
    return op >= OP_GET;
}

/* Whether op takes a lease (Acquire, or Wait, which is an Acquire that
 * waits in line): the same request, decided by the same rule. */
static inline bool request_acquires(enum request_op op)
{
    return op == OP_ACQUIRE || op == OP_WAIT;
}

/* Whether op only reads (Get, List, Stats, Snapshot): answered without a
 * commit. Revoke, an admin call, changes a lease as a Release does. */
static inline bool request_is_read(enum request_op op)
{
    return request_is_admin(op) && op != OP_REVOKE;
}

/* The outcome, mapped to a gRPC status in one place (frontend.c). */
enum reply_status {
    REPLY_OK,
    REPLY_HELD,          /* FAILED_PRECONDITION */
    REPLY_INVALID,       /* INVALID_ARGUMENT */
    REPLY_UNAVAILABLE,   /* UNAVAILABLE */
    REPLY_EXHAUSTED,     /* RESOURCE_EXHAUSTED */
    REPLY_INTERNAL,      /* INTERNAL */
    REPLY_NOT_FOUND,     /* NOT_FOUND (admin Get) */
    REPLY_DENIED,        /* PERMISSION_DENIED (policy.h) */
    REPLY_CANCELLED,     /* CANCELLED: a Wait whose call ended meanwhile */
    REPLY_UNIMPLEMENTED, /* UNIMPLEMENTED: a call the mode does not serve */
};

/* What an OK answer of a lease call changed, for the audit (audit.h). */
enum request_change {
    CHANGE_NONE,     /* nothing, or only an expiry (a renewal) */
    CHANGE_TAKEOVER, /* a new holder and a new token: grant_token */
    CHANGE_RELEASE,  /* the holder (owner, token) let go */
    CHANGE_REVOKE,   /* an operator ended admin->leases[0] */
};

/* One lease in an admin answer (strings owned by the answer). */
struct admin_lease {
    char *session, *owner;
    size_t session_len, owner_len;
    uint64_t token;
    int64_t expiry_ns;
    bool live;
};

/* What an admin call answers, made by the loop and freed with
 * admin_result_free() once the reply is sent. */
struct admin_result {
    struct admin_lease *leases; /* Get, Revoke: one; List: a page */
    size_t n, cap;
    size_t seen;                /* List: rows looked at (admin.h) */
    char *next;                 /* List: the next page's token, or NULL */
    size_t next_len;
    void *snapshot;             /* Snapshot: the database, snapshot_len */
    size_t snapshot_len;        /* bytes, freed with snapshot_free() */
    void (*snapshot_free)(void *);
    struct admin_stats {
        uint64_t live_leases, lease_entries, takeovers, expiries, reclaims;
        uint64_t token_high_water_mark;
        int64_t uptime_s, quarantine_remaining_ms;
        bool storage_failing;
    } stats;
};

struct request {
    struct request *next; /* the loop's queues */
    enum request_op op;
    const char *session;
    size_t session_len;
    const char *owner;
    size_t owner_len;
    uint64_t token; /* Renew, Release; Revoke: 0 for any */
    /* Watch: session is the session, or the prefix when `prefix`; the
     * changes after after_revision. */
    bool prefix;
    uint64_t after_revision;
    /* List: session is the prefix, and: */
    const char *page_token;
    size_t page_token_len, page_size;
    /* The caller (identity.h), and for a List the policy rule whose
     * session prefixes limit what it may see (NULL: no limit). */
    char identity[IDENTITY_MAX + 1];
    const struct policy_rule *list_rule;

    /* Set by the loop before the reply. */
    enum reply_status status;
    bool needs_sync; /* changed ownership: answer only once on disk */
    uint64_t commit_seq; /* the loop's: which commit it waits to be synced */
    /* The loop's, for a lease call it queues: its session's counter of
     * the calls ahead (mode.h), hashed once. */
    uint32_t order_slot;
    bool woken;       /* the loop's: a Wait taken from its line, decided next */
    char reason[128]; /* status_details when not OK; may be empty */
    uint64_t grant_token;
    enum request_change change;
    int64_t grant_expiry_ns;
    int64_t grant_ttl_ns; /* an OK Acquire or Renew: the lease's TTL */
    struct admin_result *admin; /* admin calls */
    /* A Wait's call ended (cancelled, its deadline passed, its connection
     * dropped) while the loop has it: set by the front end's thread,
     * which then tells the mode (mode_cancelled()). */
    atomic_bool ended;
    /* The shared mode's, for a Wait in the database's line: its number
     * there (at this replica), the replica's table of them, when to look
     * at its lease again (monotonic), the step its next batch call takes
     * (enum pgstore_line), which of the replica's listening connections
     * it joined by, whether a call of it is in a batch (or queued for
     * one), whether the database said it is in line, and whether its
     * grant came meanwhile (then set as the reply). */
    uint64_t line_call;
    struct request *line_next;
    int64_t line_look_ns;
    uint32_t line_gen;
    uint8_t line_step;
    bool line_busy, line_joined, line_granted;
};

/* Frees an admin answer (admin.h makes them). Accepts NULL. */
void admin_result_free(struct admin_result *r);

#endif
