/* The daemon's step-proof clock (see clock.h). */
#include "clock.h"

#include "nanotime.h"

int64_t clock_mono_ns(void)
{
    return nanotime_mono();
}

int64_t clock_wall_ns(void)
{
    return nanotime_wall();
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
