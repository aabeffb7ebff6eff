/*
 * The connections of one leasebench thread to a gRPC target: its
 * completion queue and its share of --connections channels, each its own
 * connection. Shared by the leased/null and etcd targets.
 */
#ifndef LEASEBENCH_GRPC_CONNS_H
#define LEASEBENCH_GRPC_CONNS_H

#include <grpc/grpc.h>
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

#endif
