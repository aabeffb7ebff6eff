/* The daemon's step-proof clock (see clock.h). */
#include "clock.h"

#include <time.h>

static int64_t read_ns(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t clock_mono_ns(void)
{
    return read_ns(CLOCK_MONOTONIC);
}

int64_t clock_wall_ns(void)
{
    return read_ns(CLOCK_REALTIME);
}

void clock_init(struct clock *c)
{
    c->wall0_ns = clock_wall_ns();
    c->mono0_ns = clock_mono_ns();
    c->offset_ns = c->wall0_ns - c->mono0_ns;
}

int64_t clock_step_ns(struct clock *c)
{
    int64_t offset = clock_wall_ns() - clock_mono_ns();
    int64_t step = offset - c->offset_ns;
    c->offset_ns = offset;
    return step;
}

int64_t clock_now_ns(const struct clock *c)
{
    return c->wall0_ns + (clock_mono_ns() - c->mono0_ns);
}
