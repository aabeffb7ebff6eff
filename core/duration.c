/* Durations as flags give them (see duration.h). */
#include "duration.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define NS_PER_MS INT64_C(1000000)
#define DURATION_MAX_NS (INT64_C(3600000) * DURATION_MAX_HOURS * NS_PER_MS)

int duration_parse(const char *text, int64_t *ns)
{
    static const struct {
        const char *unit;
        int64_t ns;
    } units[] = {{"ms", NS_PER_MS},
                 {"s", 1000 * NS_PER_MS},
                 {"m", 60 * 1000 * NS_PER_MS},
                 {"h", 3600 * 1000 * NS_PER_MS}};
    const char *p = text;
    int64_t total = 0;
    if (*p == '\0')
        return -1;
    while (*p != '\0') {
        if (*p < '0' || *p > '9')
            return -1;
        errno = 0;
        char *end;
        unsigned long long n = strtoull(p, &end, 10);
        if (errno != 0 || n > 100000000)
            return -1;
        size_t i;
        for (i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
            size_t ul = strlen(units[i].unit);
            /* "m" must not match the start of "ms". */
            if (strncmp(end, units[i].unit, ul) == 0 &&
                !(ul == 1 && end[0] == 'm' && end[1] == 's'))
                break;
        }
        if (i == sizeof(units) / sizeof(units[0]))
            return -1;
        /* Checked before multiplying: 10^8 hours overflow int64_t. */
        if (n > (unsigned long long)(DURATION_MAX_NS / units[i].ns))
            return -1;
        total += (int64_t)n * units[i].ns;
        if (total > DURATION_MAX_NS)
            return -1;
        p = end + strlen(units[i].unit);
    }
    *ns = total;
    return 0;
}
