/*
 * A function that fails with a message writes it into its caller's
 * buffer (errmsg, len bytes, always NUL-terminated, cut if too long) and
 * returns its error code. errmsg_fail() does both in one statement, so
 * that a failure reads `return errmsg_fail(CODE, errmsg, len, ...)`;
 * a file whose messages go to a buffer of its own (a store's, a thread's)
 * wraps errmsg_vfail() once. Most files write `snprintf(errmsg, len,
 * ...)` and then return, which comes to the same.
 */
#ifndef LEASED_ERRMSG_H
#define LEASED_ERRMSG_H

#include <stdarg.h>
#include <stddef.h>

__attribute__((format(printf, 4, 5))) int
errmsg_fail(int code, char *errmsg, size_t len, const char *fmt, ...);

/* errmsg_fail() with the arguments in ap. */
__attribute__((format(printf, 4, 0))) int
errmsg_vfail(int code, char *errmsg, size_t len, const char *fmt, va_list ap);

#endif
