/*
 * SipHash-2-4 (Aumasson and Bernstein, "SipHash: a fast short-input
 * PRF"): a keyed 64-bit hash of short strings, for hash tables whose keys
 * a client chooses. Without the key, nobody can pick keys that pile into
 * one chain.
 */
#ifndef LEASED_SIPHASH_H
#define LEASED_SIPHASH_H

#include <stddef.h>
#include <stdint.h>

/* k0, k1: the key's bytes 0-7 and 8-15, little-endian. */
struct siphash_key {
    uint64_t k0, k1;
};

/* A key from the kernel's random source (getrandom). */
void siphash_random_key(struct siphash_key *key);

uint64_t siphash24(const struct siphash_key *key, const void *data,
                   size_t len);

#endif
