/* Durations as flags give them (see duration.h). */
#include "duration.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define NS_PER_MS INT64_C(1000000)
#define DURATION_MAX_NS (INT64_C(3600000) * DURATION_MAX_HOURS * NS_PER_MS)
#define FRACTION_DIGITS 9 /* the most after the point: 1 ns of a second */

/* Reads the digits after a decimal point at *p (at least one, at most
 * FRACTION_DIGITS) as a fraction of 10^FRACTION_DIGITS; -1 if none or
 * too many. */
static int64_t fraction(const char **p)
{
    int64_t f = 0;
    int digits = 0;
    while (**p >= '0' && **p <= '9') {
        if (++digits > FRACTION_DIGITS)
            return -1;
        f = f * 10 + (**p - '0');
        (*p)++;
    }
    if (digits == 0)
        return -1;
    for (; digits < FRACTION_DIGITS; digits++)
        f *= 10;
    return f;
}

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
        const char *u = end; /* the unit, after any fraction */
        int64_t frac = 0;    /* of 10^FRACTION_DIGITS */
        if (*u == '.') {
            u++;
            frac = fraction(&u);
            if (frac < 0)
                return -1;
        }
        size_t i;
        for (i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
            size_t ul = strlen(units[i].unit);
            /* "m" must not match the start of "ms". */
            if (strncmp(u, units[i].unit, ul) == 0 &&
                !(ul == 1 && u[0] == 'm' && u[1] == 's'))
                break;
        }
        if (i == sizeof(units) / sizeof(units[0]))
            return -1;
        /* Checked before multiplying: 10^8 hours overflow int64_t. */
        if (n > (unsigned long long)(DURATION_MAX_NS / units[i].ns))
            return -1;
        /* The fraction's part, unit * frac / 10^9, in two steps (an
         * hour's ns times 10^9 would overflow); what is below a
         * nanosecond is dropped. */
        const int64_t per = INT64_C(1000000000);
        total += (int64_t)n * units[i].ns +
                 (units[i].ns / per) * frac +
                 (units[i].ns % per) * frac / per;
        if (total > DURATION_MAX_NS)
            return -1;
        p = u + strlen(units[i].unit);
    }
    *ns = total;
    return 0;
}
