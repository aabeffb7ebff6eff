/*
 * --import-from: moving from the SQLite store to PostgreSQL. Copies the
 * leases of the SQLite store in cfg->import_from into cfg's database,
 * with their owners, tokens and expiries and the token floor, under a
 * quarantine as long as a restart's plus --max-clock-skew (the embedded
 * store may not have written its last renewals, and the two hosts' clocks
 * differ): holders may still renew, nobody else takes them over before it
 * ends. The data directory is locked as a start locks it, so not while
 * its leased runs. Returns 0, or -1 with errmsg (len bytes) naming the
 * flag.
 */
#ifndef LEASED_IMPORT_H
#define LEASED_IMPORT_H

#include <stddef.h>

#include "config.h"

int import_sqlite(const struct config *cfg, char *errmsg, size_t len);

#endif
