/*
 * A function that fails with a message writes it into its caller's
 * buffer (errmsg, len bytes, always NUL-terminated, cut if too long) and
 * returns its error code. errmsg_fail() does both in one statement, so
 * that a failure reads `return errmsg_fail(CODE, errmsg, len, ...)`.
 * Most files write `snprintf(errmsg, len, ...)` and then return, which
 * comes to the same; new code may use either.
 */
#ifndef LEASED_ERRMSG_H
#define LEASED_ERRMSG_H

#include <stddef.h>

__attribute__((format(printf, 4, 5))) int
errmsg_fail(int code, char *errmsg, size_t len, const char *fmt, ...);

#endif
