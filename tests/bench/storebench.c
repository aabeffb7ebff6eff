/*
 * storebench: what the SQLite store costs per change, without gRPC or the
 * loop: the lease engine decides batches of renewals over --rows held
 * leases, store_apply() commits each batch, and store_sync() syncs it when
 * --sync is given. Prints changes/s, µs per change (wall and CPU) and µs
 * per commit.
 *
 *   storebench [--rows 1024] [--batch 12] [--seconds 3] [--sync] DIR
 *
 * DIR gets a fresh database file (removed afterwards).
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine.h"
#include "store.h"

#define TTL_NS (30LL * 1000000000)

static int64_t now_ns(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void die(const char *what, struct store *s)
{
    fprintf(stderr, "storebench: %s: %s\n", what, s ? store_errmsg(s) : "");
    exit(1);
}

/* Commits the changes, then finishes them in the engine. */
static void commit(struct engine *e, struct store *s,
                   struct engine_change *chgs, size_t n, int sync)
{
    bool ok = store_apply(s, chgs, n) == STORE_OK;
    if (ok && sync && store_sync(s) != STORE_OK)
        ok = false;
    for (size_t i = n; i-- > 0;)
        engine_finish(e, &chgs[i], ok);
    if (!ok)
        die("commit", s);
}

int main(int argc, char **argv)
{
    static const struct option options[] = {
        {"rows", required_argument, NULL, 'r'},
        {"batch", required_argument, NULL, 'b'},
        {"seconds", required_argument, NULL, 's'},
        {"sync", no_argument, NULL, 'y'},
        {NULL, 0, NULL, 0}};
    size_t rows = 1024, batch = 12;
    double seconds = 3;
    int sync = 0, opt;
    while ((opt = getopt_long(argc, argv, "", options, NULL)) != -1) {
        switch (opt) {
        case 'r':
            rows = (size_t)atol(optarg);
            break;
        case 'b':
            batch = (size_t)atol(optarg);
            break;
        case 's':
            seconds = atof(optarg);
            break;
        case 'y':
            sync = 1;
            break;
        default:
            goto usage;
        }
    }
    if (optind != argc - 1 || rows == 0 || batch == 0 || seconds <= 0)
        goto usage;

    char path[4096];
    snprintf(path, sizeof(path), "%s/storebench-%d.db", argv[optind],
             (int)getpid());
    struct store *s;
    char errmsg[256];
    if (store_open(path, 1000, &s, errmsg, sizeof(errmsg)) != STORE_OK) {
        fprintf(stderr, "storebench: %s\n", errmsg);
        return 1;
    }
    struct siphash_key key;
    siphash_random_key(&key);
    struct engine *e = engine_create(TTL_NS, now_ns(CLOCK_REALTIME), &key);
    struct engine_change *chgs = calloc(batch, sizeof(*chgs));
    char (*names)[32] = calloc(rows, sizeof(*names));
    uint64_t *tokens = calloc(rows, sizeof(*tokens));
    if (e == NULL || chgs == NULL || names == NULL || tokens == NULL)
        die("out of memory", NULL);

    /* Acquire every row, a batch at a time. */
    size_t n = 0;
    for (size_t i = 0; i < rows; i++) {
        snprintf(names[i], sizeof(names[i]), "storebench-%zu", i);
        struct engine_grant g;
        if (engine_acquire(e, now_ns(CLOCK_REALTIME), names[i],
                           strlen(names[i]), "owner", 5, &g,
                           &chgs[n]) != ENGINE_OK)
            die("acquire", NULL);
        tokens[i] = g.token;
        if (++n == batch || i == rows - 1) {
            commit(e, s, chgs, n, 0);
            n = 0;
        }
    }

    /* Renew random rows, a batch at a time (a row at most once). */
    uint64_t changes = 0, commits = 0;
    unsigned seed = 1;
    int64_t t0 = now_ns(CLOCK_MONOTONIC), c0 = now_ns(CLOCK_PROCESS_CPUTIME_ID);
    int64_t until = t0 + (int64_t)(seconds * 1e9);
    while (now_ns(CLOCK_MONOTONIC) < until) {
        int64_t now = now_ns(CLOCK_REALTIME);
        size_t first = (size_t)rand_r(&seed) % rows;
        for (n = 0; n < batch && n < rows; n++) {
            size_t i = (first + n * 7919) % rows;
            struct engine_grant g;
            if (engine_renew(e, now, names[i], strlen(names[i]), "owner", 5,
                             tokens[i], &g, &chgs[n]) != ENGINE_OK)
                die("renew", NULL);
        }
        commit(e, s, chgs, n, sync);
        changes += n;
        commits++;
    }
    double wall = (double)(now_ns(CLOCK_MONOTONIC) - t0) / 1e3;
    double cpu = (double)(now_ns(CLOCK_PROCESS_CPUTIME_ID) - c0) / 1e3;
    printf("rows %zu  batch %zu  sync %s: %.0f changes/s  %.1f us/change "
           "(cpu %.1f)  %.0f us/commit\n",
           rows, batch, sync ? "yes" : "no", (double)changes / wall * 1e6,
           wall / (double)changes, cpu / (double)changes,
           wall / (double)commits);

    store_close(s);
    engine_destroy(e);
    free(chgs);
    free(names);
    free(tokens);
    char extra[4200];
    unlink(path);
    snprintf(extra, sizeof(extra), "%s-wal", path);
    unlink(extra);
    snprintf(extra, sizeof(extra), "%s-shm", path);
    unlink(extra);
    return 0;
usage:
    fputs("Usage: storebench [--rows N] [--batch N] [--seconds S] [--sync] "
          "DIR\n", stderr);
    return 2;
}
