#include "errmsg.h"

#include <stdarg.h>
#include <stdio.h>

int errmsg_fail(int code, char *errmsg, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(errmsg, len, fmt, ap);
    va_end(ap);
    return code;
}
