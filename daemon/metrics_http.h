/*
 * The /metrics endpoint (--metrics-listen): libmicrohttpd on a thread of
 * its own serves GET /metrics with metrics_render(); anything else gets
 * 404 or 405.
 */
#ifndef LEASED_METRICS_HTTP_H
#define LEASED_METRICS_HTTP_H

#include <stddef.h>

struct metrics_http;

/* Listens on addr (HOST:PORT, a numeric address or localhost; port 0 picks
 * one) and logs `metrics_listening addr=HOST:PORT`. Returns NULL with
 * errmsg set on failure. */
struct metrics_http *metrics_http_start(const char *addr, char *errmsg,
                                        size_t len);

/* Stops serving. Accepts NULL. */
void metrics_http_stop(struct metrics_http *m);

#endif
