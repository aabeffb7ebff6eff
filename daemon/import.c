/* --import-from (see import.h). */
#include "import.h"

#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "datadir.h"
#include "engine.h"
#include "log.h"
#include "mode.h"
#include "postgres.h"
#include "store.h"

struct rows {
    struct lease_row *v;
    size_t n, cap;
};

static char *copy_bytes(const char *p, size_t n)
{
    char *c = malloc(n > 0 ? n : 1);
    if (c != NULL)
        memcpy(c, p, n);
    return c;
}

static int add_row(void *arg, const struct lease_row *row)
{
    struct rows *rows = arg;
    if (rows->n == rows->cap) {
        size_t cap = rows->cap > 0 ? 2 * rows->cap : 1024;
        struct lease_row *v = realloc(rows->v, cap * sizeof(*v));
        if (v == NULL)
            return STORE_ENOMEM;
        rows->v = v;
        rows->cap = cap;
    }
    struct lease_row *r = &rows->v[rows->n];
    *r = *row;
    r->session = copy_bytes(row->session, row->session_len);
    r->owner = copy_bytes(row->owner, row->owner_len);
    if (r->session == NULL || r->owner == NULL) {
        free((char *)r->session);
        free((char *)r->owner);
        return STORE_ENOMEM;
    }
    rows->n++;
    return 0;
}

int import_sqlite(const struct config *cfg, char *errmsg, size_t len)
{
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/leased.db", cfg->import_from);
    if (access(path, R_OK) != 0) {
        snprintf(errmsg, len, "--import-from %s: no leased.db there (%s)",
                 cfg->import_from, strerror(errno));
        return -1;
    }
    struct pgstore *db = NULL;
    if (mode_shared_connect(cfg, &db, 1, errmsg, len) != 0)
        return -1;
    struct store *store = NULL;
    char why[400];
    struct rows rows = {0};
    uint64_t floor = 0;
    int64_t quarantine_ttl = 0;
    int rc = -1;
    /* Locked as a start would lock it: not while its leased runs. */
    int lock_fd = datadir_lock(cfg->import_from, why, sizeof(why));
    if (lock_fd < 0 || store_open(path, DATADIR_BUSY_TIMEOUT_MS, &store, why,
                                  sizeof(why)) != 0)
        snprintf(errmsg, len, "--import-from %s: %s", cfg->import_from, why);
    else if (store_load(store, add_row, &rows, &floor) != STORE_OK ||
             store_get_meta(store, "quarantine_ttl_ns", &quarantine_ttl) !=
                 STORE_OK)
        snprintf(errmsg, len, "--import-from %s: %s", cfg->import_from,
                 store_errmsg(store));
    else if (pgstore_import(db, rows.v, rows.n, floor,
                            (quarantine_ttl > cfg->ttl_ns ? quarantine_ttl
                                                          : cfg->ttl_ns) +
                                cfg->max_skew_ns) != STORE_OK)
        snprintf(errmsg, len, "--postgres: %s", pgstore_errmsg(db));
    else
        rc = 0;
    if (rc == 0)
        log_info("imported", "from=%s leases=%zu token_floor=%llu",
                 cfg->import_from, rows.n, (unsigned long long)floor);
    for (size_t i = 0; i < rows.n; i++) {
        free((char *)rows.v[i].session);
        free((char *)rows.v[i].owner);
    }
    free(rows.v);
    store_close(store);
    if (lock_fd >= 0)
        close(lock_fd);
    pgstore_close(db);
    return rc;
}
