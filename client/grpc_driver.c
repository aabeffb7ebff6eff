/*
 * The gRPC driver (see lease.h, lease_grpc_open): the three lease calls as
 * unary calls of mecatl.driver.v1.SessionLeaseService, with gRPC C core
 * and protobuf-c. Each call has its own completion queue, so one client
 * serves any number of threads at once.
 */
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>
#include <stdlib.h>
#include <string.h>

#include "addr.h"
#include "client.h"
#include "lease.h"
#include "mecatl/driver/v1/session_lease.pb-c.h"

#define DEFAULT_TIMEOUT_MS 5000

enum method { M_ACQUIRE, M_RENEW, M_RELEASE, M_COUNT };

struct driver {
    grpc_channel *channel;
    int64_t timeout_ms;
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
    *resp = NULL;
    size_t n = protobuf_c_message_get_packed_size(req);
    grpc_slice body = grpc_slice_malloc(n);
    protobuf_c_message_pack(req, GRPC_SLICE_START_PTR(body));
    grpc_byte_buffer *send = grpc_raw_byte_buffer_create(&body, 1);
    grpc_slice_unref(body);

    grpc_completion_queue *cq = grpc_completion_queue_create_for_pluck(NULL);
    gpr_timespec deadline =
        gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                     gpr_time_from_millis(d->timeout_ms, GPR_TIMESPAN));
    grpc_slice method = grpc_slice_from_static_string(d->paths[m]);
    grpc_call *c = grpc_channel_create_call(d->channel, NULL,
                                            GRPC_PROPAGATE_DEFAULTS, cq,
                                            method, NULL, deadline, NULL);
    grpc_metadata_array initial, trailing;
    grpc_metadata_array_init(&initial);
    grpc_metadata_array_init(&trailing);
    grpc_byte_buffer *recv = NULL;
    grpc_status_code status = GRPC_STATUS_UNKNOWN;
    grpc_slice details = grpc_empty_slice();

    grpc_op ops[6];
    memset(ops, 0, sizeof(ops));
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = send;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &initial;
    ops[4].op = GRPC_OP_RECV_MESSAGE;
    ops[4].data.recv_message.recv_message = &recv;
    ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[5].data.recv_status_on_client.trailing_metadata = &trailing;
    ops[5].data.recv_status_on_client.status = &status;
    ops[5].data.recv_status_on_client.status_details = &details;

    int err;
    if (grpc_call_start_batch(c, ops, 6, c, NULL) != GRPC_CALL_OK) {
        snprintf(errmsg, len, "cannot start the call");
        err = LEASE_EUNAVAILABLE;
    } else {
        grpc_completion_queue_pluck(cq, c, gpr_inf_future(GPR_CLOCK_REALTIME),
                                    NULL);
        err = status_error(status);
        if (err != LEASE_OK) {
            char *text = grpc_slice_to_c_string(details);
            snprintf(errmsg, len, "%s (gRPC status %d)",
                     text[0] != '\0' ? text : lease_strerror(err),
                     (int)status);
            gpr_free(text);
        } else if (recv == NULL) {
            snprintf(errmsg, len, "no reply message");
            err = LEASE_EUNAVAILABLE;
        } else {
            grpc_byte_buffer_reader reader;
            grpc_byte_buffer_reader_init(&reader, recv);
            grpc_slice all = grpc_byte_buffer_reader_readall(&reader);
            grpc_byte_buffer_reader_destroy(&reader);
            *resp = protobuf_c_message_unpack(desc, NULL,
                                              GRPC_SLICE_LENGTH(all),
                                              GRPC_SLICE_START_PTR(all));
            grpc_slice_unref(all);
            if (*resp == NULL) {
                snprintf(errmsg, len, "malformed reply");
                err = LEASE_EUNAVAILABLE;
            }
        }
    }
    grpc_slice_unref(details);
    grpc_metadata_array_destroy(&initial);
    grpc_metadata_array_destroy(&trailing);
    grpc_byte_buffer_destroy(send);
    grpc_byte_buffer_destroy(recv);
    grpc_call_unref(c);
    grpc_completion_queue_shutdown(cq);
    while (grpc_completion_queue_pluck(cq, NULL,
                                       gpr_inf_future(GPR_CLOCK_REALTIME),
                                       NULL)
               .type != GRPC_QUEUE_SHUTDOWN)
        ;
    grpc_completion_queue_destroy(cq);
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
    grpc_channel_destroy(d->channel);
    free(d);
    grpc_shutdown();
}

static const struct lease_backend grpc_backend = {
    .acquire = drv_acquire,
    .renew = drv_renew,
    .release = drv_release,
    .destroy = drv_destroy,
};

int lease_grpc_open(const char *target, const struct lease_grpc_options *opts,
                    struct lease_client **out)
{
    *out = NULL;
    char why[200];
    if (target == NULL)
        return client_fail(LEASE_EINVAL, "target is NULL");
    if (addr_check_plaintext(target, why, sizeof(why)) != 0)
        return client_fail(LEASE_EINVAL, "target %s: %s", target, why);
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
    grpc_channel_credentials *creds = grpc_insecure_credentials_create();
    d->channel = grpc_channel_create(target, creds, NULL);
    grpc_channel_credentials_release(creds);
    if ((*out = lease_client_create(&grpc_backend, d)) == NULL) {
        drv_destroy(d);
        return client_fail(LEASE_ENOMEM, "out of memory");
    }
    return LEASE_OK;
}
