/*
 * The two clocks, in nanoseconds since their epochs: the monotonic clock
 * (for intervals and deadlines) and the wall clock (for expiries, which
 * the wire carries as wall-clock timestamps). Any thread.
 */
#ifndef LEASED_NANOTIME_H
#define LEASED_NANOTIME_H

#include <stdint.h>
#include <time.h>

static inline int64_t nanotime_of(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static inline int64_t nanotime_mono(void)
{
    return nanotime_of(CLOCK_MONOTONIC);
}

/* The monotonic clock in milliseconds, for timeouts and backoffs. */
static inline int64_t nanotime_mono_ms(void)
{
    return nanotime_mono() / 1000000;
}

static inline int64_t nanotime_wall(void)
{
    return nanotime_of(CLOCK_REALTIME);
}

#endif
