/*
 * leased's configuration: flags, each with a LEASED_… environment
 * variable; a flag wins over its variable. Defaults work with no flags.
 */
#ifndef LEASED_CONFIG_H
#define LEASED_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "log.h"

#define CONFIG_MAX_LISTEN 16

struct config {
    /* Borrowed from argv or the environment (or static defaults). */
    const char *listen[CONFIG_MAX_LISTEN];
    size_t nlisten;
    const char *data_dir;
    int64_t ttl_ns;
    enum log_level log_level;
    size_t max_pending; /* requests queued or in progress at once */
    char listen_env[1024]; /* a copy of LEASED_LISTEN, split at commas */
};

enum config_result {
    CONFIG_ERROR = -1, /* errmsg says why; exit 2 */
    CONFIG_OK = 0,     /* run */
    CONFIG_EXIT = 1,   /* --help or --version was printed; exit 0 */
};

/* Fills *cfg from argv, then the environment for what argv did not set,
 * then defaults. Prints --help and --version to stdout. */
int config_parse(struct config *cfg, int argc, char **argv, char *errmsg,
                 size_t errmsg_len);

/* Parses a duration: digits and a unit (ms, s, m, h), repeated ("1m30s").
 * Returns 0 and sets *ns, or -1. */
int config_parse_duration(const char *text, int64_t *ns);

#endif
