/* Audit lines (see audit.h). */
#include "audit.h"

#include <grpc/grpc.h>
#include <grpc/support/alloc.h>
#include <stdio.h>
#include <string.h>

#include "clock.h"
#include "codec.h"
#include "engine.h"

/* A call's identity, session and owner, made quotable: an identity comes
 * from a certificate or a token file, and may hold any byte. */
struct quoted {
    char identity[IDENTITY_MAX + 1];
    char session[ENGINE_SESSION_MAX + 1];
    char owner[ENGINE_OWNER_MAX + 1];
};

static void quote(struct quoted *q, const struct request *req,
                  const char *owner, size_t owner_len)
{
    log_quotable(q->identity, sizeof(q->identity), req->identity,
                 strlen(req->identity));
    log_quotable(q->session, sizeof(q->session), req->session,
                 req->session_len);
    log_quotable(q->owner, sizeof(q->owner), owner, owner_len);
}

void audit_change(const struct request *req)
{
    if (req->status != REPLY_OK || req->change == CHANGE_NONE)
        return;
    struct quoted q;
    if (req->change == CHANGE_REVOKE) { /* the owner is the lease's */
        const struct admin_lease *l = &req->admin->leases[0];
        quote(&q, req, l->owner, l->owner_len);
        log_info("revoke",
                 "identity=\"%s\" session=\"%s\" owner=\"%s\" token=%llu",
                 q.identity, q.session, q.owner,
                 (unsigned long long)l->token);
        return;
    }
    quote(&q, req, req->owner, req->owner_len);
    if (req->change == CHANGE_RELEASE) {
        log_info("release",
                 "identity=\"%s\" session=\"%s\" owner=\"%s\" token=%llu",
                 q.identity, q.session, q.owner,
                 (unsigned long long)req->token);
        return;
    }
    char expires[LOG_TIME_LEN];
    log_format_time(req->grant_expiry_ns, expires);
    log_info("takeover",
             "identity=\"%s\" session=\"%s\" owner=\"%s\" token=%llu "
             "expires=%s",
             q.identity, q.session, q.owner,
             (unsigned long long)req->grant_token, expires);
}

static bool pass(struct log_limit *limit, uint64_t *held)
{
    limit->burst = AUDIT_REFUSALS_PER_S;
    return log_limit_pass(limit, clock_mono_ns(), held);
}

void audit_denied(struct log_limit *limit, const struct request *req)
{
    uint64_t held;
    if (!pass(limit, &held))
        return;
    char path[128];
    codec_method_path(req->op, path, sizeof(path));
    struct quoted q;
    quote(&q, req, req->owner, req->owner_len);
    char reason[sizeof(req->reason)];
    log_quotable(reason, sizeof(reason), req->reason, strlen(req->reason));
    log_info("denied",
             "identity=\"%s\" method=%s session=\"%s\" owner=\"%s\" "
             "token=%llu reason=\"%s\" not_logged=%llu",
             q.identity, strrchr(path, '/') + 1, q.session, q.owner,
             (unsigned long long)req->token, reason,
             (unsigned long long)held);
}

void audit_unauthenticated(struct log_limit *limit, struct grpc_call *call)
{
    uint64_t held;
    if (!pass(limit, &held))
        return;
    char *peer = grpc_call_get_peer(call);
    log_info("unauthenticated", "peer=%s not_logged=%llu",
             peer != NULL ? peer : "unknown", (unsigned long long)held);
    gpr_free(peer);
}
