/*
 * The gRPC server's listeners and connection limits: the server with
 * leased's channel arguments (message size, the limits of
 * struct config_limits, no SO_REUSEPORT), and every --listen address
 * bound: unix sockets plaintext with the socket mode from their first
 * moment and a directory others cannot write; TCP with TLS when
 * configured.
 */
#ifndef LEASED_LISTENERS_H
#define LEASED_LISTENERS_H

#include <grpc/grpc.h>
#include <stddef.h>

#include "frontend.h"

/* A new, unstarted server with leased's channel arguments. */
grpc_server *listeners_server_create(const struct config_limits *limits);

/* Binds every address of o, starts the server and logs each address as
 * `listening addr=… tls=0|1` with its real port. Returns 0, or -1 with
 * errmsg set to one line, "cannot listen on ADDR: REASON" (REASON like
 * strerror's, lowercase: "address already in use"); then nothing is
 * started, no address stays bound, and the server can only be destroyed.
 * gRPC's own error line for that failure is left out of the log when it
 * gave the reason (needs log_route_grpc()); other gRPC lines are not. */
int listeners_bind(grpc_server *server, const struct frontend_options *o,
                   char *errmsg, size_t len);

#endif
