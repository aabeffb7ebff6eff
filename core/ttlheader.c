/* The TTL said with each grant (see ttlheader.h). */
#include "ttlheader.h"

#include <stdio.h>

#define MS INT64_C(1000000)
#define DIGITS_MAX 12 /* 10^12 ms is over 30 years */

size_t ttlheader_format(int64_t ttl_ns, char *buf)
{
    int64_t ms = ttl_ns / MS > 0 ? ttl_ns / MS : 1;
    return (size_t)snprintf(buf, TTLHEADER_LEN, "%lld", (long long)ms);
}

int ttlheader_parse(const char *value, size_t len, int64_t *ttl_ns)
{
    if (len == 0 || len > DIGITS_MAX)
        return -1;
    int64_t ms = 0;
    for (size_t i = 0; i < len; i++) {
        if (value[i] < '0' || value[i] > '9')
            return -1;
        ms = ms * 10 + (value[i] - '0');
    }
    if (ms == 0)
        return -1;
    *ttl_ns = ms * MS;
    return 0;
}
