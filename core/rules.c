/* The lease rules (see rules.h for the contract). */
#include "rules.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

/* A session without a row: as released, with token 0. */
static const struct rules_row none = {NULL, 0, 0, 0, false};

bool rules_live(const struct rules_row *row, int64_t now_ns)
{
    if (row == NULL || row->owner_len == 0)
        return false;
    return now_ns < row->expiry_ns || row->quarantined;
}

/* The owner and token of the request are the row's. A released row has
 * no owner, so it matches nobody. */
static bool holds(const struct rules_row *row,
                  const struct rules_request *req)
{
    return row->owner_len > 0 && row->owner_len == req->owner_len &&
           memcmp(row->owner, req->owner, req->owner_len) == 0 &&
           row->token == req->token;
}

static bool owned_by(const struct rules_row *row,
                     const struct rules_request *req)
{
    return row->owner_len > 0 && row->owner_len == req->owner_len &&
           memcmp(row->owner, req->owner, req->owner_len) == 0;
}

/* The expiry of an extension: now + TTL, and strictly later than before. */
static int64_t extend(const struct rules_row *row, int64_t now_ns,
                      int64_t ttl_ns)
{
    int64_t expiry = now_ns + ttl_ns;
    return expiry > row->expiry_ns ? expiry : row->expiry_ns + 1;
}

static enum rules_code acquire(const struct rules_row *row,
                               const struct rules_request *req, int64_t now_ns,
                               int64_t ttl_ns, struct rules_outcome *out)
{
    if (rules_live(row, now_ns)) {
        if (!owned_by(row, req))
            return RULES_HELD;
        /* Its owner again, while live: refresh, keep the token. */
        out->after = *row;
        out->after.expiry_ns = extend(row, now_ns, ttl_ns);
        return RULES_OK;
    }
    /* A takeover (free, released, expired): a greater token. */
    out->after = (struct rules_row){
        .owner = req->owner,
        .owner_len = req->owner_len,
        .token = row->token + 1,
        .expiry_ns = now_ns + ttl_ns,
    };
    out->takeover = true;
    out->durable = true;
    return RULES_OK;
}

static enum rules_code renew(const struct rules_row *row,
                             const struct rules_request *req, int64_t now_ns,
                             int64_t ttl_ns, struct rules_outcome *out)
{
    if (!holds(row, req))
        return RULES_LOST;
    /* Same owner and token: nobody took it over since, even if it expired
     * (every takeover raises the token), so renewing is safe. */
    out->after = *row;
    out->after.expiry_ns = extend(row, now_ns, ttl_ns);
    return RULES_OK;
}

/* A tombstone: the token stays, so the next takeover's is greater. */
static enum rules_code end(const struct rules_row *row,
                           struct rules_outcome *out)
{
    out->after = (struct rules_row){
        .token = row->token,
        .expiry_ns = row->expiry_ns,
    };
    out->durable = true;
    return RULES_OK;
}

static enum rules_code release(const struct rules_row *row,
                               const struct rules_request *req,
                               struct rules_outcome *out)
{
    return holds(row, req) ? end(row, out) : RULES_NOOP;
}

/* Whoever holds it, live or expired; the owner presented is not looked
 * at. */
static enum rules_code revoke(const struct rules_row *row,
                              const struct rules_request *req,
                              struct rules_outcome *out)
{
    if (row->owner_len == 0)
        return RULES_NOOP;
    if (req->token != 0 && req->token != row->token)
        return RULES_LOST;
    return end(row, out);
}

enum rules_code rules_decide(enum rules_op op, const struct rules_row *row,
                             const struct rules_request *req,
                             int64_t now_ns, int64_t ttl_ns,
                             struct rules_outcome *out)
{
    /* A copy: *row may be the last outcome's row, inside *out. */
    const struct rules_row r = row != NULL ? *row : none;
    *out = (struct rules_outcome){0};
    switch (op) {
    case RULES_ACQUIRE:
        assert(ttl_ns > 0 && req->owner_len > 0);
        return acquire(&r, req, now_ns, ttl_ns, out);
    case RULES_RENEW:
        assert(ttl_ns > 0);
        return renew(&r, req, now_ns, ttl_ns, out);
    case RULES_RELEASE:
        return release(&r, req, out);
    case RULES_REVOKE:
        return revoke(&r, req, out);
    }
    abort(); /* not an op: never guess one */
}

const char *rules_reason(enum rules_code code)
{
    switch (code) {
    case RULES_HELD:
        return "held by another owner";
    case RULES_LOST:
        return "lease lost: owner or token no longer match";
    case RULES_OK:
    case RULES_NOOP:
        break;
    }
    return NULL;
}
