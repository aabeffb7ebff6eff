/* What leasebench's gRPC targets share (see grpc_common.h). */
#include "grpc_common.h"

#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc_security.h>
#include <grpc/support/time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CALL_TIMEOUT_MS 10000

static grpc_arg int_arg(const char *key, int value)
{
    grpc_arg a = {.type = GRPC_ARG_INTEGER, .key = (char *)key};
    a.value.integer = value;
    return a;
}

int grpc_conns_open(struct grpc_conns *g, const struct bench_thread *t,
                    const char *hostport)
{
    const struct bench_run *run = t->run;
    size_t n = run->connections / run->threads +
               ((size_t)t->id < run->connections % run->threads);
    g->nchannels = n > 0 ? n : 1;
    g->channels = calloc(g->nchannels, sizeof(*g->channels));
    if (g->channels == NULL)
        return -1;
    g->cq = grpc_completion_queue_create_for_next(NULL);
    grpc_channel_credentials *creds = grpc_insecure_credentials_create();
    for (size_t i = 0; i < g->nchannels; i++) {
        /* A distinct channel argument per channel keeps gRPC from sharing
         * one connection among them. The generator is the same for every
         * system measured, so it spends as little as it can per call:
         * gRPC's minimal filter stack (no client-side retries, service
         * configs or message-size checks) with the deadline kept, and no
         * channelz records. */
        grpc_arg args[] = {
            int_arg("leasebench.connection", (int)(t->id * 1000 + i)),
            int_arg(GRPC_ARG_MINIMAL_STACK, 1),
            int_arg(GRPC_ARG_ENABLE_DEADLINE_CHECKS, 1),
            int_arg(GRPC_ARG_ENABLE_CHANNELZ, 0),
        };
        grpc_channel_args chargs = {sizeof(args) / sizeof(args[0]), args};
        g->channels[i] = grpc_channel_create(hostport, creds, &chargs);
    }
    grpc_channel_credentials_release(creds);
    return 0;
}

grpc_channel *grpc_conns_channel(const struct grpc_conns *g,
                                 const struct slot *s)
{
    return g->channels[(size_t)s->id % g->nchannels];
}

void grpc_conns_close(struct grpc_conns *g)
{
    for (size_t i = 0; i < g->nchannels; i++)
        grpc_channel_destroy(g->channels[i]);
    grpc_completion_queue_shutdown(g->cq);
    while (grpc_completion_queue_next(g->cq,
                                      gpr_inf_future(GPR_CLOCK_REALTIME), NULL)
               .type != GRPC_QUEUE_SHUTDOWN)
        ;
    grpc_completion_queue_destroy(g->cq);
    free(g->channels);
}

void grpc_unary_start(struct grpc_unary *u, grpc_channel *ch,
                      grpc_completion_queue *cq, const char *path,
                      grpc_byte_buffer *body, void *tag)
{
    gpr_timespec deadline =
        gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                     gpr_time_from_millis(CALL_TIMEOUT_MS, GPR_TIMESPAN));
    u->call = grpc_channel_create_call(ch, NULL, GRPC_PROPAGATE_DEFAULTS, cq,
                                       grpc_slice_from_static_string(path),
                                       NULL, deadline, NULL);
    grpc_metadata_array_init(&u->initial);
    grpc_metadata_array_init(&u->trailing);
    u->send = body;
    u->recv = NULL;
    u->details = grpc_empty_slice();
    grpc_op ops[6];
    memset(ops, 0, sizeof(ops));
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = u->send;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &u->initial;
    ops[4].op = GRPC_OP_RECV_MESSAGE;
    ops[4].data.recv_message.recv_message = &u->recv;
    ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[5].data.recv_status_on_client.trailing_metadata = &u->trailing;
    ops[5].data.recv_status_on_client.status = &u->status;
    ops[5].data.recv_status_on_client.status_details = &u->details;
    if (grpc_call_start_batch(u->call, ops, 6, tag, NULL) != GRPC_CALL_OK) {
        fprintf(stderr, "leasebench: cannot start a call\n");
        abort();
    }
}

void grpc_unary_end(struct grpc_unary *u)
{
    grpc_metadata_array_destroy(&u->initial);
    grpc_metadata_array_destroy(&u->trailing);
    grpc_byte_buffer_destroy(u->send);
    grpc_byte_buffer_destroy(u->recv);
    grpc_slice_unref(u->details);
    grpc_call_unref(u->call);
    u->call = NULL;
}

grpc_byte_buffer *grpc_pack(const ProtobufCMessage *m)
{
    uint8_t buf[1024];
    size_t n = protobuf_c_message_get_packed_size(m);
    if (n > sizeof(buf)) {
        fprintf(stderr, "leasebench: request too large\n");
        abort();
    }
    n = protobuf_c_message_pack(m, buf);
    grpc_slice slice = grpc_slice_from_copied_buffer((const char *)buf, n);
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&slice, 1);
    grpc_slice_unref(slice);
    return bb;
}

ProtobufCMessage *grpc_unpack(const ProtobufCMessageDescriptor *desc,
                              grpc_byte_buffer *bb)
{
    if (bb == NULL)
        return NULL;
    grpc_byte_buffer_reader r;
    if (!grpc_byte_buffer_reader_init(&r, bb))
        return NULL;
    grpc_slice all = grpc_byte_buffer_reader_readall(&r);
    grpc_byte_buffer_reader_destroy(&r);
    ProtobufCMessage *m = protobuf_c_message_unpack(
        desc, NULL, GRPC_SLICE_LENGTH(all), GRPC_SLICE_START_PTR(all));
    grpc_slice_unref(all);
    return m;
}
