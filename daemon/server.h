/*
 * The server: the loop side of leased. Owns the lease engine and the
 * store, decides requests in batches, commits each batch in one
 * transaction off the loop (group commit), and answers after the commit.
 */
#ifndef LEASED_SERVER_H
#define LEASED_SERVER_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "request.h"

struct server;
struct store;

/* Creates a server on loop over store (taken: closed by the server) and
 * loads every stored lease into the engine. ttl_ns is the lease lifetime.
 * Returns NULL with errmsg set on failure (the store is closed then too). */
struct server *server_create(uv_loop_t *loop, struct store *store,
                             int64_t ttl_ns, char *errmsg, size_t errmsg_len);

/* Lets the server answer through reply(arg, req) once a request is done,
 * say through storage(arg, ok) when the storage starts failing (false) or
 * works again (true), and through fatal(arg, why) that a sync failed:
 * from then on it answers nothing, and the caller must end the process
 * without touching the server again (why is borrowed for the call).
 * storage may be NULL; fatal may not. */
void server_set_reply(struct server *s,
                      void (*reply)(void *arg, struct request *req),
                      void (*storage)(void *arg, bool ok),
                      void (*fatal)(void *arg, const char *why), void *arg);

/* Takes a list of requests (linked by ->next) to decide and answer. */
void server_submit(struct server *s, struct request *list);

/* Stops the garbage-collection timer, waits for the commit in flight,
 * closes the store and every handle, then calls done(arg). No request
 * may be submitted after this. */
void server_close(struct server *s, void (*done)(void *arg), void *arg);

#endif
