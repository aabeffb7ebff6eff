/*
 * The gRPC driver (see lease.h, lease_grpc_open): the three lease calls as
 * unary calls of mecatl.driver.v1.SessionLeaseService, and lease_wait as
 * leased's own leased.v1.Leases/Wait (a server without it answers
 * UNIMPLEMENTED, and client.c polls instead), and lease_watch as its
 * server-streaming Watch, with gRPC C core and
 * protobuf-c. Each call has its own completion queue, so one client
 * serves any number of threads at once. Targets, TLS, token and failover
 * are conn.c's.
 */
#include <grpc/grpc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "conn.h"
#include "lease.h"
#include "leased/v1/leases.pb-c.h"
#include "mecatl/driver/v1/session_lease.pb-c.h"
#include "status.h"

enum method { M_ACQUIRE, M_RENEW, M_RELEASE, M_WAIT, M_WATCH, M_COUNT };

struct driver {
    struct conn conn;
    char paths[M_COUNT][96];
};

static int status_error(grpc_status_code code)
{
    switch (code) {
    case GRPC_STATUS_OK:
        return LEASE_OK;
    case GRPC_STATUS_FAILED_PRECONDITION:
        return LEASE_EHELD;
    case GRPC_STATUS_UNIMPLEMENTED:
        return LEASE_EUNSUPPORTED;
    case GRPC_STATUS_INVALID_ARGUMENT:
        return LEASE_EINVAL;
    case GRPC_STATUS_DEADLINE_EXCEEDED:
        return LEASE_EDEADLINE;
    case GRPC_STATUS_PERMISSION_DENIED:
        return LEASE_EDENIED;
    case GRPC_STATUS_UNAUTHENTICATED:
        return LEASE_EUNAUTH;
    default:
        return LEASE_EUNAVAILABLE;
    }
}

/* One unary call, ending by end_ns (CLOCK_MONOTONIC; 0: the timeout's
 * end), or for M_WAIT at end_ns (past the timeout: conn_call_long):
 * sends req, and on OK unpacks the reply with desc into *resp (free with
 * protobuf_c_message_free_unpacked) and the TTL the server said into
 * *ttl_ns (0: none; ttl_ns may be NULL). */
static int call(struct driver *d, enum method m, int64_t end_ns,
                const ProtobufCMessage *req,
                const ProtobufCMessageDescriptor *desc,
                ProtobufCMessage **resp, int64_t *ttl_ns, char *errmsg,
                size_t len)
{
    char details[256];
    grpc_status_code status =
        m == M_WAIT ? conn_call_long(&d->conn, d->paths[m], end_ns, req, desc,
                                     resp, ttl_ns, details, sizeof(details))
                    : conn_call(&d->conn, d->paths[m], end_ns, req, desc, resp,
                                ttl_ns, details, sizeof(details));
    int err = status_error(status);
    if (err != LEASE_OK)
        snprintf(errmsg, len, "%s (%s)",
                 details[0] != '\0' ? details : lease_strerror(err),
                 status_name(status));
    return err;
}

/* Copies the lease of a LeaseResponse, with the TTL said beside it, into
 * *out. */
static int take_lease(ProtobufCMessage *resp, int64_t ttl_ns,
                      struct lease *out, char *errmsg, size_t len)
{
    Mecatl__Driver__V1__LeaseResponse *r =
        (Mecatl__Driver__V1__LeaseResponse *)resp;
    const Mecatl__Driver__V1__Lease *l = r->lease;
    int err = LEASE_EUNAVAILABLE;
    if (l == NULL || l->expiry == NULL)
        snprintf(errmsg, len, "reply without a lease");
    else if (client_fill(out, l->session_id, strlen(l->session_id), l->owner,
                         strlen(l->owner), l->token,
                         l->expiry->seconds * 1000000000 + l->expiry->nanos,
                         ttl_ns) != LEASE_OK)
        snprintf(errmsg, len, "reply lease over the size limits");
    else
        err = LEASE_OK;
    protobuf_c_message_free_unpacked(resp, NULL);
    return err;
}

/* The wire form of a lease (strings borrowed from l). */
static void wire_lease(const struct lease *l, Mecatl__Driver__V1__Lease *w,
                       Google__Protobuf__Timestamp *ts)
{
    mecatl__driver__v1__lease__init(w);
    google__protobuf__timestamp__init(ts);
    w->session_id = (char *)l->session_id;
    w->owner = (char *)l->owner;
    w->token = l->token;
    ts->seconds = l->expiry_ns / 1000000000;
    ts->nanos = (int32_t)(l->expiry_ns % 1000000000);
    w->expiry = ts;
}

/* An Acquire (M_ACQUIRE) or a Wait (M_WAIT, until end_ns): the messages
 * of Wait have the fields, numbers and types of Acquire's
 * (leases.proto), the same bytes on the wire. */
static int take(void *impl, enum method m, int64_t end_ns,
                const char *session_id, const char *owner, struct lease *out,
                char *errmsg, size_t len)
{
    Mecatl__Driver__V1__AcquireRequest req =
        MECATL__DRIVER__V1__ACQUIRE_REQUEST__INIT;
    req.session_id = (char *)session_id;
    req.owner = (char *)owner;
    ProtobufCMessage *resp;
    int64_t ttl_ns;
    int err = call(impl, m, end_ns, &req.base,
                   &mecatl__driver__v1__lease_response__descriptor, &resp,
                   &ttl_ns, errmsg, len);
    return err == LEASE_OK ? take_lease(resp, ttl_ns, out, errmsg, len) : err;
}

static int drv_acquire(void *impl, const char *session_id, const char *owner,
                       struct lease *out, char *errmsg, size_t len)
{
    return take(impl, M_ACQUIRE, 0, session_id, owner, out, errmsg, len);
}

static int drv_wait(void *impl, const char *session_id, const char *owner,
                    int64_t deadline_ns, struct lease *out, char *errmsg,
                    size_t len)
{
    return take(impl, M_WAIT, deadline_ns, session_id, owner, out, errmsg, len);
}

static int drv_renew_until(void *impl, const struct lease *cur,
                           int64_t deadline_ns, struct lease *out,
                           char *errmsg, size_t len)
{
    Mecatl__Driver__V1__Lease lease;
    Google__Protobuf__Timestamp ts;
    wire_lease(cur, &lease, &ts);
    Mecatl__Driver__V1__RenewRequest req =
        MECATL__DRIVER__V1__RENEW_REQUEST__INIT;
    req.lease = &lease;
    ProtobufCMessage *resp;
    int64_t ttl_ns;
    int err = call(impl, M_RENEW, deadline_ns, &req.base,
                   &mecatl__driver__v1__lease_response__descriptor, &resp,
                   &ttl_ns, errmsg, len);
    return err == LEASE_OK ? take_lease(resp, ttl_ns, out, errmsg, len) : err;
}

static int drv_renew(void *impl, const struct lease *cur, struct lease *out,
                     char *errmsg, size_t len)
{
    return drv_renew_until(impl, cur, 0, out, errmsg, len);
}

static int drv_release(void *impl, const struct lease *cur, char *errmsg,
                       size_t len)
{
    Mecatl__Driver__V1__Lease lease;
    Google__Protobuf__Timestamp ts;
    wire_lease(cur, &lease, &ts);
    Mecatl__Driver__V1__ReleaseRequest req =
        MECATL__DRIVER__V1__RELEASE_REQUEST__INIT;
    req.lease = &lease;
    ProtobufCMessage *resp;
    int err = call(impl, M_RELEASE, 0, &req.base,
                   &mecatl__driver__v1__release_response__descriptor, &resp,
                   NULL, errmsg, len);
    if (err == LEASE_OK)
        protobuf_c_message_free_unpacked(resp, NULL);
    return err;
}

/* A Watch under way: its request (whose revision follows the stream,
 * for the next target to resume from) and the caller's callback. */
struct watching {
    Leased__V1__WatchRequest req;
    uint64_t *revision;
    int (*fn)(void *arg, const struct lease_event *ev);
    void *arg;
    bool bad; /* a lease over the size limits came */
};

static void reached(struct watching *w, uint64_t revision)
{
    *w->revision = revision;
    w->req.after_revision = revision;
}

/* One WatchResponse: each event to the caller, then the revision the
 * message covers. A lease over the size limits is not one leased sends:
 * the stream stops there, as on a malformed message. */
static int on_watch(void *arg, ProtobufCMessage *msg)
{
    struct watching *w = arg;
    const Leased__V1__WatchResponse *m = (Leased__V1__WatchResponse *)msg;
    for (size_t i = 0; i < m->n_events; i++) {
        const Leased__V1__Event *e = m->events[i];
        const Leased__V1__Lease *l = e->lease;
        struct lease_event ev = {.revision = e->revision,
                                 .kind = (enum lease_event_kind)e->kind};
        if (l == NULL || l->expiry == NULL ||
            client_fill(&ev.lease, l->session_id, strlen(l->session_id),
                        l->owner, strlen(l->owner), l->token,
                        l->expiry->seconds * 1000000000 + l->expiry->nanos,
                        0) != LEASE_OK) {
            w->bad = true;
            return 1;
        }
        reached(w, e->revision);
        if (w->fn(w->arg, &ev) != 0)
            return 1;
    }
    if (m->compact_revision == 0)
        reached(w, m->revision);
    return 0;
}

static int drv_watch(void *impl, const char *session_id, bool prefix,
                     uint64_t *revision, int64_t deadline_ns,
                     int (*fn)(void *arg, const struct lease_event *ev),
                     void *arg, char *errmsg, size_t len)
{
    struct driver *d = impl;
    struct watching w = {LEASED__V1__WATCH_REQUEST__INIT, revision, fn, arg,
                         false};
    if (prefix)
        w.req.prefix = (char *)session_id;
    else
        w.req.session_id = (char *)session_id;
    w.req.after_revision = *revision;
    char details[256];
    grpc_status_code status =
        conn_stream(&d->conn, d->paths[M_WATCH], deadline_ns, &w.req.base,
                    &leased__v1__watch_response__descriptor, on_watch, &w,
                    details, sizeof(details));
    int err =
        status == GRPC_STATUS_OUT_OF_RANGE ? LEASE_EGONE : status_error(status);
    if (w.bad) {
        err = LEASE_EUNAVAILABLE;
        snprintf(details, sizeof(details),
                 "an event's lease is over the "
                 "size limits");
    }
    if (err != LEASE_OK)
        snprintf(errmsg, len, "%s (%s)",
                 details[0] != '\0' ? details : lease_strerror(err),
                 status_name(status));
    return err;
}

static void drv_destroy(void *impl)
{
    struct driver *d = impl;
    conn_close(&d->conn);
    free(d);
}

static const struct lease_backend grpc_backend = {
    .acquire = drv_acquire,
    .renew = drv_renew,
    .release = drv_release,
    .destroy = drv_destroy,
    .renew_until = drv_renew_until,
    .wait = drv_wait,
    .watch = drv_watch,
};

int lease_grpc_open(const char *target, const struct lease_grpc_options *opts,
                    struct lease_client **out)
{
    *out = NULL;
    struct driver *d = calloc(1, sizeof(*d));
    if (d == NULL)
        return client_fail(LEASE_ENOMEM, "out of memory");
    char why[512];
    int err = conn_open(&d->conn, target, opts, why, sizeof(why));
    if (err != LEASE_OK) {
        free(d);
        return client_fail(err, "%s", why);
    }
    const ProtobufCServiceDescriptor *svc =
        &mecatl__driver__v1__session_lease_service__descriptor;
    static const char *const names[M_COUNT] = {"Acquire", "Renew", "Release",
                                               "Wait", "Watch"};
    for (int m = 0; m < M_COUNT; m++)
        snprintf(d->paths[m], sizeof(d->paths[m]), "/%s/%s",
                 m >= M_WAIT ? leased__v1__leases__descriptor.name : svc->name,
                 names[m]);
    if ((*out = lease_client_create(&grpc_backend, d)) == NULL) {
        drv_destroy(d);
        return client_fail(LEASE_ENOMEM, "out of memory");
    }
    return LEASE_OK;
}

int lease_grpc_wait_shutdown(int timeout_ms)
{
    if (!conn_wait_shutdown(timeout_ms))
        return client_fail(LEASE_EDEADLINE, "gRPC is still in use");
    return LEASE_OK;
}
