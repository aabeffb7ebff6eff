/*
 * liblease's front door (see lease.h): argument checks shared by every
 * backend, the error texts, and the per-thread reason of the last
 * failure.
 */
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "client.h"
#include "errmsg.h"
#include "lease.h"
#include "nanotime.h"
#include "validate.h"

struct lease_client {
    const struct lease_backend *backend;
    void *impl;
};

static _Thread_local char last_errmsg[256];

const char *lease_errmsg(void)
{
    return last_errmsg;
}

int client_fail(int err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    errmsg_vfail(err, last_errmsg, sizeof(last_errmsg), fmt, ap);
    va_end(ap);
    return err;
}

const char *lease_strerror(int err)
{
    switch (err) {
    case LEASE_OK:
        return "ok";
    case LEASE_EHELD:
        return "held by another owner, or ownership lost";
    case LEASE_EUNSUPPORTED:
        return "the service does not serve leases";
    case LEASE_EUNAVAILABLE:
        return "the lease service is unavailable";
    case LEASE_EINVAL:
        return "invalid argument";
    case LEASE_EDEADLINE:
        return "no answer within the deadline: outcome unknown";
    case LEASE_ENOMEM:
        return "out of memory";
    case LEASE_EDENIED:
        return "not allowed for this caller";
    case LEASE_EUNAUTH:
        return "no valid credentials";
    case LEASE_EGONE:
        return "the changes asked for are no longer kept: read again";
    default:
        return "unknown error";
    }
}

struct lease_client *lease_client_create(const struct lease_backend *backend,
                                         void *impl)
{
    struct lease_client *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return NULL;
    c->backend = backend;
    c->impl = impl;
    return c;
}

void lease_client_destroy(struct lease_client *c)
{
    if (c == NULL)
        return;
    if (c->backend->destroy != NULL)
        c->backend->destroy(c->impl);
    free(c);
}

static int check(const char *what, const char *s, size_t max)
{
    if (s == NULL)
        return client_fail(LEASE_EINVAL, "%s is NULL", what);
    const char *why =
        validate_string((const unsigned char *)s, strnlen(s, max + 1), max);
    return why == NULL ? LEASE_OK
                       : client_fail(LEASE_EINVAL, "%s: %s", what, why);
}

static int check_lease(const struct lease *l)
{
    if (l == NULL)
        return client_fail(LEASE_EINVAL, "lease is NULL");
    int err = check("session_id", l->session_id, LEASE_SESSION_MAX);
    return err != LEASE_OK ? err : check("owner", l->owner, LEASE_OWNER_MAX);
}

/* Runs a backend call with an error buffer; keeps its reason. */
static int finish(int err, const char *errmsg)
{
    if (err != LEASE_OK)
        client_fail(err, "%s", errmsg[0] != '\0' ? errmsg
                                                 : lease_strerror(err));
    return err;
}

int lease_acquire(struct lease_client *c, const char *session_id,
                  const char *owner, struct lease *out)
{
    int err = check("session_id", session_id, LEASE_SESSION_MAX);
    if (err == LEASE_OK)
        err = check("owner", owner, LEASE_OWNER_MAX);
    if (err != LEASE_OK)
        return err;
    char errmsg[256] = "";
    return finish(c->backend->acquire(c->impl, session_id, owner, out,
                                      errmsg, sizeof(errmsg)),
                  errmsg);
}

#define WAIT_POLL_NS INT64_C(250000000) /* lease_wait without a Wait */

/* Tries acquire until it is not held or deadline_ns passed, every
 * WAIT_POLL_NS. */
static int poll_acquire(struct lease_client *c, const char *session_id,
                        const char *owner, int64_t deadline_ns,
                        struct lease *out)
{
    for (;;) {
        int err = lease_acquire(c, session_id, owner, out);
        int64_t left = deadline_ns - nanotime_mono();
        if (err != LEASE_EHELD || left <= 0)
            return err;
        int64_t nap = left < WAIT_POLL_NS ? left : WAIT_POLL_NS;
        struct timespec ts = {nap / 1000000000, nap % 1000000000};
        nanosleep(&ts, NULL);
    }
}

int lease_wait(struct lease_client *c, const char *session_id,
               const char *owner, int64_t deadline_ns, struct lease *out)
{
    int err = check("session_id", session_id, LEASE_SESSION_MAX);
    if (err == LEASE_OK)
        err = check("owner", owner, LEASE_OWNER_MAX);
    if (err != LEASE_OK)
        return err;
    if (c->backend->wait == NULL)
        return poll_acquire(c, session_id, owner, deadline_ns, out);
    char errmsg[256] = "";
    err = c->backend->wait(c->impl, session_id, owner, deadline_ns, out, errmsg,
                           sizeof(errmsg));
    if (err == LEASE_EUNSUPPORTED)
        return poll_acquire(c, session_id, owner, deadline_ns, out);
    /* The wait ended at its deadline (or no service could be reached
     * until then: the wait gives up on neither before it): one acquire
     * settles what holds now, a grant made as the call ended included.
     * (gRPC's deadline is to the millisecond: it may come a moment
     * before deadline_ns.) */
    if ((err == LEASE_EDEADLINE || err == LEASE_EUNAVAILABLE) &&
        deadline_ns != INT64_MAX)
        return lease_acquire(c, session_id, owner, out);
    return finish(err, errmsg);
}

int lease_watch(struct lease_client *c, const char *session_id, bool prefix,
                uint64_t *revision, int64_t deadline_ns,
                int (*fn)(void *arg, const struct lease_event *ev), void *arg)
{
    int err = prefix && session_id != NULL && session_id[0] == '\0'
                  ? LEASE_OK
                  : check(prefix ? "prefix" : "session_id", session_id,
                          LEASE_SESSION_MAX);
    if (err != LEASE_OK)
        return err;
    if (revision == NULL || fn == NULL)
        return client_fail(LEASE_EINVAL, "revision or fn is NULL");
    if (c->backend->watch == NULL)
        return client_fail(LEASE_EUNSUPPORTED,
                           "this backend has no changes to watch");
    char errmsg[256] = "";
    err = c->backend->watch(c->impl, session_id, prefix, revision, deadline_ns,
                            fn, arg, errmsg, sizeof(errmsg));
    return finish(err, errmsg);
}

/* lease_renew, cut short at deadline_ns when until and the backend can. */
static int renew(struct lease_client *c, const struct lease *cur, bool until,
                 int64_t deadline_ns, struct lease *out)
{
    int err = check_lease(cur);
    if (err != LEASE_OK)
        return err;
    struct lease copy = *cur; /* out may be cur */
    char errmsg[256] = "";
    const struct lease_backend *b = c->backend;
    if (until && b->renew_until != NULL)
        err = b->renew_until(c->impl, &copy, deadline_ns, out, errmsg,
                             sizeof(errmsg));
    else
        err = b->renew(c->impl, &copy, out, errmsg, sizeof(errmsg));
    return finish(err, errmsg);
}

int lease_renew(struct lease_client *c, const struct lease *cur,
                struct lease *out)
{
    return renew(c, cur, false, 0, out);
}

int lease_renew_until(struct lease_client *c, const struct lease *cur,
                      int64_t deadline_ns, struct lease *out)
{
    return renew(c, cur, true, deadline_ns, out);
}

int lease_release(struct lease_client *c, const struct lease *cur)
{
    int err = check_lease(cur);
    if (err != LEASE_OK)
        return err;
    char errmsg[256] = "";
    return finish(c->backend->release(c->impl, cur, errmsg, sizeof(errmsg)),
                  errmsg);
}

int client_fill(struct lease *out, const char *session_id, size_t session_len,
                const char *owner, size_t owner_len, uint64_t token,
                int64_t expiry_ns, int64_t ttl_ns)
{
    if (session_len > LEASE_SESSION_MAX || owner_len > LEASE_OWNER_MAX)
        return LEASE_EUNAVAILABLE;
    memcpy(out->session_id, session_id, session_len);
    out->session_id[session_len] = '\0';
    memcpy(out->owner, owner, owner_len);
    out->owner[owner_len] = '\0';
    out->token = token;
    out->expiry_ns = expiry_ns;
    out->ttl_ns = ttl_ns;
    return LEASE_OK;
}
