/*
 * The lease rules: what Acquire, Renew and Release decide, written once.
 *
 * rules_decide() looks at one session's stored lease (or its absence), a
 * request, the time and the TTL, and says what the lease becomes, or why
 * nothing changes. It keeps no state, allocates nothing, reads no clock
 * and does no I/O: each backend finds and locks the row its own way, asks
 * here, and stores the answer (the engine in memory, for the daemon and
 * liblease's in-memory backend; liblease's file-lock backend in a file).
 *
 * The rules (docs/protocol.md, "Semantics"; numbers as in engine.h):
 *  - a lease is live while it has an owner and now < expiry, or while the
 *    restart quarantine covers it (the caller says which rows it covers);
 *  - Acquire by another owner of a live lease is refused (RULES_HELD) (1);
 *  - Acquire of a live lease by its owner keeps the token and extends the
 *    expiry (see below);
 *  - any other Acquire is a takeover: token + 1, expiry now + TTL (2, 3);
 *  - Renew needs the stored owner and token; it keeps the token and
 *    extends the expiry, even after expiry (nobody took it over: every
 *    takeover raises the token); otherwise RULES_LOST (2, 4);
 *  - Release needs the stored owner and token; it clears the owner and
 *    keeps token and expiry (a tombstone); otherwise RULES_NOOP (5);
 *  - Revoke (an operator's) needs a holder, any owner, and the token
 *    presented unless that is 0; it ends the lease as Release does;
 *    otherwise RULES_NOOP (no holder) or RULES_LOST (another token);
 *  - to extend is to set expiry = now + TTL, and strictly later than the
 *    stored one (several at the same instant still move it forward).
 */
#ifndef LEASED_RULES_H
#define LEASED_RULES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum rules_op {
    RULES_ACQUIRE = 1,
    RULES_RENEW,
    RULES_RELEASE,
    RULES_REVOKE,
};

enum rules_code {
    RULES_OK = 0,   /* out->after is the row to store */
    RULES_HELD = 1, /* Acquire: another owner holds a live lease */
    RULES_LOST = 2, /* Renew: owner or token no longer match; Revoke: the
                       holder's token is another */
    RULES_NOOP = 3, /* Release, Revoke: nothing to free */
};

/* What an OK decision did, for the counters: a set of these. */
enum rules_flag {
    RULES_TAKEOVER = 1, /* a new holder, and a new token */
    RULES_EXPIRED = 2,  /* the end of a held lease that had run out: a
                           takeover replaced it, or it was collected */
    RULES_RECLAIM = 4,  /* a renewal after expiry; nobody took it over */
};

/* One session's lease as stored. owner is borrowed and not NUL-terminated;
 * an owner_len of 0 means released (owner may then be NULL). */
struct rules_row {
    const char *owner;
    size_t owner_len;
    uint64_t token;
    int64_t expiry_ns;
    /* The restart quarantine covers this row at the time of the call: it
     * was held when the last process stopped, and the quarantine has not
     * ended. It counts as live whatever its expiry says. */
    bool quarantined;
};

/* What the caller asks. owner is borrowed; Acquire needs 1 or more bytes
 * of it (an empty owner holds nothing, so Renew and Release fail). */
struct rules_request {
    const char *owner;
    size_t owner_len;
    uint64_t token; /* Renew, Release, Revoke: the token presented (Revoke:
                       0 for any); Acquire: unused */
};

struct rules_outcome {
    /* RULES_OK only; otherwise all zero. */
    struct rules_row after; /* owner borrowed: from the request after a
                               takeover, else from the stored row; never
                               quarantined after a takeover or release */
    bool takeover;          /* Acquire: a new holder, and a new token */
    bool durable;           /* ownership changed (a takeover or a
                               release): store it durably before answering */
};

/* Decides op on one session.
 *
 * row: its stored lease, borrowed (it may be an earlier outcome's, even
 * out->after); NULL when the session has none, which decides as a
 * released row with token 0 (a store with a token floor passes a
 * released row with token = floor instead). req: borrowed. now_ns and
 * ttl_ns (> 0): the time and the lease lifetime, in ns (Release and
 * Revoke read neither).
 *
 * Fills *out and returns RULES_OK, or a refusal
 * (RULES_HELD, RULES_LOST) or a no-op (RULES_NOOP), which change nothing.
 * Aborts on an op that is not an enum rules_op: a caller that got one
 * wrong must not release what it meant to renew. */
enum rules_code rules_decide(enum rules_op op, const struct rules_row *row,
                             const struct rules_request *req,
                             int64_t now_ns, int64_t ttl_ns,
                             struct rules_outcome *out);

/* Whether row (NULL: none) is live at now_ns. */
bool rules_live(const struct rules_row *row, int64_t now_ns);

/* The words for a refusal, one text per code for every backend to say:
 * "held by another owner" (RULES_HELD), "lease lost: owner or token no
 * longer match" (RULES_LOST). NULL for any other code. */
const char *rules_reason(enum rules_code code);

#endif
