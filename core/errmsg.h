/*
 * The one way a function that fails with a message says why: it writes
 * the message into the caller's buffer (errmsg, len bytes, always
 * NUL-terminated, cut if too long) and returns the caller's error code,
 * so that a failure reads `return errmsg_fail(CODE, errmsg, len, ...)`.
 */
#ifndef LEASED_ERRMSG_H
#define LEASED_ERRMSG_H

#include <stddef.h>

__attribute__((format(printf, 4, 5))) int
errmsg_fail(int code, char *errmsg, size_t len, const char *fmt, ...);

#endif
