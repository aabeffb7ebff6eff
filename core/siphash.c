/* SipHash-2-4 (see siphash.h), from the paper's description. */
#include "siphash.h"

#include <sys/random.h>
#include <time.h>

#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))

static void sip_rounds(uint64_t v[4], int n)
{
    for (int i = 0; i < n; i++) {
        v[0] += v[1];
        v[1] = ROTL(v[1], 13) ^ v[0];
        v[0] = ROTL(v[0], 32);
        v[2] += v[3];
        v[3] = ROTL(v[3], 16) ^ v[2];
        v[0] += v[3];
        v[3] = ROTL(v[3], 21) ^ v[0];
        v[2] += v[1];
        v[1] = ROTL(v[1], 17) ^ v[2];
        v[2] = ROTL(v[2], 32);
    }
}

/* n (at most 8) bytes at p as a little-endian word. */
static uint64_t load_le(const unsigned char *p, size_t n)
{
    uint64_t w = 0;
    for (size_t i = 0; i < n; i++)
        w |= (uint64_t)p[i] << (8 * i);
    return w;
}

uint64_t siphash24(const struct siphash_key *key, const void *data,
                   size_t len)
{
    const unsigned char *p = data;
    uint64_t v[4] = {key->k0 ^ UINT64_C(0x736f6d6570736575),
                     key->k1 ^ UINT64_C(0x646f72616e646f6d),
                     key->k0 ^ UINT64_C(0x6c7967656e657261),
                     key->k1 ^ UINT64_C(0x7465646279746573)};
    size_t whole = len - len % 8;
    for (size_t i = 0; i < whole; i += 8) {
        uint64_t m = load_le(p + i, 8);
        v[3] ^= m;
        sip_rounds(v, 2);
        v[0] ^= m;
    }
    uint64_t last = (uint64_t)(len & 0xff) << 56;
    if (len % 8 != 0)
        last |= load_le(p + whole, len % 8);
    v[3] ^= last;
    sip_rounds(v, 2);
    v[0] ^= last;
    v[2] ^= 0xff;
    sip_rounds(v, 4);
    return v[0] ^ v[1] ^ v[2] ^ v[3];
}

void siphash_random_key(struct siphash_key *key)
{
    uint64_t k[2];
    if (getrandom(k, sizeof(k), 0) != (ssize_t)sizeof(k)) {
        /* No getrandom (an old kernel, a strict seccomp filter): the
         * time and where the stack is, which a remote client cannot
         * see either. */
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        k[0] = (uint64_t)ts.tv_nsec * UINT64_C(0x9e3779b97f4a7c15) ^
               (uint64_t)(uintptr_t)&ts;
        k[1] = (uint64_t)ts.tv_sec ^ (uint64_t)(uintptr_t)key;
    }
    key->k0 = k[0];
    key->k1 = k[1];
}
