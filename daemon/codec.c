/*
 * protobuf-c <-> struct request (see codec.h).
 *
 * Uses the mirror messages of proto/leased/codec/v1/wire.proto, whose
 * `bytes` fields keep each string's length, so that an embedded NUL is
 * seen and refused rather than silently cutting the string short.
 */
#include "codec.h"

#include <assert.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "errmsg.h"
#include "grpc/health/v1/health.pb-c.h"
#include "leased/admin/v1/admin.pb-c.h"
#include "leased/codec/v1/wire.pb-c.h"
#include "leased/v1/leases.pb-c.h"
#include "mecatl/driver/v1/session_lease.pb-c.h"
#include "store.h"
#include "validate.h"
#include "version.h"

__attribute__((format(printf, 2, 3))) static int
invalid(struct request *req, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    req->status = REPLY_INVALID;
    errmsg_vfail(-1, req->reason, sizeof(req->reason), fmt, ap);
    va_end(ap);
    return -1;
}

static int take_string(struct request *req, const char *field,
                       const ProtobufCBinaryData *in, size_t max,
                       const char **out, size_t *out_len)
{
    const char *why = validate_string(in->data, in->len, max);
    if (why != NULL)
        return invalid(req, "%s: %s", field, why);
    *out = (const char *)in->data;
    *out_len = in->len;
    return 0;
}

/* An admin request. The strings of a read are protobuf-c's
 * NUL-terminated copies (an embedded NUL ends them early; harmless for
 * reads that change nothing). */
static int decode_admin(enum request_op op, const uint8_t *buf, size_t len,
                        struct request *req, void **msg)
{
    if (op == OP_STATS) {
        *msg = leased__admin__v1__stats_request__unpack(NULL, len, buf);
        return *msg != NULL ? 0 : invalid(req, "malformed StatsRequest");
    }
    if (op == OP_SNAPSHOT) {
        req->session = "";
        req->session_len = 0;
        *msg = leased__admin__v1__snapshot_request__unpack(NULL, len, buf);
        return *msg != NULL ? 0 : invalid(req, "malformed SnapshotRequest");
    }
    if (op == OP_REVOKE) { /* a change: the session id exactly, as bytes */
        Leased__Codec__V1__WireRevokeRequest *m =
            leased__codec__v1__wire_revoke_request__unpack(NULL, len, buf);
        if (m == NULL)
            return invalid(req, "malformed RevokeRequest");
        *msg = m;
        req->token = m->token;
        return take_string(req, "session_id", &m->session_id,
                           ENGINE_SESSION_MAX, &req->session,
                           &req->session_len);
    }
    const char *session, *token = "";
    int32_t page_size = 0;
    if (op == OP_GET) {
        Leased__Admin__V1__GetRequest *m =
            leased__admin__v1__get_request__unpack(NULL, len, buf);
        if (m == NULL)
            return invalid(req, "malformed GetRequest");
        *msg = m;
        session = m->session_id;
    } else {
        Leased__Admin__V1__ListRequest *m =
            leased__admin__v1__list_request__unpack(NULL, len, buf);
        if (m == NULL)
            return invalid(req, "malformed ListRequest");
        *msg = m;
        session = m->prefix;
        token = m->page_token;
        page_size = m->page_size;
    }
    const char *why = validate_string((const uint8_t *)session,
                                      strlen(session), ENGINE_SESSION_MAX);
    /* A prefix may be empty, a session id not. */
    if (why != NULL && !(op == OP_LIST && session[0] == '\0'))
        return invalid(req, "%s: %s",
                       op == OP_GET ? "session_id" : "prefix", why);
    if (token[0] != '\0' &&
        (why = validate_string((const uint8_t *)token, strlen(token),
                               ENGINE_SESSION_MAX)) != NULL)
        return invalid(req, "page_token: %s", why);
    if (page_size < 0)
        return invalid(req, "page_size: negative");
    req->session = session;
    req->session_len = strlen(session);
    req->page_token = token;
    req->page_token_len = strlen(token);
    req->page_size = page_size == 0      ? 100
                     : page_size > 1000 ? 1000
                                        : (size_t)page_size;
    return 0;
}

/* A WatchRequest: a session id, or else a prefix (which may be empty). */
static int decode_watch(const uint8_t *buf, size_t len, struct request *req,
                        void **msg)
{
    Leased__Codec__V1__WireWatchRequest *m =
        leased__codec__v1__wire_watch_request__unpack(NULL, len, buf);
    if (m == NULL)
        return invalid(req, "malformed WatchRequest");
    *msg = m;
    req->after_revision = m->after_revision;
    req->prefix = m->session_id.len == 0;
    if (m->session_id.len > 0 && m->prefix.len > 0)
        return invalid(req, "set session_id or prefix, not both");
    if (m->session_id.len > 0)
        return take_string(req, "session_id", &m->session_id,
                           ENGINE_SESSION_MAX, &req->session,
                           &req->session_len);
    req->session = "";
    req->session_len = 0;
    if (m->prefix.len == 0)
        return 0;
    return take_string(req, "prefix", &m->prefix, ENGINE_SESSION_MAX,
                       &req->session, &req->session_len);
}

int codec_decode(enum request_op op, const uint8_t *buf, size_t len,
                 struct request *req, void **msg)
{
    *msg = NULL;
    req->op = op;
    if (request_is_admin(op)) {
        if (decode_admin(op, buf, len, req, msg) == 0)
            return 0;
        codec_free(*msg);
        *msg = NULL;
        return -1;
    }
    if (op == OP_WATCH) {
        if (decode_watch(buf, len, req, msg) == 0)
            return 0;
        codec_free(*msg);
        *msg = NULL;
        return -1;
    }
    if (request_acquires(op)) { /* Acquire's and Wait's: the same fields */
        Leased__Codec__V1__WireAcquireRequest *m =
            leased__codec__v1__wire_acquire_request__unpack(NULL, len, buf);
        if (m == NULL)
            return invalid(req, "malformed %s",
                           op == OP_WAIT ? "WaitRequest" : "AcquireRequest");
        *msg = m;
        if (take_string(req, "session_id", &m->session_id,
                        ENGINE_SESSION_MAX, &req->session,
                        &req->session_len) != 0 ||
            take_string(req, "owner", &m->owner, ENGINE_OWNER_MAX,
                        &req->owner, &req->owner_len) != 0)
            goto fail;
        return 0;
    }

    const char *name = op == OP_RENEW ? "RenewRequest" : "ReleaseRequest";
    Leased__Codec__V1__WireLeaseRequest *m =
        leased__codec__v1__wire_lease_request__unpack(NULL, len, buf);
    if (m == NULL)
        return invalid(req, "malformed %s", name);
    *msg = m;
    if (m->lease == NULL) {
        invalid(req, "%s has no lease", name);
        goto fail;
    }
    if (take_string(req, "lease.session_id", &m->lease->session_id,
                    ENGINE_SESSION_MAX, &req->session,
                    &req->session_len) != 0 ||
        take_string(req, "lease.owner", &m->lease->owner, ENGINE_OWNER_MAX,
                    &req->owner, &req->owner_len) != 0)
        goto fail;
    req->token = m->lease->token;
    return 0;
fail:
    codec_free(*msg);
    *msg = NULL;
    return -1;
}

void codec_free(void *msg)
{
    if (msg != NULL)
        protobuf_c_message_free_unpacked(msg, NULL);
}

size_t codec_encode_reply(const struct request *req, uint8_t *buf,
                          size_t cap)
{
    if (req->op == OP_RELEASE)
        return 0; /* ReleaseResponse has no fields */
    /* A LeaseResponse, or a WaitResponse: the same fields. */
    Google__Protobuf__Timestamp expiry = GOOGLE__PROTOBUF__TIMESTAMP__INIT;
    expiry.seconds = req->grant_expiry_ns / 1000000000;
    expiry.nanos = (int32_t)(req->grant_expiry_ns % 1000000000);
    Leased__Codec__V1__WireLease lease = LEASED__CODEC__V1__WIRE_LEASE__INIT;
    lease.session_id.data = (uint8_t *)req->session;
    lease.session_id.len = req->session_len;
    lease.owner.data = (uint8_t *)req->owner;
    lease.owner.len = req->owner_len;
    lease.token = req->grant_token;
    lease.expiry = &expiry;
    Leased__Codec__V1__WireLeaseResponse resp =
        LEASED__CODEC__V1__WIRE_LEASE_RESPONSE__INIT;
    resp.lease = &lease;
    assert(leased__codec__v1__wire_lease_response__get_packed_size(&resp) <=
           cap);
    (void)cap;
    return leased__codec__v1__wire_lease_response__pack(&resp, buf);
}

uint8_t *codec_encode_watch(const struct store_event *const *evs, size_t n,
                            uint64_t revision, uint64_t compact_revision,
                            size_t *len)
{
    Leased__Codec__V1__WireEvent *ev = calloc(n + 1, sizeof(*ev));
    Leased__Codec__V1__WireEvent **evp = calloc(n + 1, sizeof(*evp));
    Leased__Codec__V1__WireLease *lease = calloc(n + 1, sizeof(*lease));
    Google__Protobuf__Timestamp *ts = calloc(n + 1, sizeof(*ts));
    uint8_t *buf = NULL;
    if (ev == NULL || evp == NULL || lease == NULL || ts == NULL)
        goto out;
    for (size_t i = 0; i < n; i++) {
        const struct lease_row *l = &evs[i]->lease;
        leased__codec__v1__wire_event__init(&ev[i]);
        leased__codec__v1__wire_lease__init(&lease[i]);
        google__protobuf__timestamp__init(&ts[i]);
        ts[i].seconds = l->expiry_ns / 1000000000;
        ts[i].nanos = (int32_t)(l->expiry_ns % 1000000000);
        lease[i].session_id.data = (uint8_t *)l->session;
        lease[i].session_id.len = l->session_len;
        lease[i].owner.data = (uint8_t *)l->owner;
        lease[i].owner.len = l->owner_len;
        lease[i].token = l->token;
        lease[i].expiry = &ts[i];
        ev[i].revision = evs[i]->revision;
        ev[i].kind = (Leased__Codec__V1__WireEvent__Kind)evs[i]->kind;
        ev[i].lease = &lease[i];
        evp[i] = &ev[i];
    }
    Leased__Codec__V1__WireWatchResponse resp =
        LEASED__CODEC__V1__WIRE_WATCH_RESPONSE__INIT;
    resp.n_events = n;
    resp.events = evp;
    resp.revision = revision;
    resp.compact_revision = compact_revision;
    *len = leased__codec__v1__wire_watch_response__get_packed_size(&resp);
    buf = malloc(*len > 0 ? *len : 1);
    if (buf != NULL)
        leased__codec__v1__wire_watch_response__pack(&resp, buf);
out:
    free(ev);
    free(evp);
    free(lease);
    free(ts);
    return buf;
}

void codec_method_path(enum request_op op, char *buf, size_t cap)
{
    static const char *const names[] = {
        [OP_ACQUIRE] = "Acquire",  [OP_RENEW] = "Renew",
        [OP_RELEASE] = "Release",  [OP_WAIT] = "Wait",
        [OP_WATCH] = "Watch",      [OP_GET] = "Get",
        [OP_LIST] = "List",        [OP_STATS] = "Stats",
        [OP_REVOKE] = "Revoke",    [OP_SNAPSHOT] = "Snapshot"};
    const ProtobufCServiceDescriptor *d =
        request_is_admin(op) ? &leased__admin__v1__admin__descriptor
        : op == OP_WAIT || op == OP_WATCH
            ? &leased__v1__leases__descriptor
            : &mecatl__driver__v1__session_lease_service__descriptor;
    const ProtobufCMethodDescriptor *m =
        protobuf_c_service_descriptor_get_method_by_name(d, names[op]);
    assert(m != NULL);
    snprintf(buf, cap, "/%s/%s", d->name, m->name);
}

int codec_decode_health(const uint8_t *buf, size_t len, char *service,
                        size_t cap)
{
    Grpc__Health__V1__HealthCheckRequest *m =
        grpc__health__v1__health_check_request__unpack(NULL, len, buf);
    if (m == NULL)
        return -1;
    /* protobuf-c ends a string at an embedded NUL; harmless here, where
     * the name only picks which status is reported. */
    size_t n = strlen(m->service);
    int rc = n < cap ? 0 : -1;
    if (rc == 0)
        memcpy(service, m->service, n + 1);
    grpc__health__v1__health_check_request__free_unpacked(m, NULL);
    return rc;
}

size_t codec_encode_health(int status, uint8_t *buf, size_t cap)
{
    Grpc__Health__V1__HealthCheckResponse resp =
        GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
    resp.status = (Grpc__Health__V1__HealthCheckResponse__ServingStatus)status;
    assert(grpc__health__v1__health_check_response__get_packed_size(&resp) <=
           cap);
    (void)cap;
    return grpc__health__v1__health_check_response__pack(&resp, buf);
}

void codec_health_path(bool watch, char *buf, size_t cap)
{
    const ProtobufCServiceDescriptor *d = &grpc__health__v1__health__descriptor;
    const ProtobufCMethodDescriptor *m =
        protobuf_c_service_descriptor_get_method_by_name(
            d, watch ? "Watch" : "Check");
    assert(m != NULL);
    snprintf(buf, cap, "/%s/%s", d->name, m->name);
}

const char *codec_lease_service_name(void)
{
    return mecatl__driver__v1__session_lease_service__descriptor.name;
}

static Leased__Admin__V1__Lease admin_lease(const struct admin_lease *l,
                                            Google__Protobuf__Timestamp *t)
{
    Leased__Admin__V1__Lease w = LEASED__ADMIN__V1__LEASE__INIT;
    w.session_id = l->session;
    w.owner = l->owner;
    w.token = l->token;
    t->seconds = l->expiry_ns / 1000000000;
    t->nanos = (int32_t)(l->expiry_ns % 1000000000);
    w.expiry = t;
    w.live = l->live;
    return w;
}

static uint8_t *pack(const ProtobufCMessage *m, size_t *len)
{
    *len = protobuf_c_message_get_packed_size(m);
    uint8_t *buf = malloc(*len > 0 ? *len : 1);
    if (buf != NULL)
        protobuf_c_message_pack(m, buf);
    return buf;
}

size_t codec_snapshot_header(size_t len, uint8_t *buf)
{
    size_t n = 0;
    buf[n++] = 0x0a; /* field 1 (database), length-delimited */
    do {
        buf[n++] = (uint8_t)((len & 0x7f) | (len > 0x7f ? 0x80 : 0));
        len >>= 7;
    } while (len > 0);
    return n;
}

uint8_t *codec_encode_admin(const struct request *req, size_t *len)
{
    const struct admin_result *a = req->admin;
    if (req->op == OP_STATS) {
        Leased__Admin__V1__StatsResponse r =
            LEASED__ADMIN__V1__STATS_RESPONSE__INIT;
        const struct admin_stats *st = &a->stats;
        r.live_leases = st->live_leases;
        r.lease_entries = st->lease_entries;
        r.takeovers = st->takeovers;
        r.expiries = st->expiries;
        r.reclaims = st->reclaims;
        r.uptime_seconds = st->uptime_s;
        r.storage_state = st->storage_failing ? "failing" : "ok";
        r.token_high_water_mark = st->token_high_water_mark;
        r.quarantine_remaining_ms = st->quarantine_remaining_ms;
        r.version = LEASED_VERSION;
        return pack(&r.base, len);
    }
    Google__Protobuf__Timestamp *times = calloc(a->n > 0 ? a->n : 1,
                                                sizeof(*times));
    Leased__Admin__V1__Lease *leases = calloc(a->n > 0 ? a->n : 1,
                                              sizeof(*leases));
    Leased__Admin__V1__Lease **ptrs = calloc(a->n > 0 ? a->n : 1,
                                             sizeof(*ptrs));
    uint8_t *out = NULL;
    if (times != NULL && leases != NULL && ptrs != NULL) {
        for (size_t i = 0; i < a->n; i++) {
            times[i] = (Google__Protobuf__Timestamp)
                GOOGLE__PROTOBUF__TIMESTAMP__INIT;
            leases[i] = admin_lease(&a->leases[i], &times[i]);
            ptrs[i] = &leases[i];
        }
        if (req->op == OP_GET) {
            Leased__Admin__V1__GetResponse r =
                LEASED__ADMIN__V1__GET_RESPONSE__INIT;
            r.lease = ptrs[0];
            out = pack(&r.base, len);
        } else if (req->op == OP_REVOKE) {
            Leased__Admin__V1__RevokeResponse r =
                LEASED__ADMIN__V1__REVOKE_RESPONSE__INIT;
            r.lease = ptrs[0];
            out = pack(&r.base, len);
        } else {
            Leased__Admin__V1__ListResponse r =
                LEASED__ADMIN__V1__LIST_RESPONSE__INIT;
            r.n_leases = a->n;
            r.leases = ptrs;
            r.next_page_token = a->next != NULL ? a->next : "";
            out = pack(&r.base, len);
        }
    }
    free(times);
    free(leases);
    free(ptrs);
    return out;
}
