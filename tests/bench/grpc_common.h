/*
 * What the gRPC targets (leased/null and etcd) share: a thread's
 * connections (its completion queue and its share of --connections
 * channels, each its own connection), unary calls, and protobuf-c
 * messages to and from byte buffers.
 */
#ifndef LEASEBENCH_GRPC_COMMON_H
#define LEASEBENCH_GRPC_COMMON_H

#include <grpc/grpc.h>
#include <protobuf-c/protobuf-c.h>
#include <stddef.h>

#include "bench.h"

struct grpc_conns {
    grpc_completion_queue *cq;
    grpc_channel **channels;
    size_t nchannels;
};

/* Opens thread t's share of the run's connections to hostport (borrowed).
 * Returns 0 or -1 (out of memory). */
int grpc_conns_open(struct grpc_conns *g, const struct bench_thread *t,
                    const char *hostport);

/* The channel slot s uses. */
grpc_channel *grpc_conns_channel(const struct grpc_conns *g,
                                 const struct slot *s);

/* Destroys the channels, then shuts the queue down and drains it. Nothing
 * may be in flight but calls the channels' end cancels. */
void grpc_conns_close(struct grpc_conns *g);

/* One unary call in flight. */
struct grpc_unary {
    grpc_call *call;
    grpc_metadata_array initial, trailing;
    grpc_byte_buffer *send, *recv;
    grpc_status_code status;
    grpc_slice details;
};

/* Starts a unary call of path (static) on ch, sending body (taken), with
 * a 10 s deadline; its completion on cq carries tag. Aborts if gRPC
 * refuses to start it (a bug, not a server's failure). */
void grpc_unary_start(struct grpc_unary *u, grpc_channel *ch,
                      grpc_completion_queue *cq, const char *path,
                      grpc_byte_buffer *body, void *tag);

/* Frees what a completed call holds; read u->status and u->recv first. */
void grpc_unary_end(struct grpc_unary *u);

/* A message as a byte buffer (aborts past 1 KiB, which no request of
 * leasebench reaches), and back (NULL if absent or malformed). */
grpc_byte_buffer *grpc_pack(const ProtobufCMessage *m);
ProtobufCMessage *grpc_unpack(const ProtobufCMessageDescriptor *desc,
                              grpc_byte_buffer *bb);

#endif
