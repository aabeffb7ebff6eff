/*
 * Logging: one line per event on stderr,
 *   ts=2026-11-30T14:37:00.123Z level=info msg=listening addr=127.0.0.1:7443
 * Thread-safe. Never log secrets or lease owners' payloads beyond ids.
 */
#ifndef LEASED_LOG_H
#define LEASED_LOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum log_level { LOG_DEBUG, LOG_INFO, LOG_WARN, LOG_ERROR };

/* Lines below level are dropped. */
void log_set_level(enum log_level level);

/* Parses "debug", "info", "warn" or "error". Returns 0 or -1. */
int log_parse_level(const char *name, enum log_level *level);

/* Writes one line: msg is one word (no spaces), kv_fmt a printf format of
 * further key=value pairs (quote values that may hold spaces), or NULL. */
void log_write(enum log_level level, const char *msg, const char *kv_fmt,
               ...) __attribute__((format(printf, 3, 4)));

/* Writes wall_ns (ns since the epoch) as the lines' timestamps are
 * written, 2026-11-30T14:37:00.123Z (milliseconds, rounded down), into
 * buf (LOG_TIME_LEN bytes). */
#define LOG_TIME_LEN 80
void log_format_time(int64_t wall_ns, char *buf);

/* Copies in_len bytes of in into out (len bytes, NUL-terminated) so that
 * they fit inside a quoted value: '"' becomes '\'', control characters
 * spaces. */
void log_quotable(char *out, size_t len, const char *in, size_t in_len);

/* At most `burst` lines a second (one when burst is 0) for an event that
 * can repeat for every batch or call (storage failing, refused calls):
 * log_limit_pass() says whether to write this one, and *held how many
 * were not written since the last that was. Not thread-safe: one per
 * thread that logs the event. */
struct log_limit {
    unsigned burst;
    unsigned used;   /* lines written in the current second */
    int64_t next_ns; /* when it ends */
    uint64_t held;
};

bool log_limit_pass(struct log_limit *l, int64_t now_ns, uint64_t *held);

/* Sends gRPC's own log lines through log_write. */
void log_route_grpc(void);

/* Holds back the first error line gRPC logs on this thread while a hold
 * is on, for a caller that turns a gRPC failure into a reason of its own
 * (gRPC's error dumps are long). Only that one line, only on this
 * thread: later lines and other threads' lines are logged as usual.
 * Needs log_route_grpc(). */
struct log_hold {
    bool held;          /* a line was held back: the fields below are it */
    char file[64];      /* gRPC's source file, base name */
    int line;
    char message[4096]; /* gRPC's message, truncated */
};

/* Starts holding into h (borrowed until log_hold_end; reset here). At
 * most one hold per thread at a time. */
void log_hold_begin(struct log_hold *h);

/* Stops holding on this thread; h keeps what it held. */
void log_hold_end(void);

/* Logs the held line, if any, as it would have been logged, and clears
 * it: for a caller that found no reason of its own in it. */
void log_hold_flush(struct log_hold *h);

#define log_debug(...) log_write(LOG_DEBUG, __VA_ARGS__)
#define log_info(...) log_write(LOG_INFO, __VA_ARGS__)
#define log_warn(...) log_write(LOG_WARN, __VA_ARGS__)
#define log_error(...) log_write(LOG_ERROR, __VA_ARGS__)

#endif
