/*
 * The lines of Wait calls (leased.v1.Leases/Wait): per session, its
 * waiting requests in the order they joined, first come first served. A
 * table from session id to a line of requests linked by their ->next (a
 * waiting request is in no other list). The session id of a line is its
 * first request's. Not thread-safe: the caller's lock.
 */
#ifndef LEASED_WAITERS_H
#define LEASED_WAITERS_H

#include <stdbool.h>
#include <stddef.h>

#include "request.h"

struct waiters;

/* An empty table, or NULL when out of memory. */
struct waiters *waiters_create(void);

/* Frees the table, which must be empty. Accepts NULL. */
void waiters_destroy(struct waiters *w);

/* req joins the end of its session's line. Returns 0, or -1 when out of
 * memory (req not added). */
int waiters_add(struct waiters *w, struct request *req);

/* Whether anyone waits for the session. */
bool waiters_has(const struct waiters *w, const char *session, size_t len);

/* Removes and returns the first in the session's line, or NULL. */
struct request *waiters_pop(struct waiters *w, const char *session, size_t len);

/* For each line: takes its first request out when take(arg, first) says
 * so. Returns those taken, linked by ->next. take must not change the
 * table. */
struct request *waiters_take_firsts(struct waiters *w,
                                    bool (*take)(void *arg,
                                                 const struct request *first),
                                    void *arg);

/* Removes every request whose `ended` is set (request.h), or every
 * request when all; returns them linked by ->next. */
struct request *waiters_take_ended(struct waiters *w, bool all);

/* How many requests wait, in every line. */
size_t waiters_count(const struct waiters *w);

#endif
