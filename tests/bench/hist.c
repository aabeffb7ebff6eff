/* Log-linear latency histogram (see hist.h). */
#include "hist.h"

static int bucket_of(uint64_t v)
{
    if (v < 32)
        return (int)v;
    int e = 63 - __builtin_clzll(v); /* >= 5 */
    int b = (e - 4) * 32 + (int)((v >> (e - 5)) & 31);
    return b < HIST_BUCKETS ? b : HIST_BUCKETS - 1;
}

/* The largest value that falls in bucket b. */
static uint64_t upper_of(int b)
{
    if (b < 32)
        return (uint64_t)b;
    int e = b / 32 + 4;
    uint64_t sub = (uint64_t)(b % 32) | 32;
    return ((sub + 1) << (e - 5)) - 1;
}

void hist_add(struct hist *h, int64_t ns)
{
    h->buckets[bucket_of(ns > 0 ? (uint64_t)ns : 0)]++;
    h->count++;
}

void hist_merge(struct hist *into, const struct hist *from)
{
    for (int i = 0; i < HIST_BUCKETS; i++)
        into->buckets[i] += from->buckets[i];
    into->count += from->count;
}

int64_t hist_quantile(const struct hist *h, double q)
{
    if (h->count == 0)
        return 0;
    uint64_t rank = (uint64_t)(q * (double)h->count);
    if (rank >= h->count)
        rank = h->count - 1;
    uint64_t seen = 0;
    for (int i = 0; i < HIST_BUCKETS; i++) {
        seen += h->buckets[i];
        if (seen > rank)
            return (int64_t)upper_of(i);
    }
    return (int64_t)upper_of(HIST_BUCKETS - 1);
}
