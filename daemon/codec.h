/*
 * The codec: protobuf bytes <-> struct request. The only file of the
 * daemon that includes generated *.pb-c.h. Pure functions, safe on any
 * thread.
 */
#ifndef LEASED_CODEC_H
#define LEASED_CODEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "request.h"

struct store_event;

/* Decodes and validates the body of an op call into *req (op, strings,
 * token). On success *msg holds the decoded message that req's strings
 * point into: free it with codec_free() after the reply. On failure
 * returns -1 with req->status = REPLY_INVALID and req->reason set, and
 * *msg is NULL. buf is borrowed. */
int codec_decode(enum request_op op, const uint8_t *buf, size_t len,
                 struct request *req, void **msg);

/* Frees a message from codec_decode. Accepts NULL. */
void codec_free(void *msg);

/* Encodes the OK reply body of req into buf (cap bytes; CODEC_REPLY_MAX is
 * always enough). Returns its length. */
size_t codec_encode_reply(const struct request *req, uint8_t *buf,
                          size_t cap);

#define CODEC_REPLY_MAX 1024

/* Encodes the OK reply of an admin call (req->admin) into a new malloc'd
 * buffer of *len bytes; NULL when out of memory. Not a Snapshot's: */
uint8_t *codec_encode_admin(const struct request *req, size_t *len);

/* Encodes a WatchResponse of the events evs[0..n), revision and
 * compact_revision into a new malloc'd buffer of *len bytes; NULL when
 * out of memory. */
uint8_t *codec_encode_watch(const struct store_event *const *evs, size_t n,
                            uint64_t revision, uint64_t compact_revision,
                            size_t *len);

/* A SnapshotResponse of a database of len bytes is these bytes (the
 * field's tag and length, written into buf: CODEC_SNAPSHOT_HEADER_MAX is
 * enough; returns how many) followed by the database itself, which so
 * need not be copied into the message. */
#define CODEC_SNAPSHOT_HEADER_MAX 11
size_t codec_snapshot_header(size_t len, uint8_t *buf);

/* Writes the full gRPC method path of op ("/mecatl.driver.v1.
 * SessionLeaseService/Acquire", "/leased.admin.v1.Admin/Get") into buf,
 * from the generated service descriptors. */
void codec_method_path(enum request_op op, char *buf, size_t cap);

/* grpc.health.v1: decodes a HealthCheckRequest's service name into
 * service (cap bytes, NUL-terminated; a longer name fails). Returns 0 or
 * -1. */
int codec_decode_health(const uint8_t *buf, size_t len, char *service,
                        size_t cap);

/* Encodes a HealthCheckResponse with status (its ServingStatus number)
 * into buf (CODEC_REPLY_MAX is enough). Returns its length. */
size_t codec_encode_health(int status, uint8_t *buf, size_t cap);

/* The full gRPC method path of grpc.health.v1.Health's Check (watch
 * false) or Watch, and the name the lease service has in health checks
 * ("mecatl.driver.v1.SessionLeaseService"). */
void codec_health_path(bool watch, char *buf, size_t cap);
const char *codec_lease_service_name(void);

#endif
