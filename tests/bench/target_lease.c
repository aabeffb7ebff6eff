/*
 * The lease-protocol target: leased:// and null:// (leasebench-null) speak
 * mecatl.driver.v1.SessionLeaseService. Async gRPC C core: one completion
 * queue per thread, `connections` channels spread over the threads, one
 * call per slot in flight.
 */
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "grpc_conns.h"
#include "mecatl/driver/v1/session_lease.pb-c.h"

#define CALL_TIMEOUT_MS 10000


struct lease_call {
    grpc_call *call;
    grpc_metadata_array initial, trailing;
    grpc_byte_buffer *send, *recv;
    grpc_status_code status;
    grpc_slice details;
};

static const char *const paths[OP_COUNT] = {
    [OP_ACQUIRE] = "/mecatl.driver.v1.SessionLeaseService/Acquire",
    [OP_RENEW] = "/mecatl.driver.v1.SessionLeaseService/Renew",
    [OP_RELEASE] = "/mecatl.driver.v1.SessionLeaseService/Release",
};

static int lease_thread_init(struct bench_thread *t, const char *hostport)
{
    struct grpc_conns *g = calloc(1, sizeof(*g));
    if (g == NULL || grpc_conns_open(g, t, hostport) != 0) {
        free(g);
        return -1;
    }
    for (size_t i = 0; i < t->nslots; i++)
        t->slots[i].target = calloc(1, sizeof(struct lease_call));
    t->target = g;
    return 0;
}

static grpc_byte_buffer *encode(const struct slot *s)
{
    const char *session = s->thread->run->names[s->sessions[s->cur]];
    const struct held *h = &s->held[s->cur];
    uint8_t buf[1024];
    size_t n;
    if (s->op == OP_ACQUIRE) {
        Mecatl__Driver__V1__AcquireRequest r =
            MECATL__DRIVER__V1__ACQUIRE_REQUEST__INIT;
        r.session_id = (char *)session;
        r.owner = (char *)s->owner;
        n = mecatl__driver__v1__acquire_request__pack(&r, buf);
    } else {
        Mecatl__Driver__V1__Lease l = MECATL__DRIVER__V1__LEASE__INIT;
        l.session_id = (char *)session;
        l.owner = (char *)s->owner;
        l.token = h->token;
        /* Renew and Release share the shape {Lease lease = 1}. */
        Mecatl__Driver__V1__RenewRequest r =
            MECATL__DRIVER__V1__RENEW_REQUEST__INIT;
        r.lease = &l;
        n = mecatl__driver__v1__renew_request__pack(&r, buf);
    }
    grpc_slice slice = grpc_slice_from_copied_buffer((const char *)buf, n);
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&slice, 1);
    grpc_slice_unref(slice);
    return bb;
}

static void lease_start(struct slot *s)
{
    struct grpc_conns *g = s->thread->target;
    struct lease_call *c = s->target;
    grpc_channel *ch = grpc_conns_channel(g, s);
    gpr_timespec deadline =
        gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                     gpr_time_from_millis(CALL_TIMEOUT_MS, GPR_TIMESPAN));
    c->call = grpc_channel_create_call(
        ch, NULL, GRPC_PROPAGATE_DEFAULTS, g->cq,
        grpc_slice_from_static_string(paths[s->op]), NULL, deadline, NULL);
    grpc_metadata_array_init(&c->initial);
    grpc_metadata_array_init(&c->trailing);
    c->send = encode(s);
    c->recv = NULL;
    c->details = grpc_empty_slice();
    grpc_op ops[6];
    memset(ops, 0, sizeof(ops));
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = c->send;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &c->initial;
    ops[4].op = GRPC_OP_RECV_MESSAGE;
    ops[4].data.recv_message.recv_message = &c->recv;
    ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[5].data.recv_status_on_client.trailing_metadata = &c->trailing;
    ops[5].data.recv_status_on_client.status = &c->status;
    ops[5].data.recv_status_on_client.status_details = &c->details;
    if (grpc_call_start_batch(c->call, ops, 6, s, NULL) != GRPC_CALL_OK) {
        fprintf(stderr, "leasebench: cannot start a call\n");
        abort();
    }
}

/* The call of slot s completed: read it, free it, report it. */
static void finish(struct slot *s)
{
    struct lease_call *c = s->target;
    enum bench_result result = RESULT_ERROR;
    uint64_t token = 0;
    if (c->status == GRPC_STATUS_OK) {
        result = RESULT_OK;
        if (s->op != OP_RELEASE && c->recv != NULL) {
            grpc_byte_buffer_reader r;
            grpc_byte_buffer_reader_init(&r, c->recv);
            grpc_slice all = grpc_byte_buffer_reader_readall(&r);
            grpc_byte_buffer_reader_destroy(&r);
            Mecatl__Driver__V1__LeaseResponse *resp =
                mecatl__driver__v1__lease_response__unpack(
                    NULL, GRPC_SLICE_LENGTH(all), GRPC_SLICE_START_PTR(all));
            grpc_slice_unref(all);
            if (resp != NULL && resp->lease != NULL)
                token = resp->lease->token;
            else
                result = RESULT_ERROR;
            mecatl__driver__v1__lease_response__free_unpacked(resp, NULL);
        }
    } else if (c->status == GRPC_STATUS_FAILED_PRECONDITION) {
        result = RESULT_HELD;
    }
    /* An OK call whose reply does not decode is the server's fault. */
    int status = result == RESULT_ERROR && c->status == GRPC_STATUS_OK
                     ? (int)GRPC_STATUS_INTERNAL
                     : (int)c->status;
    grpc_metadata_array_destroy(&c->initial);
    grpc_metadata_array_destroy(&c->trailing);
    grpc_byte_buffer_destroy(c->send);
    grpc_byte_buffer_destroy(c->recv);
    grpc_slice_unref(c->details);
    grpc_call_unref(c->call);
    c->call = NULL;
    bench_done(s, result, status, token, 0);
}

static void lease_run(struct bench_thread *t)
{
    struct grpc_conns *g = t->target;
    while (!bench_thread_finished(t)) {
        grpc_event ev = grpc_completion_queue_next(
            g->cq, gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                                 gpr_time_from_millis(50, GPR_TIMESPAN)),
            NULL);
        if (ev.type == GRPC_OP_COMPLETE)
            finish(ev.tag);
        else
            bench_tick(t); /* quiet: start slots that were idle */
    }
}

static void lease_thread_close(struct bench_thread *t)
{
    struct grpc_conns *g = t->target;
    grpc_conns_close(g);
    for (size_t i = 0; i < t->nslots; i++)
        free(t->slots[i].target);
    free(g);
}

const struct bench_target_ops bench_target_leased = {
    "leased", lease_thread_init, lease_start, lease_run, lease_thread_close};
const struct bench_target_ops bench_target_null = {
    "null", lease_thread_init, lease_start, lease_run, lease_thread_close};
