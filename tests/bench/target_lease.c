/*
 * The lease-protocol target: leased:// and null:// (leasebench-null) speak
 * mecatl.driver.v1.SessionLeaseService. Async gRPC C core: one completion
 * queue per thread, `connections` channels spread over the threads, one
 * call per slot in flight.
 */
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "grpc_common.h"
#include "mecatl/driver/v1/session_lease.pb-c.h"


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
        t->slots[i].target = calloc(1, sizeof(struct grpc_unary));
    t->target = g;
    return 0;
}

static grpc_byte_buffer *encode(const struct slot *s)
{
    const char *session = s->thread->run->names[s->sessions[s->cur]];
    if (s->op == OP_ACQUIRE) {
        Mecatl__Driver__V1__AcquireRequest r =
            MECATL__DRIVER__V1__ACQUIRE_REQUEST__INIT;
        r.session_id = (char *)session;
        r.owner = (char *)s->owner;
        return grpc_pack(&r.base);
    }
    Mecatl__Driver__V1__Lease l = MECATL__DRIVER__V1__LEASE__INIT;
    l.session_id = (char *)session;
    l.owner = (char *)s->owner;
    l.token = s->held[s->cur].token;
    /* Renew and Release share the shape {Lease lease = 1}. */
    Mecatl__Driver__V1__RenewRequest r = MECATL__DRIVER__V1__RENEW_REQUEST__INIT;
    r.lease = &l;
    return grpc_pack(&r.base);
}

static void lease_start(struct slot *s)
{
    struct grpc_conns *g = s->thread->target;
    grpc_unary_start(s->target, grpc_conns_channel(g, s), g->cq,
                     paths[s->op], encode(s), s);
}

/* The call of slot s completed: read it, free it, report it. */
static void finish(struct slot *s)
{
    struct grpc_unary *c = s->target;
    enum bench_result result = RESULT_ERROR;
    uint64_t token = 0;
    int status = (int)c->status;
    if (c->status == GRPC_STATUS_OK) {
        result = RESULT_OK;
        if (s->op != OP_RELEASE) {
            Mecatl__Driver__V1__LeaseResponse *resp =
                (Mecatl__Driver__V1__LeaseResponse *)grpc_unpack(
                    &mecatl__driver__v1__lease_response__descriptor, c->recv);
            if (resp != NULL && resp->lease != NULL) {
                token = resp->lease->token;
            } else { /* an OK reply that does not decode */
                result = RESULT_ERROR;
                status = GRPC_STATUS_INTERNAL;
            }
            if (resp != NULL)
                mecatl__driver__v1__lease_response__free_unpacked(resp, NULL);
        }
    } else if (c->status == GRPC_STATUS_FAILED_PRECONDITION) {
        result = RESULT_HELD;
    }
    grpc_unary_end(c);
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
