#include "errmsg.h"

#include <stdarg.h>
#include <stdio.h>

int errmsg_vfail(int code, char *errmsg, size_t len, const char *fmt,
                 va_list ap)
{
    vsnprintf(errmsg, len, fmt, ap);
    return code;
}

int errmsg_fail(int code, char *errmsg, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    errmsg_vfail(code, errmsg, len, fmt, ap);
    va_end(ap);
    return code;
}
