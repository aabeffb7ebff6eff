/*
 * The gRPC driver (see lease.h, lease_grpc_open): the three lease calls as
 * unary calls of mecatl.driver.v1.SessionLeaseService, with gRPC C core
 * and protobuf-c. Each call has its own completion queue, so one client
 * serves any number of threads at once. Plaintext, or TLS with an
 * optional client certificate; an optional bearer token; several targets
 * with failover on UNAVAILABLE.
 */
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/time.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "addr.h"
#include "client.h"
#include "lease.h"
#include "mecatl/driver/v1/session_lease.pb-c.h"
#include "unary.h"

#define DEFAULT_TIMEOUT_MS 5000
#define MAX_TARGETS 8
#define PEM_MAX (1024 * 1024)

enum method { M_ACQUIRE, M_RENEW, M_RELEASE, M_COUNT };

struct driver {
    grpc_channel *channels[MAX_TARGETS];
    size_t ntargets;
    atomic_size_t current; /* the target that answered last */
    int64_t timeout_ms;
    grpc_metadata auth; /* authorization: Bearer …, when has_token */
    bool has_token;
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
    default:
        return LEASE_EUNAVAILABLE;
    }
}

/* One unary call: sends req, and on OK unpacks the reply with desc into
 * *resp (free with protobuf_c_message_free_unpacked). */
static int call(struct driver *d, enum method m, const ProtobufCMessage *req,
                const ProtobufCMessageDescriptor *desc,
                ProtobufCMessage **resp, char *errmsg, size_t len)
{
    gpr_timespec deadline =
        gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                     gpr_time_from_millis(d->timeout_ms, GPR_TIMESPAN));
    char details[256];
    size_t first = atomic_load(&d->current);
    grpc_status_code status = GRPC_STATUS_UNAVAILABLE;
    /* On UNAVAILABLE, the next target, each at most once. */
    for (size_t k = 0; k < d->ntargets; k++) {
        size_t t = (first + k) % d->ntargets;
        status = unary_call(d->channels[t], d->paths[m],
                            d->has_token ? &d->auth : NULL, d->has_token,
                            req, desc, deadline, resp, details,
                            sizeof(details));
        if (status != GRPC_STATUS_UNAVAILABLE) {
            if (t != first)
                atomic_store(&d->current, t);
            break;
        }
    }
    int err = status_error(status);
    if (err != LEASE_OK)
        snprintf(errmsg, len, "%s (gRPC status %d)",
                 details[0] != '\0' ? details : lease_strerror(err),
                 (int)status);
    return err;
}

/* Copies the lease of a LeaseResponse into *out. */
static int take_lease(ProtobufCMessage *resp, struct lease *out,
                      char *errmsg, size_t len)
{
    Mecatl__Driver__V1__LeaseResponse *r =
        (Mecatl__Driver__V1__LeaseResponse *)resp;
    const Mecatl__Driver__V1__Lease *l = r->lease;
    int err = LEASE_EUNAVAILABLE;
    if (l == NULL || l->expiry == NULL)
        snprintf(errmsg, len, "reply without a lease");
    else if (client_fill(out, l->session_id, strlen(l->session_id), l->owner,
                         strlen(l->owner), l->token,
                         l->expiry->seconds * 1000000000 +
                             l->expiry->nanos) != LEASE_OK)
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

static int drv_acquire(void *impl, const char *session_id, const char *owner,
                       struct lease *out, char *errmsg, size_t len)
{
    Mecatl__Driver__V1__AcquireRequest req =
        MECATL__DRIVER__V1__ACQUIRE_REQUEST__INIT;
    req.session_id = (char *)session_id;
    req.owner = (char *)owner;
    ProtobufCMessage *resp;
    int err = call(impl, M_ACQUIRE, &req.base,
                   &mecatl__driver__v1__lease_response__descriptor, &resp,
                   errmsg, len);
    return err == LEASE_OK ? take_lease(resp, out, errmsg, len) : err;
}

static int drv_renew(void *impl, const struct lease *cur, struct lease *out,
                     char *errmsg, size_t len)
{
    Mecatl__Driver__V1__Lease lease;
    Google__Protobuf__Timestamp ts;
    wire_lease(cur, &lease, &ts);
    Mecatl__Driver__V1__RenewRequest req =
        MECATL__DRIVER__V1__RENEW_REQUEST__INIT;
    req.lease = &lease;
    ProtobufCMessage *resp;
    int err = call(impl, M_RENEW, &req.base,
                   &mecatl__driver__v1__lease_response__descriptor, &resp,
                   errmsg, len);
    return err == LEASE_OK ? take_lease(resp, out, errmsg, len) : err;
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
    int err = call(impl, M_RELEASE, &req.base,
                   &mecatl__driver__v1__release_response__descriptor, &resp,
                   errmsg, len);
    if (err == LEASE_OK)
        protobuf_c_message_free_unpacked(resp, NULL);
    return err;
}

static void drv_destroy(void *impl)
{
    struct driver *d = impl;
    for (size_t t = 0; t < d->ntargets; t++)
        grpc_channel_destroy(d->channels[t]);
    if (d->has_token) {
        grpc_slice_unref(d->auth.key);
        grpc_slice_unref(d->auth.value);
    }
    free(d);
    grpc_shutdown();
}

static const struct lease_backend grpc_backend = {
    .acquire = drv_acquire,
    .renew = drv_renew,
    .release = drv_release,
    .destroy = drv_destroy,
};

static char *read_pem(const char *path)
{
    FILE *f = fopen(path, "re");
    if (f == NULL)
        return NULL;
    char *buf = malloc(PEM_MAX + 1);
    size_t n = buf != NULL ? fread(buf, 1, PEM_MAX, f) : 0;
    bool bad = ferror(f) || n == 0;
    fclose(f);
    if (buf == NULL || bad) {
        free(buf);
        return NULL;
    }
    buf[n] = '\0';
    return buf;
}

/* The channel credentials opts ask for; NULL with the reason set. */
static grpc_channel_credentials *credentials(
    const struct lease_grpc_options *o)
{
    if (o == NULL || o->tls_ca_file == NULL) {
        if (o != NULL && (o->tls_cert_file || o->tls_key_file))
            client_fail(LEASE_EINVAL, "a client certificate needs "
                                      "tls_ca_file (TLS)");
        else
            return grpc_insecure_credentials_create();
        return NULL;
    }
    if ((o->tls_cert_file == NULL) != (o->tls_key_file == NULL)) {
        client_fail(LEASE_EINVAL, "tls_cert_file and tls_key_file go "
                                  "together");
        return NULL;
    }
    const char *files[3] = {o->tls_ca_file, o->tls_cert_file,
                            o->tls_key_file};
    char *pem[3] = {NULL, NULL, NULL};
    grpc_channel_credentials *creds = NULL;
    size_t i;
    for (i = 0; i < 3; i++) {
        if (files[i] != NULL && (pem[i] = read_pem(files[i])) == NULL)
            break;
    }
    if (i < 3) {
        client_fail(LEASE_EINVAL, "cannot read %s", files[i]);
    } else {
        grpc_ssl_pem_key_cert_pair pair = {pem[2], pem[1]};
        creds = grpc_ssl_credentials_create_ex(
            pem[0], pem[1] != NULL ? &pair : NULL, NULL, NULL);
        if (creds == NULL)
            client_fail(LEASE_EINVAL, "bad TLS files");
    }
    if (pem[2] != NULL)
        explicit_bzero(pem[2], strlen(pem[2]));
    for (i = 0; i < 3; i++)
        free(pem[i]);
    return creds;
}

static bool token_ok(const char *t)
{
    size_t n = strlen(t);
    if (n == 0 || n > 4096)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = t[i];
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
              (c >= '0' && c <= '9') || strchr("-._~+/=", c) != NULL))
            return false;
    }
    return true;
}

/* Splits target at commas into d->channels, each checked against the
 * plaintext rule unless TLS. Returns LEASE_OK or a failure (reason set). */
static int open_targets(struct driver *d, const char *target,
                        const struct lease_grpc_options *o,
                        grpc_channel_credentials *creds)
{
    bool tls = o != NULL && o->tls_ca_file != NULL;
    grpc_arg arg = {.type = GRPC_ARG_STRING,
                    .key = GRPC_SSL_TARGET_NAME_OVERRIDE_ARG};
    grpc_channel_args args = {0, &arg};
    if (tls && o->tls_server_name != NULL) {
        arg.value.string = (char *)o->tls_server_name;
        args.num_args = 1;
    }
    const char *p = target;
    for (;;) {
        size_t n = strcspn(p, ",");
        char one[512], why[200];
        if (n == 0 || n >= sizeof(one))
            return client_fail(LEASE_EINVAL, "target %s: an empty or "
                                             "too long address", target);
        if (d->ntargets == MAX_TARGETS)
            return client_fail(LEASE_EINVAL, "target %s: more than %d "
                                             "addresses", target, MAX_TARGETS);
        memcpy(one, p, n);
        one[n] = '\0';
        bool plaintext_ok;
        if (addr_check(one, &plaintext_ok, why, sizeof(why)) != 0)
            return client_fail(LEASE_EINVAL, "target %s: %s", one, why);
        if (!plaintext_ok && !tls)
            return client_fail(LEASE_EINVAL,
                               "target %s: not a loopback address: "
                               "plaintext is allowed only on loopback or a "
                               "unix socket (give tls_ca_file for TLS)",
                               one);
        d->channels[d->ntargets++] = grpc_channel_create(one, creds, &args);
        if (p[n] == '\0')
            return LEASE_OK;
        p += n + 1;
    }
}

int lease_grpc_open(const char *target, const struct lease_grpc_options *opts,
                    struct lease_client **out)
{
    *out = NULL;
    if (target == NULL)
        return client_fail(LEASE_EINVAL, "target is NULL");
    if (opts != NULL && opts->token != NULL && !token_ok(opts->token))
        return client_fail(LEASE_EINVAL, "token: 1..4096 characters of "
                                         "A-Z a-z 0-9 -._~+/=");
    struct driver *d = calloc(1, sizeof(*d));
    if (d == NULL)
        return client_fail(LEASE_ENOMEM, "out of memory");
    d->timeout_ms = opts != NULL && opts->timeout_ms > 0 ? opts->timeout_ms
                                                         : DEFAULT_TIMEOUT_MS;
    const ProtobufCServiceDescriptor *svc =
        &mecatl__driver__v1__session_lease_service__descriptor;
    static const char *const names[M_COUNT] = {"Acquire", "Renew", "Release"};
    for (int m = 0; m < M_COUNT; m++)
        snprintf(d->paths[m], sizeof(d->paths[m]), "/%s/%s", svc->name,
                 names[m]);
    grpc_init();
    if (opts != NULL && opts->token != NULL) {
        char value[4200];
        snprintf(value, sizeof(value), "Bearer %s", opts->token);
        d->auth.key = grpc_slice_from_static_string("authorization");
        d->auth.value = grpc_slice_from_copied_string(value);
        explicit_bzero(value, sizeof(value));
        d->has_token = true;
    }
    grpc_channel_credentials *creds = credentials(opts);
    int err = creds != NULL ? open_targets(d, target, opts, creds)
                            : LEASE_EINVAL;
    if (creds != NULL)
        grpc_channel_credentials_release(creds);
    if (err != LEASE_OK) {
        char keep[512];
        snprintf(keep, sizeof(keep), "%s", lease_errmsg());
        drv_destroy(d);
        return client_fail(err, "%s", keep);
    }
    if ((*out = lease_client_create(&grpc_backend, d)) == NULL) {
        drv_destroy(d);
        return client_fail(LEASE_ENOMEM, "out of memory");
    }
    return LEASE_OK;
}
