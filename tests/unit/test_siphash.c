/* The engine's keyed hash: SipHash-2-4 against the reference vectors of
 * the paper's code, and random keys. */
#include <stdint.h>

#include "check.h"
#include "siphash.h"

TEST(reference_vectors)
{
    /* Key 00 01 .. 0f, message 00 01 .. n-1. */
    static const struct {
        size_t n;
        uint64_t want;
    } v[] = {
        {0, UINT64_C(0x726fdb47dd0e0e31)}, {1, UINT64_C(0x74f839c593dc67fd)},
        {2, UINT64_C(0x0d6c8009d9a94f5a)}, {3, UINT64_C(0x85676696d7fb7e2d)},
        {7, UINT64_C(0xab0200f58b01d137)}, {8, UINT64_C(0x93f5f5799a932462)},
        {15, UINT64_C(0xa129ca6149be45e5)},
        {16, UINT64_C(0x3f2acc7f57c29bdb)},
    };
    const struct siphash_key key = {UINT64_C(0x0706050403020100),
                                    UINT64_C(0x0f0e0d0c0b0a0908)};
    unsigned char msg[16];
    for (size_t i = 0; i < sizeof(msg); i++)
        msg[i] = (unsigned char)i;
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++)
        CHECK_EQ_U64(siphash24(&key, msg, v[i].n), v[i].want);
}

TEST(random_keys_differ_and_change_the_hash)
{
    struct siphash_key a, b;
    siphash_random_key(&a);
    siphash_random_key(&b);
    CHECK(a.k0 != b.k0 || a.k1 != b.k1);
    CHECK(siphash24(&a, "session-1", 9) != siphash24(&b, "session-1", 9));
}

CHECK_MAIN(reference_vectors, random_keys_differ_and_change_the_hash)
