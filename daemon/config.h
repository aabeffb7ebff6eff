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
/* The most --postgres-connections takes: main.c holds it to the size of
 * the replica's array of connections (REPLICA_MAX_CONNECTIONS). */
#define CONFIG_MAX_PG_CONNECTIONS 16

struct config {
    /* Borrowed from argv or the environment (or static defaults). */
    const char *listen[CONFIG_MAX_LISTEN];
    size_t nlisten;
    const char *data_dir;
    int64_t ttl_ns;
    enum log_level log_level;
    size_t max_pending; /* requests queued or in progress at once */
    size_t watch_history; /* events kept for Watch (history.h) */
    const char *tls_cert, *tls_key, *tls_client_ca; /* NULL: not given */
    bool insecure; /* plaintext allowed on non-loopback addresses */
    const char *auth_token_file;
    const char *admin_token_file; /* the admin service's own; NULL: none */
    const char *policy_file; /* policy.h; NULL: everyone may do anything */
    unsigned socket_mode;
    int64_t drain_ns; /* on SIGTERM, calls in progress get this long */
    const char *metrics_listen; /* HOST:PORT of /metrics; NULL: off */
    uint64_t raise_token_floor; /* at start, tokens to at least this; 0 no */
    const char *postgres; /* libpq conninfo; NULL: SQLite in data_dir */
    int64_t max_skew_ns;  /* between database hosts' clocks */
    int64_t pg_timeout_ns; /* of one round trip to the database */
    int pg_connections;    /* to the database (1..CONFIG_MAX_PG_CONNECTIONS),
                              each up to two batches in flight */
    const char *import_from; /* a SQLite data directory to copy; or NULL */
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

/* What an option takes, and so how its value is read and stored. */
enum config_kind {
    CONFIG_ADDRS,     /* listen[] and nlisten: HOST:PORT or unix:/PATH,
                         repeatable; the variable is comma-separated */
    CONFIG_HOSTPORT,  /* const char *: HOST:PORT */
    CONFIG_FILE,      /* const char *: a file name, not empty */
    CONFIG_DIR,       /* const char *: a directory, not empty */
    CONFIG_TEXT,      /* const char *: any text, not empty */
    CONFIG_SWITCH,    /* bool: the flag takes no value; the variable is
                         1, true, 0 or false */
    CONFIG_INT,       /* int: decimal, min..max */
    CONFIG_SIZE,      /* size_t: decimal, min..max */
    CONFIG_U64,       /* uint64_t: decimal, min..max */
    CONFIG_DURATION,  /* int64_t, ns: min..max as duration_parse() reads
                         it, or "0" if zero_is_never */
    CONFIG_MODE,      /* unsigned: octal, min..max */
    CONFIG_LOG_LEVEL, /* enum log_level: debug, info, warn or error */
};

/* One option. config_options[] has one row for each, and config_parse()
 * reads argv, the environment, the defaults and writes --help from the
 * rows alone; docs/operations.md's flag tables list the same options
 * (tests/unit/test_config.c holds them to it). All strings static. */
struct config_option {
    const char *name;     /* the flag, without "--" */
    const char *env;      /* its environment variable */
    enum config_kind kind;
    size_t offset, size;  /* of the field it fills in struct config */
    int64_t min, max;     /* the range of numbers; of durations, in ns */
    bool zero_is_never;   /* durations: "0" is taken too, for never */
    const char *def;      /* the default, read as a value would be;
                             NULL: the field stays 0 (NULL, false) */
    const char *arg;      /* the value's name in --help; NULL: none */
    const char *help;     /* one line for --help, which wraps it */
    const char *example;  /* ends the message about a bad value; or NULL */
    const char *section;  /* --help: a heading before the row, or NULL */
};

extern const struct config_option config_options[];
extern const size_t config_noptions;

#endif
