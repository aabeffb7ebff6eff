/*
 * leasebench-null: the ceiling of the transport on this machine. A gRPC
 * server of the lease protocol that decides every call with leased's own
 * engine and codec, inline on its one completion-queue thread, and
 * stores nothing: what leased would do with no hand-off to a loop, no
 * storage and no fsync.
 *
 *   leasebench-null --listen 127.0.0.1:0 [--ttl-ms N]
 *
 * Prints `listening addr=HOST:PORT` on stdout; runs until SIGTERM/SIGINT.
 */
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/time.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "codec.h"
#include "engine.h"

#define ARMED_PER_METHOD 64

struct call {
    enum request_op op;
    bool sending;
    grpc_call *call;
    gpr_timespec deadline;
    grpc_metadata_array metadata;
    grpc_byte_buffer *payload, *body;
    grpc_slice details;
    int cancelled;
};

static grpc_server *server;
static grpc_completion_queue *cq;
static void *methods[3];
static struct engine *engine;
static volatile sig_atomic_t stop;

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void arm(enum request_op op)
{
    struct call *c = calloc(1, sizeof(*c));
    c->op = op;
    c->details = grpc_empty_slice();
    grpc_metadata_array_init(&c->metadata);
    grpc_server_request_registered_call(server, methods[op], &c->call,
                                        &c->deadline, &c->metadata,
                                        &c->payload, cq, cq, c);
}

static void free_call(struct call *c)
{
    grpc_byte_buffer_destroy(c->payload);
    grpc_byte_buffer_destroy(c->body);
    grpc_slice_unref(c->details);
    grpc_metadata_array_destroy(&c->metadata);
    if (c->call != NULL)
        grpc_call_unref(c->call);
    free(c);
}

/* Decides the call with the engine, as leased's loop would, at once. */
static void decide(struct request *req)
{
    struct engine_grant g = {0, 0};
    struct engine_change chg;
    int rc;
    int64_t now = now_ns();
    if (req->op == OP_ACQUIRE)
        rc = engine_acquire(engine, now, req->session, req->session_len,
                            req->owner, req->owner_len, &g, &chg);
    else if (req->op == OP_RENEW)
        rc = engine_renew(engine, now, req->session, req->session_len,
                          req->owner, req->owner_len, req->token, &g, &chg);
    else
        rc = engine_release(engine, req->session, req->session_len,
                            req->owner, req->owner_len, req->token, &chg);
    if (rc == ENGINE_OK)
        engine_finish(engine, &chg, true);
    req->status = rc == ENGINE_HELD ? REPLY_HELD : REPLY_OK;
    req->grant_token = g.token;
    req->grant_expiry_ns = g.expiry_ns;
}

static void answer(struct call *c)
{
    arm(c->op);
    struct request req;
    memset(&req, 0, sizeof(req));
    void *msg = NULL;
    grpc_status_code code = GRPC_STATUS_INVALID_ARGUMENT;
    grpc_byte_buffer_reader reader;
    if (c->payload != NULL && grpc_byte_buffer_reader_init(&reader, c->payload)) {
        grpc_slice s = grpc_byte_buffer_reader_readall(&reader);
        grpc_byte_buffer_reader_destroy(&reader);
        if (codec_decode(c->op, GRPC_SLICE_START_PTR(s), GRPC_SLICE_LENGTH(s),
                         &req, &msg) == 0) {
            decide(&req);
            code = req.status == REPLY_OK ? GRPC_STATUS_OK
                                          : GRPC_STATUS_FAILED_PRECONDITION;
        }
        grpc_slice_unref(s);
    }
    grpc_op ops[4];
    memset(ops, 0, sizeof(ops));
    size_t n = 0;
    ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
    if (code == GRPC_STATUS_OK) {
        uint8_t buf[CODEC_REPLY_MAX];
        size_t len = codec_encode_reply(&req, buf, sizeof(buf));
        grpc_slice s = grpc_slice_from_copied_buffer((const char *)buf, len);
        c->body = grpc_raw_byte_buffer_create(&s, 1);
        grpc_slice_unref(s);
        ops[n].op = GRPC_OP_SEND_MESSAGE;
        ops[n++].data.send_message.send_message = c->body;
    }
    codec_free(msg);
    ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[n++].data.send_status_from_server.status = code;
    ops[n].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    ops[n++].data.recv_close_on_server.cancelled = &c->cancelled;
    c->sending = true;
    if (grpc_call_start_batch(c->call, ops, n, c, NULL) != GRPC_CALL_OK)
        free_call(c);
}

static void on_signal(int sig)
{
    (void)sig;
    stop = 1;
}

int main(int argc, char **argv)
{
    const char *listen = "127.0.0.1:0";
    long ttl_ms = 30000;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--listen") == 0)
            listen = argv[i + 1];
        else if (strcmp(argv[i], "--ttl-ms") == 0)
            ttl_ms = atol(argv[i + 1]);
    }
    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);
    struct siphash_key key;
    siphash_random_key(&key);
    engine = engine_create(ttl_ms * 1000000, 0, &key);
    grpc_init();
    grpc_arg arg = {.type = GRPC_ARG_INTEGER, .key = GRPC_ARG_ALLOW_REUSEPORT,
                    .value.integer = 0};
    grpc_channel_args args = {1, &arg};
    server = grpc_server_create(&args, NULL);
    cq = grpc_completion_queue_create_for_next(NULL);
    grpc_server_register_completion_queue(server, cq, NULL);
    for (int op = 0; op < 3; op++) {
        char path[128];
        codec_method_path((enum request_op)op, path, sizeof(path));
        methods[op] = grpc_server_register_method(
            server, path, NULL, GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER, 0);
    }
    grpc_server_credentials *creds = grpc_insecure_server_credentials_create();
    int port = grpc_server_add_http2_port(server, listen, creds);
    grpc_server_credentials_release(creds);
    if (port <= 0) {
        fprintf(stderr, "leasebench-null: cannot listen on %s\n", listen);
        return 1;
    }
    grpc_server_start(server);
    for (int op = 0; op < 3; op++)
        for (int i = 0; i < ARMED_PER_METHOD; i++)
            arm((enum request_op)op);
    const char *colon = strrchr(listen, ':');
    printf("listening addr=%.*s:%d\n", (int)(colon - listen), listen, port);
    fflush(stdout);

    while (!stop) {
        grpc_event ev = grpc_completion_queue_next(
            cq, gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                             gpr_time_from_millis(100, GPR_TIMESPAN)),
            NULL);
        if (ev.type != GRPC_OP_COMPLETE)
            continue;
        struct call *c = ev.tag;
        if (c->sending || !ev.success)
            free_call(c);
        else
            answer(c);
    }
    static char shutdown_tag;
    grpc_server_shutdown_and_notify(server, cq, &shutdown_tag);
    grpc_server_cancel_all_calls(server);
    for (;;) {
        grpc_event ev = grpc_completion_queue_next(
            cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
        if (ev.tag == &shutdown_tag)
            break;
        free_call(ev.tag);
    }
    grpc_server_destroy(server);
    grpc_completion_queue_shutdown(cq);
    while (grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_REALTIME),
                                      NULL)
               .type != GRPC_QUEUE_SHUTDOWN)
        ;
    grpc_completion_queue_destroy(cq);
    engine_destroy(engine);
    grpc_shutdown();
    return 0;
}
