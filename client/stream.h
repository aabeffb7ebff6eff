/*
 * One blocking server-streaming gRPC call with protobuf-c messages
 * (leased's Watch). Internal (not in lease.h).
 */
#ifndef LEASED_STREAM_H
#define LEASED_STREAM_H

#include <grpc/grpc.h>
#include <grpc/support/time.h>
#include <protobuf-c/protobuf-c.h>
#include <stdbool.h>
#include <stddef.h>

/* Calls path on ch with the message req (and the nmd metadata md, which
 * may be NULL), on a completion queue of its own, and passes each message
 * of the stream, unpacked with desc, to on_msg(arg, msg), which must not
 * keep it; until the stream ends (its status), deadline, or on_msg
 * returns non-zero: then the call is cancelled and *stopped set (the
 * status is then CANCELLED). A message that does not decode ends the
 * call INTERNAL. *received counts the messages passed. details
 * (details_len bytes) gets the status text, "" when none. */
grpc_status_code
stream_call(grpc_channel *ch, const char *path, const grpc_metadata *md,
            size_t nmd, const ProtobufCMessage *req,
            const ProtobufCMessageDescriptor *desc, gpr_timespec deadline,
            int (*on_msg)(void *arg, ProtobufCMessage *msg), void *arg,
            bool *stopped, size_t *received, char *details, size_t details_len);

#endif
