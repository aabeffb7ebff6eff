/*
 * The etcd target: etcd:// speaks etcd v3's gRPC API (etcdserverpb, the
 * subset in proto/etcd). Async gRPC C core like target_lease.c: one
 * completion queue per thread, `connections` channels spread over the
 * threads, one operation per slot in flight.
 *
 * A session is the key "/leasebench/<session name>", its value the owner,
 * attached to an etcd lease of the run's TTL (rounded up to seconds). What
 * each operation measures, start to end:
 *
 *   acquire  LeaseGrant(TTL), then
 *            Txn(If create_revision(key) == 0
 *                Then Put(key, owner, lease = the granted ID));
 *            when the Txn does not succeed (the key is held), also
 *            LeaseRevoke of the granted lease, and the result is HELD.
 *            Token: the Txn's revision (the key's create_revision).
 *   renew    one LeaseKeepAliveRequest{ID} on the slot's LeaseKeepAlive
 *            stream (a bidirectional stream opened on the slot's first
 *            renew and kept), and its LeaseKeepAliveResponse: TTL > 0 is
 *            OK, TTL <= 0 (no such lease) is HELD.
 *   release  Txn(If value(key) == owner Then Delete(key)), then
 *            LeaseRevoke of the slot's lease (NOT_FOUND tolerated); the
 *            Txn not succeeding is HELD.
 *
 * Errors count by gRPC status; STATUS_CONNECT when a stream ended without
 * one, INTERNAL for a reply that does not decode.
 */
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "grpc_common.h"
#include "etcd/etcdserverpb/rpc.pb-c.h"

#define CALL_TIMEOUT_MS 10000
#define KEY_PREFIX "/leasebench/"

static const char PATH_TXN[] = "/etcdserverpb.KV/Txn";
static const char PATH_GRANT[] = "/etcdserverpb.Lease/LeaseGrant";
static const char PATH_REVOKE[] = "/etcdserverpb.Lease/LeaseRevoke";
static const char PATH_KEEPALIVE[] = "/etcdserverpb.Lease/LeaseKeepAlive";

struct etcd_thread {
    struct grpc_conns conns;
    int64_t last_check_ns;
    int errors_logged;
};

/* What a completion-queue event is about. */
enum tag_kind { TAG_UNARY, TAG_RENEW, TAG_STATUS };
struct tag {
    enum tag_kind kind;
    struct slot *s;
};

/* The step of an acquire or release the slot's unary call carries out. */
enum step { STEP_GRANT, STEP_PUT_TXN, STEP_REVOKE_UNHELD, STEP_DELETE_TXN,
            STEP_REVOKE };

static const char *const step_names[] = {
    [STEP_GRANT] = "LeaseGrant", [STEP_PUT_TXN] = "Txn (put)",
    [STEP_REVOKE_UNHELD] = "LeaseRevoke", [STEP_DELETE_TXN] = "Txn (delete)",
    [STEP_REVOKE] = "LeaseRevoke"};

/* The slot's LeaseKeepAlive stream: one request and one response per
 * renew, one renew at a time. */
struct keepalive {
    grpc_call *call; /* NULL: no stream open */
    bool sent_initial, asked_initial;
    bool in_flight;   /* a renew's batch is pending */
    int64_t since_ns; /* when that batch started */
    bool failed;      /* that batch failed; waiting for the status */
    bool ended;       /* the stream's status arrived */
    grpc_metadata_array initial, trailing;
    grpc_byte_buffer *send, *recv;
    grpc_status_code status;
    grpc_slice details;
};

struct etcd_slot {
    struct tag unary_tag, renew_tag, status_tag;
    struct grpc_unary u;
    struct keepalive ka;
    enum step step;
    char key[96];
    size_t keylen;
    int64_t lease;            /* the lease of the operation in progress */
    enum bench_result result; /* release: the Txn's outcome */
};

static grpc_channel *channel_of(const struct slot *s)
{
    struct etcd_thread *et = s->thread->target;
    return grpc_conns_channel(&et->conns, s);
}

static int etcd_thread_init(struct bench_thread *t, const char *hostport)
{
    struct etcd_thread *et = calloc(1, sizeof(*et));
    if (et == NULL || grpc_conns_open(&et->conns, t, hostport) != 0) {
        free(et);
        return -1;
    }
    for (size_t i = 0; i < t->nslots; i++) {
        struct slot *s = &t->slots[i];
        struct etcd_slot *es = calloc(1, sizeof(*es));
        if (es == NULL)
            return -1;
        es->unary_tag = (struct tag){TAG_UNARY, s};
        es->renew_tag = (struct tag){TAG_RENEW, s};
        es->status_tag = (struct tag){TAG_STATUS, s};
        s->target = es;
    }
    t->target = et;
    return 0;
}

/* Packs message m (a protobuf-c message) into a new byte buffer. */
static void log_error(struct slot *s, const char *what, int status,
                      grpc_slice details)
{
    struct etcd_thread *et = s->thread->target;
    if (et->errors_logged >= 3)
        return;
    et->errors_logged++;
    fprintf(stderr, "leasebench: etcd %s: status %d: %.*s\n", what, status,
            (int)GRPC_SLICE_LENGTH(details),
            (const char *)GRPC_SLICE_START_PTR(details));
}

static void unary_start(struct slot *s, const char *path,
                        const ProtobufCMessage *request)
{
    struct etcd_thread *et = s->thread->target;
    struct etcd_slot *es = s->target;
    grpc_unary_start(&es->u, channel_of(s), et->conns.cq, path,
                     grpc_pack(request), &es->unary_tag);
}

static void send_grant(struct slot *s)
{
    Etcdserverpb__LeaseGrantRequest r = ETCDSERVERPB__LEASE_GRANT_REQUEST__INIT;
    int64_t ttl_ms = s->thread->run->ttl_ms;
    r.ttl = ttl_ms > 0 ? (ttl_ms + 999) / 1000 : 1;
    unary_start(s, PATH_GRANT, &r.base);
}

static void send_revoke(struct slot *s)
{
    struct etcd_slot *es = s->target;
    Etcdserverpb__LeaseRevokeRequest r =
        ETCDSERVERPB__LEASE_REVOKE_REQUEST__INIT;
    r.id = es->lease;
    unary_start(s, PATH_REVOKE, &r.base);
}

/* Txn(If cmp Then op), on the slot's unary call. */
static void send_txn(struct slot *s, Etcdserverpb__Compare *cmp,
                     Etcdserverpb__RequestOp *op)
{
    Etcdserverpb__TxnRequest r = ETCDSERVERPB__TXN_REQUEST__INIT;
    r.n_compare = 1;
    r.compare = &cmp;
    r.n_success = 1;
    r.success = &op;
    unary_start(s, PATH_TXN, &r.base);
}

/* Acquire: If create_revision(key) == 0 Then Put(key, owner, lease). */
static void send_put_txn(struct slot *s)
{
    struct etcd_slot *es = s->target;
    ProtobufCBinaryData key = {es->keylen, (uint8_t *)es->key};
    Etcdserverpb__Compare cmp = ETCDSERVERPB__COMPARE__INIT;
    cmp.result = ETCDSERVERPB__COMPARE__COMPARE_RESULT__EQUAL;
    cmp.target = ETCDSERVERPB__COMPARE__COMPARE_TARGET__CREATE;
    cmp.key = key;
    cmp.target_union_case = ETCDSERVERPB__COMPARE__TARGET_UNION_CREATE_REVISION;
    cmp.create_revision = 0;
    Etcdserverpb__PutRequest put = ETCDSERVERPB__PUT_REQUEST__INIT;
    put.key = key;
    put.value = (ProtobufCBinaryData){strlen(s->owner), (uint8_t *)s->owner};
    put.lease = es->lease;
    Etcdserverpb__RequestOp op = ETCDSERVERPB__REQUEST_OP__INIT;
    op.request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_PUT;
    op.request_put = &put;
    send_txn(s, &cmp, &op);
}

/* Release: If value(key) == owner Then Delete(key). */
static void send_delete_txn(struct slot *s)
{
    struct etcd_slot *es = s->target;
    ProtobufCBinaryData key = {es->keylen, (uint8_t *)es->key};
    Etcdserverpb__Compare cmp = ETCDSERVERPB__COMPARE__INIT;
    cmp.result = ETCDSERVERPB__COMPARE__COMPARE_RESULT__EQUAL;
    cmp.target = ETCDSERVERPB__COMPARE__COMPARE_TARGET__VALUE;
    cmp.key = key;
    cmp.target_union_case = ETCDSERVERPB__COMPARE__TARGET_UNION_VALUE;
    cmp.value = (ProtobufCBinaryData){strlen(s->owner), (uint8_t *)s->owner};
    Etcdserverpb__DeleteRangeRequest del =
        ETCDSERVERPB__DELETE_RANGE_REQUEST__INIT;
    del.key = key;
    Etcdserverpb__RequestOp op = ETCDSERVERPB__REQUEST_OP__INIT;
    op.request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_DELETE_RANGE;
    op.request_delete_range = &del;
    send_txn(s, &cmp, &op);
}

static void stream_close(struct keepalive *ka)
{
    grpc_call_unref(ka->call);
    ka->call = NULL;
    grpc_metadata_array_destroy(&ka->initial);
    grpc_metadata_array_destroy(&ka->trailing);
    grpc_slice_unref(ka->details);
}

/* Opens the slot's LeaseKeepAlive stream; its status is asked for at
 * once, and arrives when the stream ends. */
static void stream_open(struct slot *s)
{
    struct etcd_thread *et = s->thread->target;
    struct etcd_slot *es = s->target;
    struct keepalive *ka = &es->ka;
    ka->call = grpc_channel_create_call(
        channel_of(s), NULL, GRPC_PROPAGATE_DEFAULTS, et->conns.cq,
        grpc_slice_from_static_string(PATH_KEEPALIVE), NULL,
        gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    grpc_metadata_array_init(&ka->initial);
    grpc_metadata_array_init(&ka->trailing);
    ka->details = grpc_empty_slice();
    ka->sent_initial = ka->asked_initial = false;
    ka->in_flight = ka->failed = ka->ended = false;
    grpc_op op;
    memset(&op, 0, sizeof(op));
    op.op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    op.data.recv_status_on_client.trailing_metadata = &ka->trailing;
    op.data.recv_status_on_client.status = &ka->status;
    op.data.recv_status_on_client.status_details = &ka->details;
    if (grpc_call_start_batch(ka->call, &op, 1, &es->status_tag, NULL) !=
        GRPC_CALL_OK) {
        fprintf(stderr, "leasebench: cannot start a stream\n");
        abort();
    }
}

static void send_keepalive(struct slot *s)
{
    struct etcd_slot *es = s->target;
    struct keepalive *ka = &es->ka;
    if (ka->call == NULL)
        stream_open(s);
    Etcdserverpb__LeaseKeepAliveRequest r =
        ETCDSERVERPB__LEASE_KEEP_ALIVE_REQUEST__INIT;
    r.id = es->lease;
    ka->send = grpc_pack(&r.base);
    ka->recv = NULL;
    grpc_op ops[4];
    size_t n = 0;
    memset(ops, 0, sizeof(ops));
    if (!ka->sent_initial) {
        ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
        ka->sent_initial = true;
    }
    if (!ka->asked_initial) {
        ops[n].op = GRPC_OP_RECV_INITIAL_METADATA;
        ops[n++].data.recv_initial_metadata.recv_initial_metadata =
            &ka->initial;
        ka->asked_initial = true;
    }
    ops[n].op = GRPC_OP_SEND_MESSAGE;
    ops[n++].data.send_message.send_message = ka->send;
    ops[n].op = GRPC_OP_RECV_MESSAGE;
    ops[n++].data.recv_message.recv_message = &ka->recv;
    ka->in_flight = true;
    ka->since_ns = bench_now_ns();
    if (grpc_call_start_batch(ka->call, ops, n, &es->renew_tag, NULL) !=
        GRPC_CALL_OK) {
        fprintf(stderr, "leasebench: cannot send on a stream\n");
        abort();
    }
}

static void etcd_start(struct slot *s)
{
    struct etcd_slot *es = s->target;
    const char *name = s->thread->run->names[s->sessions[s->cur]];
    int n = snprintf(es->key, sizeof(es->key), KEY_PREFIX "%s", name);
    es->keylen = n < (int)sizeof(es->key) ? (size_t)n : sizeof(es->key) - 1;
    switch (s->op) {
    case OP_ACQUIRE:
        es->step = STEP_GRANT;
        send_grant(s);
        break;
    case OP_RENEW:
        es->lease = s->held[s->cur].lease_id;
        send_keepalive(s);
        break;
    case OP_RELEASE:
    case OP_COUNT:
        es->lease = s->held[s->cur].lease_id;
        es->step = STEP_DELETE_TXN;
        send_delete_txn(s);
        break;
    }
}

/* The slot's unary call completed: take the next step, or report. */
static void unary_done(struct slot *s)
{
    struct etcd_slot *es = s->target;
    struct grpc_unary *c = &es->u;
    grpc_status_code status = c->status;
    ProtobufCMessage *reply = NULL;
    if (status == GRPC_STATUS_OK) {
        const ProtobufCMessageDescriptor *desc =
            es->step == STEP_GRANT ? &etcdserverpb__lease_grant_response__descriptor
            : es->step == STEP_PUT_TXN || es->step == STEP_DELETE_TXN
                ? &etcdserverpb__txn_response__descriptor
                : &etcdserverpb__lease_revoke_response__descriptor;
        reply = grpc_unpack(desc, c->recv);
        if (reply == NULL)
            status = GRPC_STATUS_INTERNAL;
    } else if (!(es->step == STEP_REVOKE &&
                 status == GRPC_STATUS_NOT_FOUND)) {
        log_error(s, step_names[es->step], status, c->details);
    }
    grpc_unary_end(c);

    if (status != GRPC_STATUS_OK) {
        protobuf_c_message_free_unpacked(reply, NULL);
        /* The lease was revoked already, or expired: the release's
         * outcome is the Txn's. */
        if (es->step == STEP_REVOKE && status == GRPC_STATUS_NOT_FOUND)
            bench_done(s, es->result, 0, 0, 0);
        else
            bench_done(s, RESULT_ERROR, (int)status, 0, 0);
        return;
    }
    switch (es->step) {
    case STEP_GRANT: {
        Etcdserverpb__LeaseGrantResponse *r =
            (Etcdserverpb__LeaseGrantResponse *)reply;
        bool ok = r->id != 0 && (r->error == NULL || r->error[0] == '\0');
        es->lease = r->id;
        protobuf_c_message_free_unpacked(reply, NULL);
        if (!ok) {
            bench_done(s, RESULT_ERROR, GRPC_STATUS_INTERNAL, 0, 0);
            return;
        }
        es->step = STEP_PUT_TXN;
        send_put_txn(s);
        return;
    }
    case STEP_PUT_TXN: {
        Etcdserverpb__TxnResponse *r = (Etcdserverpb__TxnResponse *)reply;
        bool ok = r->succeeded;
        uint64_t token = r->header != NULL ? (uint64_t)r->header->revision : 0;
        protobuf_c_message_free_unpacked(reply, NULL);
        if (ok) {
            bench_done(s, RESULT_OK, 0, token, es->lease);
            return;
        }
        /* Held by another: give the granted lease back. */
        es->step = STEP_REVOKE_UNHELD;
        send_revoke(s);
        return;
    }
    case STEP_REVOKE_UNHELD:
        protobuf_c_message_free_unpacked(reply, NULL);
        bench_done(s, RESULT_HELD, 0, 0, 0);
        return;
    case STEP_DELETE_TXN: {
        Etcdserverpb__TxnResponse *r = (Etcdserverpb__TxnResponse *)reply;
        es->result = r->succeeded ? RESULT_OK : RESULT_HELD;
        protobuf_c_message_free_unpacked(reply, NULL);
        es->step = STEP_REVOKE;
        send_revoke(s);
        return;
    }
    case STEP_REVOKE:
        protobuf_c_message_free_unpacked(reply, NULL);
        bench_done(s, es->result, 0, 0, 0);
        return;
    }
}

/* The stream failed under a renew: report it by the stream's status. */
static void renew_failed(struct slot *s)
{
    struct etcd_slot *es = s->target;
    struct keepalive *ka = &es->ka;
    int status = ka->status != GRPC_STATUS_OK ? (int)ka->status
                                              : STATUS_CONNECT;
    log_error(s, "LeaseKeepAlive", status, ka->details);
    stream_close(ka);
    bench_done(s, RESULT_ERROR, status, 0, 0);
}

/* A renew's batch completed. */
static void renew_done(struct slot *s, bool success)
{
    struct etcd_slot *es = s->target;
    struct keepalive *ka = &es->ka;
    ka->in_flight = false;
    grpc_byte_buffer_destroy(ka->send);
    ka->send = NULL;
    if (!success || ka->recv == NULL) {
        grpc_byte_buffer_destroy(ka->recv);
        ka->recv = NULL;
        ka->failed = true;
        if (ka->ended)
            renew_failed(s);
        /* else the status, on its way, reports it */
        return;
    }
    Etcdserverpb__LeaseKeepAliveResponse *r =
        (Etcdserverpb__LeaseKeepAliveResponse *)grpc_unpack(
            &etcdserverpb__lease_keep_alive_response__descriptor, ka->recv);
    grpc_byte_buffer_destroy(ka->recv);
    ka->recv = NULL;
    enum bench_result result = RESULT_ERROR;
    int status = GRPC_STATUS_INTERNAL;
    if (r != NULL) {
        result = r->ttl > 0 ? RESULT_OK : RESULT_HELD;
        status = 0;
    }
    protobuf_c_message_free_unpacked((ProtobufCMessage *)r, NULL);
    if (ka->ended)
        stream_close(ka); /* the next renew opens another */
    const struct held *h = &s->held[s->cur];
    bench_done(s, result, status, h->token, h->lease_id);
}

/* The slot's stream ended. */
static void status_done(struct slot *s)
{
    struct etcd_slot *es = s->target;
    struct keepalive *ka = &es->ka;
    ka->ended = true;
    if (ka->failed)
        renew_failed(s);
    else if (!ka->in_flight)
        stream_close(ka); /* ended between renews */
    /* else the renew's own completion follows, and closes it */
}

/* Renews that take too long: cancel their stream (the unary calls have
 * their own deadline). */
static void check_timeouts(struct bench_thread *t)
{
    int64_t now = bench_now_ns();
    for (size_t i = 0; i < t->nslots; i++) {
        struct etcd_slot *es = t->slots[i].target;
        if (es->ka.in_flight && !es->ka.ended &&
            now - es->ka.since_ns > (int64_t)CALL_TIMEOUT_MS * 1000000)
            grpc_call_cancel_with_status(es->ka.call,
                                         GRPC_STATUS_DEADLINE_EXCEEDED,
                                         "renew timed out", NULL);
    }
}

static void etcd_run(struct bench_thread *t)
{
    struct etcd_thread *et = t->target;
    while (!bench_thread_finished(t)) {
        grpc_event ev = grpc_completion_queue_next(
            et->conns.cq, gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                                 gpr_time_from_millis(50, GPR_TIMESPAN)),
            NULL);
        if (ev.type == GRPC_OP_COMPLETE) {
            struct tag *tag = ev.tag;
            switch (tag->kind) {
            case TAG_UNARY:
                unary_done(tag->s);
                break;
            case TAG_RENEW:
                renew_done(tag->s, ev.success != 0);
                break;
            case TAG_STATUS:
                status_done(tag->s);
                break;
            }
        } else {
            bench_tick(t); /* quiet: start slots that were idle */
        }
        int64_t now = bench_now_ns();
        if (now - et->last_check_ns > 100000000) {
            et->last_check_ns = now;
            check_timeouts(t);
        }
    }
}

static void etcd_thread_close(struct bench_thread *t)
{
    struct etcd_thread *et = t->target;
    /* Nothing is in flight; end the open streams. */
    for (size_t i = 0; i < t->nslots; i++) {
        struct etcd_slot *es = t->slots[i].target;
        if (es->ka.call != NULL)
            grpc_call_cancel(es->ka.call, NULL);
    }
    grpc_conns_close(&et->conns);
    for (size_t i = 0; i < t->nslots; i++) {
        struct etcd_slot *es = t->slots[i].target;
        if (es->ka.call != NULL)
            stream_close(&es->ka);
        free(es);
    }
    free(et);
}

const struct bench_target_ops bench_target_etcd = {
    "etcd", etcd_thread_init, etcd_start, etcd_run, etcd_thread_close};
