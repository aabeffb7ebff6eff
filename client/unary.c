/* A blocking unary gRPC call (see unary.h). */
#include "unary.h"

#include <grpc/byte_buffer_reader.h>
#include <grpc/support/alloc.h>
#include <stdio.h>
#include <string.h>

#include "ttlheader.h"

/* The TTL the server said in md (ttlheader.h), into *ttl_ns if it did. */
static void said_ttl(const grpc_metadata_array *md, int64_t *ttl_ns)
{
    for (size_t i = 0; i < md->count; i++) {
        const grpc_metadata *m = &md->metadata[i];
        if (grpc_slice_str_cmp(m->key, TTLHEADER_KEY) == 0 &&
            ttlheader_parse((const char *)GRPC_SLICE_START_PTR(m->value),
                            GRPC_SLICE_LENGTH(m->value), ttl_ns) == 0)
            return;
    }
}

grpc_byte_buffer *unary_pack(const ProtobufCMessage *m)
{
    size_t n = protobuf_c_message_get_packed_size(m);
    grpc_slice body = grpc_slice_malloc(n);
    protobuf_c_message_pack(m, GRPC_SLICE_START_PTR(body));
    grpc_byte_buffer *b = grpc_raw_byte_buffer_create(&body, 1);
    grpc_slice_unref(body);
    return b;
}

ProtobufCMessage *unary_unpack(grpc_byte_buffer *b,
                               const ProtobufCMessageDescriptor *desc)
{
    grpc_byte_buffer_reader reader;
    if (b == NULL || !grpc_byte_buffer_reader_init(&reader, b))
        return NULL;
    grpc_slice all = grpc_byte_buffer_reader_readall(&reader);
    grpc_byte_buffer_reader_destroy(&reader);
    ProtobufCMessage *m = protobuf_c_message_unpack(
        desc, NULL, GRPC_SLICE_LENGTH(all), GRPC_SLICE_START_PTR(all));
    grpc_slice_unref(all);
    return m;
}

grpc_call *unary_start(grpc_channel *ch, const char *path,
                       gpr_timespec deadline, grpc_completion_queue **cq)
{
    *cq = grpc_completion_queue_create_for_pluck(NULL);
    return grpc_channel_create_call(ch, NULL, GRPC_PROPAGATE_DEFAULTS, *cq,
                                    grpc_slice_from_static_string(path), NULL,
                                    deadline, NULL);
}

void unary_finish(grpc_call *c, grpc_completion_queue *cq)
{
    grpc_call_unref(c);
    grpc_completion_queue_shutdown(cq);
    while (grpc_completion_queue_pluck(cq, NULL,
                                       gpr_inf_future(GPR_CLOCK_REALTIME), NULL)
               .type != GRPC_QUEUE_SHUTDOWN)
        ;
    grpc_completion_queue_destroy(cq);
}

grpc_status_code unary_call(grpc_channel *ch, const char *path,
                            const grpc_metadata *md, size_t nmd,
                            bool wait_for_ready,
                            const ProtobufCMessage *req,
                            const ProtobufCMessageDescriptor *desc,
                            gpr_timespec deadline, ProtobufCMessage **resp,
                            int64_t *ttl_ns, char *details,
                            size_t details_len)
{
    *resp = NULL;
    if (ttl_ns != NULL)
        *ttl_ns = 0;
    grpc_byte_buffer *send = unary_pack(req);
    grpc_completion_queue *cq;
    grpc_call *c = unary_start(ch, path, deadline, &cq);
    grpc_metadata_array initial, trailing;
    grpc_metadata_array_init(&initial);
    grpc_metadata_array_init(&trailing);
    grpc_byte_buffer *recv = NULL;
    grpc_status_code status = GRPC_STATUS_UNKNOWN;
    grpc_slice text = grpc_empty_slice();

    grpc_op ops[6];
    memset(ops, 0, sizeof(ops));
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[0].data.send_initial_metadata.count = nmd;
    ops[0].data.send_initial_metadata.metadata = (grpc_metadata *)md;
    if (wait_for_ready)
        ops[0].flags = GRPC_INITIAL_METADATA_WAIT_FOR_READY |
                       GRPC_INITIAL_METADATA_WAIT_FOR_READY_EXPLICITLY_SET;
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
    ops[5].data.recv_status_on_client.status_details = &text;

    if (grpc_call_start_batch(c, ops, 6, c, NULL) != GRPC_CALL_OK) {
        status = GRPC_STATUS_UNAVAILABLE;
        snprintf(details, details_len, "cannot start the call");
    } else {
        grpc_completion_queue_pluck(cq, c, gpr_inf_future(GPR_CLOCK_REALTIME),
                                    NULL);
        char *t = grpc_slice_to_c_string(text);
        snprintf(details, details_len, "%s", t);
        gpr_free(t);
    }
    if (status == GRPC_STATUS_OK) {
        *resp = unary_unpack(recv, desc);
        if (*resp == NULL) {
            status = GRPC_STATUS_INTERNAL;
            snprintf(details, details_len, "%s reply",
                     recv == NULL ? "no" : "malformed");
        } else if (ttl_ns != NULL) {
            said_ttl(&initial, ttl_ns);
        }
    }
    grpc_slice_unref(text);
    grpc_metadata_array_destroy(&initial);
    grpc_metadata_array_destroy(&trailing);
    grpc_byte_buffer_destroy(send);
    grpc_byte_buffer_destroy(recv);
    unary_finish(c, cq);
    return status;
}
