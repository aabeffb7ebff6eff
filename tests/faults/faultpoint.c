/*
 * The fault points of `leased-faults` (see core/faultpoint.h):
 * LEASED_FAULTS is read once, at the first hook reached.
 *
 *   kill=NAME:P   at FAULT_POINT(NAME), SIGKILL with probability P (0..1)
 *   broken=NAME   FAULT_BROKEN(NAME) is true
 *
 * Not part of leased: only the test binary links it.
 */
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "faultpoint.h"

#define MAX_WORDS 16
#define NAME_MAX_LEN 64

static struct {
    char kill[MAX_WORDS][NAME_MAX_LEN];
    double kill_p[MAX_WORDS];
    size_t nkill;
    char broken[MAX_WORDS][NAME_MAX_LEN];
    size_t nbroken;
    uint64_t rng;
    pthread_mutex_t lock;
} fp = {.lock = PTHREAD_MUTEX_INITIALIZER};
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void parse(void)
{
    const char *env = getenv("LEASED_FAULTS");
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    fp.rng = ((uint64_t)getpid() << 32) ^ (uint64_t)ts.tv_nsec ^ 1;
    if (env == NULL)
        return;
    char buf[1024];
    snprintf(buf, sizeof(buf), "%s", env);
    char *save = NULL;
    for (char *w = strtok_r(buf, " \t", &save); w != NULL;
         w = strtok_r(NULL, " \t", &save)) {
        char *colon;
        if (strncmp(w, "kill=", 5) == 0 && fp.nkill < MAX_WORDS &&
            (colon = strchr(w, ':')) != NULL) {
            *colon = '\0';
            snprintf(fp.kill[fp.nkill], NAME_MAX_LEN, "%s", w + 5);
            fp.kill_p[fp.nkill++] = atof(colon + 1);
        } else if (strncmp(w, "broken=", 7) == 0 && fp.nbroken < MAX_WORDS) {
            snprintf(fp.broken[fp.nbroken++], NAME_MAX_LEN, "%s", w + 7);
        } else {
            fprintf(stderr, "leased-faults: ignoring LEASED_FAULTS word "
                            "\"%s\"\n", w);
        }
    }
    fprintf(stderr, "leased-faults: LEASED_FAULTS=\"%s\"\n", env);
}

/* xorshift64*: a uniform double in [0, 1). */
static double uniform(void)
{
    pthread_mutex_lock(&fp.lock);
    fp.rng ^= fp.rng >> 12;
    fp.rng ^= fp.rng << 25;
    fp.rng ^= fp.rng >> 27;
    uint64_t x = fp.rng * UINT64_C(2685821657736338717);
    pthread_mutex_unlock(&fp.lock);
    return (double)(x >> 11) / (double)(UINT64_C(1) << 53);
}

void faultpoint_hit(const char *name)
{
    pthread_once(&once, parse);
    for (size_t i = 0; i < fp.nkill; i++) {
        if (strcmp(fp.kill[i], name) == 0 && uniform() < fp.kill_p[i]) {
            static const char msg[] = "leased-faults: killed at a fault "
                                      "point\n";
            (void)!write(2, msg, sizeof(msg) - 1);
            raise(SIGKILL);
        }
    }
}

bool faultpoint_broken(const char *name)
{
    pthread_once(&once, parse);
    for (size_t i = 0; i < fp.nbroken; i++)
        if (strcmp(fp.broken[i], name) == 0)
            return true;
    return false;
}
