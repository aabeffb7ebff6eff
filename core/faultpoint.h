/*
 * Fault points: hooks for the fault campaign (tests/faults), compiled in
 * only when LEASED_FAULT_POINTS is defined, which only the test binary
 * `leased-faults` is. In leased itself both macros are constants, and
 * the code around them compiles to what it would be without them.
 *
 *   FAULT_POINT(name)   a named place where the campaign may kill the
 *                       process (SIGKILL), e.g. between a commit and the
 *                       reply: LEASED_FAULTS="kill=NAME:PROBABILITY".
 *   FAULT_BROKEN(name)  true when the campaign asked for a deliberately
 *                       broken behaviour (a negative control that the
 *                       campaign's checker must catch):
 *                       LEASED_FAULTS="broken=NAME".
 *
 * LEASED_FAULTS holds blank-separated words; the implementation is in
 * tests/faults/faultpoint.c.
 */
#ifndef LEASED_FAULTPOINT_H
#define LEASED_FAULTPOINT_H

#include <stdbool.h>

#ifdef LEASED_FAULT_POINTS
void faultpoint_hit(const char *name);
bool faultpoint_broken(const char *name);
#define FAULT_POINT(name) faultpoint_hit(name)
#define FAULT_BROKEN(name) faultpoint_broken(name)
#else
#define FAULT_POINT(name) ((void)0)
#define FAULT_BROKEN(name) false
#endif

#endif
