/*
 * A log-linear latency histogram: 32 buckets per power of two (about 3 %
 * resolution), nanoseconds up to about 18 minutes. Not thread-safe: one
 * per thread, merged at the end.
 */
#ifndef LEASEBENCH_HIST_H
#define LEASEBENCH_HIST_H

#include <stdint.h>

#define HIST_BUCKETS 1216

struct hist {
    uint64_t count;
    uint64_t buckets[HIST_BUCKETS];
};

void hist_add(struct hist *h, int64_t ns);
void hist_merge(struct hist *into, const struct hist *from);

/* The value at quantile q (0..1), in nanoseconds (the bucket's upper
 * bound); 0 for an empty histogram. */
int64_t hist_quantile(const struct hist *h, double q);

#endif
