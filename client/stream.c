/* A blocking server-streaming gRPC call (see stream.h). */
#include "stream.h"

#include <grpc/support/alloc.h>
#include <stdio.h>
#include <string.h>

#include "unary.h"

/* Starts n ops as one batch tagged tag and waits for it. */
static bool run(grpc_call *c, grpc_completion_queue *cq, grpc_op *ops, size_t n,
                void *tag)
{
    if (grpc_call_start_batch(c, ops, n, tag, NULL) != GRPC_CALL_OK)
        return false;
    grpc_event ev = grpc_completion_queue_pluck(
        cq, tag, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    return ev.type == GRPC_OP_COMPLETE && ev.success;
}

grpc_status_code
stream_call(grpc_channel *ch, const char *path, const grpc_metadata *md,
            size_t nmd, const ProtobufCMessage *req,
            const ProtobufCMessageDescriptor *desc, gpr_timespec deadline,
            int (*on_msg)(void *arg, ProtobufCMessage *msg), void *arg,
            bool *stopped, size_t *received, char *details, size_t details_len)
{
    *stopped = false;
    *received = 0;
    grpc_byte_buffer *send = unary_pack(req);
    grpc_completion_queue *cq;
    grpc_call *c = unary_start(ch, path, deadline, &cq);
    grpc_metadata_array initial, trailing;
    grpc_metadata_array_init(&initial);
    grpc_metadata_array_init(&trailing);
    grpc_status_code status = GRPC_STATUS_UNKNOWN;
    grpc_slice text = grpc_empty_slice();
    /* A failure of ours, not the server's, and its reason. */
    grpc_status_code own = GRPC_STATUS_OK;
    const char *own_why = "";
    int tags[3]; /* the start, a message, the status */

    grpc_op ops[4];
    memset(ops, 0, sizeof(ops));
    ops[0].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[0].data.recv_status_on_client.trailing_metadata = &trailing;
    ops[0].data.recv_status_on_client.status = &status;
    ops[0].data.recv_status_on_client.status_details = &text;
    bool status_pending =
        grpc_call_start_batch(c, ops, 1, &tags[2], NULL) == GRPC_CALL_OK;
    memset(ops, 0, sizeof(ops));
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[0].data.send_initial_metadata.count = nmd;
    ops[0].data.send_initial_metadata.metadata = (grpc_metadata *)md;
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = send;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &initial;
    if (!status_pending) {
        own = GRPC_STATUS_UNAVAILABLE;
        own_why = "cannot start the call";
    } else if (run(c, cq, ops, 4, &tags[0])) {
        for (;;) {
            grpc_byte_buffer *recv = NULL;
            memset(ops, 0, sizeof(ops));
            ops[0].op = GRPC_OP_RECV_MESSAGE;
            ops[0].data.recv_message.recv_message = &recv;
            if (!run(c, cq, ops, 1, &tags[1]) || recv == NULL)
                break; /* the stream ended: its status says why */
            ProtobufCMessage *m = unary_unpack(recv, desc);
            grpc_byte_buffer_destroy(recv);
            if (m == NULL) {
                own = GRPC_STATUS_INTERNAL;
                own_why = "malformed message";
                grpc_call_cancel(c, NULL);
                break;
            }
            (*received)++;
            int stop = on_msg(arg, m);
            protobuf_c_message_free_unpacked(m, NULL);
            if (stop != 0) {
                *stopped = true;
                grpc_call_cancel(c, NULL);
                break;
            }
        }
    }
    if (status_pending)
        grpc_completion_queue_pluck(cq, &tags[2],
                                    gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    if (own != GRPC_STATUS_OK) {
        status = own;
        snprintf(details, details_len, "%s", own_why);
    } else {
        char *t = grpc_slice_to_c_string(text);
        snprintf(details, details_len, "%s", t);
        gpr_free(t);
    }
    grpc_slice_unref(text);
    grpc_metadata_array_destroy(&initial);
    grpc_metadata_array_destroy(&trailing);
    grpc_byte_buffer_destroy(send);
    unary_finish(c, cq);
    return status;
}
