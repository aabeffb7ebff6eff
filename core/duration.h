/*
 * Durations as leased's flags and leasectl take them: digits, maybe a
 * decimal point and up to 9 digits more, and a unit (ms, s, m, h),
 * repeated ("1m30s", "1.5s"), up to 1000 hours; below a nanosecond is
 * dropped.
 */
#ifndef LEASED_DURATION_H
#define LEASED_DURATION_H

#include <stdint.h>

#define DURATION_MAX_HOURS 1000 /* the longest duration taken */

/* Returns 0 and sets *ns, or -1 (not a duration, or over the most). */
int duration_parse(const char *text, int64_t *ns);

#endif
