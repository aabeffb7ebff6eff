/*
 * One blocking unary gRPC call with protobuf-c messages: what liblease's
 * gRPC driver and leased-probe both need; and the pieces a streaming call
 * (stream.h) shares with it. Internal (not in lease.h).
 */
#ifndef LEASED_UNARY_H
#define LEASED_UNARY_H

#include <grpc/grpc.h>
#include <grpc/support/time.h>
#include <protobuf-c/protobuf-c.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Calls path on ch with the message req and waits until the call ends or
 * deadline (on its own completion queue, so any number of threads may
 * call at once), with the nmd metadata md (may be NULL). wait_for_ready:
 * while the channel is not connected, wait for it (and have it connect)
 * until the deadline, rather than fail at once. On
 * GRPC_STATUS_OK, *resp is the reply unpacked with desc
 * (free it with protobuf_c_message_free_unpacked); a reply that is
 * missing or does not decode gives GRPC_STATUS_INTERNAL and *resp NULL.
 * *ttl_ns (ttl_ns may be NULL) is the TTL the server said with its reply
 * (ttlheader.h), 0 when none. details (details_len bytes) gets the
 * status text, "" when none. */
grpc_status_code unary_call(grpc_channel *ch, const char *path,
                            const grpc_metadata *md, size_t nmd,
                            bool wait_for_ready,
                            const ProtobufCMessage *req,
                            const ProtobufCMessageDescriptor *desc,
                            gpr_timespec deadline, ProtobufCMessage **resp,
                            int64_t *ttl_ns, char *details,
                            size_t details_len);

/* m packed into a new byte buffer (destroy it). */
grpc_byte_buffer *unary_pack(const ProtobufCMessage *m);

/* b unpacked with desc (free it with protobuf_c_message_free_unpacked);
 * NULL when it does not decode. */
ProtobufCMessage *unary_unpack(grpc_byte_buffer *b,
                               const ProtobufCMessageDescriptor *desc);

/* A call of path on ch with its own pluck queue (*cq), until deadline;
 * unary_finish() unrefs it and destroys the queue. */
grpc_call *unary_start(grpc_channel *ch, const char *path,
                       gpr_timespec deadline, grpc_completion_queue **cq);
void unary_finish(grpc_call *c, grpc_completion_queue *cq);

#endif
