/*
 * What every fuzz target defines: libFuzzer's entry point. libFuzzer's
 * own main() calls it in the fuzzer build (-Dfuzzer=true); replay.c's
 * main() calls it in every other build, once per corpus file.
 */
#ifndef LEASED_FUZZ_H
#define LEASED_FUZZ_H

#include <stddef.h>
#include <stdint.h>

/* Runs one input (data is borrowed; size bytes). Aborts, or trips a
 * sanitizer, on a finding; returns 0 otherwise. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#endif
