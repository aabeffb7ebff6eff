/*
 * leased's configuration: flags, each with a LEASED_… environment
 * variable; a flag wins over its variable. Defaults work with no flags.
 */
#ifndef LEASED_CONFIG_H
#define LEASED_CONFIG_H

#include <stdbool.h>
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
    const char *tls_cert, *tls_key, *tls_client_ca; /* NULL: not given */
    bool insecure; /* plaintext allowed on non-loopback addresses */
    const char *auth_token_file;
    const char *admin_token_file; /* the admin service's own; NULL: none */
    unsigned socket_mode;
    int64_t drain_ns; /* on SIGTERM, calls in progress get this long */
    const char *metrics_listen; /* HOST:PORT of /metrics; NULL: off */
    uint64_t raise_token_floor; /* at start, tokens to at least this; 0 no */
    struct config_limits {
        int max_streams;        /* concurrent calls per connection */
        int max_metadata_bytes; /* of a call's headers */
        int64_t keepalive_min_ns; /* pings more often count as strikes */
        int max_ping_strikes;     /* then the connection is closed */
        int64_t handshake_timeout_ns;
        int64_t max_idle_ns; /* close connections idle this long; 0 never */
        int64_t max_age_ns;  /* close connections this old; 0 never */
    } limits;
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

#endif
