/*
 * The replica: the loop side of leased over PostgreSQL, in place of the
 * server (server.h) of the embedded mode. It keeps no lease state: it
 * hands each batch of calls to the database, which decides (see
 * storage/postgres.h), and answers once the batch's transaction has
 * committed. The same calls as server.h, with the same contracts.
 */
#ifndef LEASED_REPLICA_H
#define LEASED_REPLICA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "request.h"

struct replica;
struct pgstore;

#define REPLICA_MAX_CONNECTIONS 16

/* Creates a replica on loop over n (1..REPLICA_MAX_CONNECTIONS)
 * connections to one database, dbs[0..n) (connected; taken: closed by the
 * replica). ttl_ns is the lease lifetime they were opened with. Returns
 * NULL when out of memory (the stores are closed then too). */
struct replica *replica_create(uv_loop_t *loop, struct pgstore *const *dbs,
                               size_t n, int64_t ttl_ns);

/* As server_set_reply(); fatal is never called (a lost database is a
 * storage failure the replica recovers from by reconnecting). */
void replica_set_reply(struct replica *r,
                       void (*reply)(void *arg, struct request *req),
                       void (*storage)(void *arg, bool ok),
                       void (*fatal)(void *arg, const char *why), void *arg);

/* Sets what the replica calls (on the loop, with the arg of
 * replica_set_reply) to say how many new requests should wait before
 * they reach it (see frontend_want_requests()): 1 while a connection is
 * idle, more while each has a batch in flight, 0 while every pipeline is
 * full. */
void replica_set_wanted(struct replica *r,
                        void (*wanted)(void *arg, size_t at));

/* Takes a list of requests (linked by ->next) to decide and answer. */
void replica_submit(struct replica *r, struct request *list);

/* Waits for the batches and the jobs in flight, closes the database
 * connections and every handle, then calls done(arg). */
void replica_close(struct replica *r, void (*done)(void *arg), void *arg);

#endif
