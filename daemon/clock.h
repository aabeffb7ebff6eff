/*
 * The daemon's clock: wall time at start plus CLOCK_MONOTONIC elapsed.
 *
 * Expiry is decided on this clock, so a step of the wall clock (NTP, an
 * operator, a VM restore) cannot shorten or stretch a lease while the
 * daemon runs; it only shows on the wire and on disk as an offset.
 */
#ifndef LEASED_CLOCK_H
#define LEASED_CLOCK_H

#include <stdint.h>

struct clock {
    int64_t wall0_ns; /* CLOCK_REALTIME at clock_init */
    int64_t mono0_ns; /* CLOCK_MONOTONIC at clock_init */
    int64_t offset_ns; /* wall - monotonic at the last clock_step_ns */
};

/* Starts the clock now. */
void clock_init(struct clock *c);

/* Nanoseconds since the Unix epoch on this clock: never goes back. */
int64_t clock_now_ns(const struct clock *c);

/* How far the wall clock moved against the monotonic one since the last
 * call (or clock_init): 0 while nobody sets the time; NTP slews show as a
 * few microseconds, a step as its size. */
int64_t clock_step_ns(struct clock *c);

/* The raw clocks, in nanoseconds. */
int64_t clock_mono_ns(void);
int64_t clock_wall_ns(void);

#endif
