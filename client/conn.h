/*
 * A connection to a lease service as liblease's options describe it
 * (struct lease_grpc_options): one gRPC channel per target of a
 * comma-separated list, plaintext only to loopback and unix sockets, TLS
 * with an optional client certificate otherwise, an optional bearer
 * token; and unary calls with failover on UNAVAILABLE. Shared by the gRPC
 * driver and leasectl. Internal (not in lease.h).
 */
#ifndef LEASED_CONN_H
#define LEASED_CONN_H

#include <grpc/grpc.h>
#include <protobuf-c/protobuf-c.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lease.h"

#define CONN_MAX_TARGETS 8
/* The largest answer a channel takes: an admin Snapshot's database. */
#define CONN_MAX_RECEIVE_BYTES (1024 * 1024 * 1024)

struct conn {
    grpc_channel *channels[CONN_MAX_TARGETS];
    size_t ntargets;
    atomic_size_t current; /* the target that answered last */
    int64_t timeout_ms;
    grpc_metadata auth; /* authorization: Bearer …, when has_token */
    bool has_token;
};

/* Opens c (zeroed by the caller) to target with opts (may be NULL; read
 * during the call only); calls grpc_init(). Returns LEASE_OK, or
 * LEASE_EINVAL with the reason in errmsg (len bytes) and c closed. */
int conn_open(struct conn *c, const char *target,
              const struct lease_grpc_options *opts, char *errmsg,
              size_t len);

/* The channel credentials opts ask for (insecure without tls_ca_file;
 * TLS, with a client certificate if given, reading the PEM files now).
 * NULL with the reason in errmsg. */
grpc_channel_credentials *conn_credentials(const struct lease_grpc_options *o,
                                           char *errmsg, size_t len);

/* Closes the channels; grpc_shutdown(). gRPC finishes closing them on
 * its own threads a little later. */
void conn_close(struct conn *c);

/* Waits up to timeout_ms until gRPC has shut down (nothing in the
 * process uses it any more, and its own threads are done). */
bool conn_wait_shutdown(int timeout_ms);

/* Whether a server listens: a fail-fast (not wait-for-ready)
 * grpc.health.v1 Check of each target in turn, all within timeout_ms,
 * until one gets through to a server. False when none did (each
 * answered UNAVAILABLE without a connection: refused, no such socket, a
 * failed TLS handshake), with the first target's reason in why (len
 * bytes); true on any other outcome, whatever the server answered, and
 * when none answered in time (a host that drops packets may yet answer
 * a call with a longer deadline). */
bool conn_reachable(struct conn *c, int64_t timeout_ms, char *why,
                    size_t len);

/* One unary call within the timeout, or until end_ns (CLOCK_MONOTONIC)
 * if that comes first (0: no such end): while targets answer UNAVAILABLE
 * (or, not connected yet, nothing within their share of the timeout),
 * the next one; when all did, rounds of waiting a little for each to
 * connect, at most ten a second, until the end (then UNAVAILABLE with
 * the first reason); as unary_call() otherwise (ttl_ns may be NULL). */
grpc_status_code conn_call(struct conn *c, const char *path, int64_t end_ns,
                           const ProtobufCMessage *req,
                           const ProtobufCMessageDescriptor *desc,
                           ProtobufCMessage **resp, int64_t *ttl_ns,
                           char *details, size_t details_len);

/* One unary call that may last until end_ns (CLOCK_MONOTONIC; INT64_MAX:
 * no end), past the timeout: one the server answers when something
 * happens (leased's Wait). A target that answers UNAVAILABLE (down,
 * draining) hands over to the next; when all did, rounds at most ten a
 * second until the end (then UNAVAILABLE with the first reason); as
 * unary_call() otherwise (ttl_ns may be NULL). */
grpc_status_code conn_call_long(struct conn *c, const char *path,
                                int64_t end_ns, const ProtobufCMessage *req,
                                const ProtobufCMessageDescriptor *desc,
                                ProtobufCMessage **resp, int64_t *ttl_ns,
                                char *details, size_t details_len);

/* A server-streaming call (stream.h) that may last until end_ns
 * (CLOCK_MONOTONIC; INT64_MAX: no end), past the timeout, failing over
 * as conn_call_long does: a target that answers UNAVAILABLE (down,
 * draining, its connection lost mid-stream) hands over to the next,
 * with req packed again, so on_msg may change it between calls (a
 * Watch's revision to resume from). GRPC_STATUS_OK when on_msg stopped
 * the stream; as stream_call() otherwise. */
grpc_status_code conn_stream(struct conn *c, const char *path, int64_t end_ns,
                             const ProtobufCMessage *req,
                             const ProtobufCMessageDescriptor *desc,
                             int (*on_msg)(void *arg, ProtobufCMessage *msg),
                             void *arg, char *details, size_t details_len);

#endif
