/*
 * The answers of admin calls (struct admin_result, request.h), built the
 * same way whichever store the rows come from.
 */
#ifndef LEASED_ADMIN_H
#define LEASED_ADMIN_H

#include <stdbool.h>
#include <stddef.h>

#include "engine.h"
#include "request.h"

/* A new answer with room for cap leases; NULL when out of memory. */
struct admin_result *admin_result_new(size_t cap);

/* Appends a copy of row, live or not; -1 when out of memory. */
int admin_result_add(struct admin_result *a, const struct lease_row *row,
                     bool live);

/* Adds a listed row to List request r's page while it has room
 * (r->page_size), unless r->list_rule hides it (policy.h); the row after
 * a full page makes the page's next-page token instead (the session of
 * the last row kept) and returns 1. When rows were hidden, the page ends
 * short, with the (page_size + 1)th row looked at as its token. Returns
 * 0, or -1 when out of memory. Ask for page_size + 1 rows. */
int admin_page_add(struct request *r, const struct lease_row *row,
                   bool live);

#endif
