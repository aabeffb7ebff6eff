/*
 * Flags and LEASED_… environment variables (see config.h).
 *
 * Each option is declared once, as a row of config_options[]: its flag,
 * its variable, its kind, the field of struct config it fills, its
 * limits, its default, its help. Everything else is made from the rows:
 *  1. argv: getopt_long() over a long option per row;
 *  2. the environment: each row's variable, unless its flag was given;
 *  3. defaults: each row that neither gave a value gets its default,
 *     read like a value (so a default is checked as a value is);
 *  4. --help: each row's flag, help, variable and default.
 * set() is the one place a value is checked and stored, whatever its
 * source; check() then applies the rules between options. The kinds
 * carry the messages: a new option of an existing kind is one new row.
 */
#include "config.h"

#include <assert.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "addr.h"
#include "duration.h"
#include "errmsg.h"
#include "textwrap.h"
#include "version.h"

#define MS INT64_C(1000000)
#define HOUR (3600 * 1000 * MS)

/* Where a row's value goes: its field's offset and size (which set()
 * checks against the row's kind). */
#define FIELD(member)                                                      \
    .offset = offsetof(struct config, member),                             \
    .size = sizeof(((struct config *)NULL)->member)

/* In --help's order. */
const struct config_option config_options[] = {
    {.name = "listen", .env = "LEASED_LISTEN", .arg = "ADDR",
     .kind = CONFIG_ADDRS, FIELD(listen),
     .def = "127.0.0.1:7443",
     .help = "listen on ADDR: HOST:PORT or unix:/PATH; repeatable; port 0 "
             "picks a free port; other than loopback only with TLS (or "
             "--insecure)"},
    {.name = "data-dir", .env = "LEASED_DATA_DIR", .arg = "DIR",
     .kind = CONFIG_DIR, FIELD(data_dir),
     .def = "./leased-data",
     .help = "where the SQLite database and its lock file live; created "
             "if missing; not used with --postgres"},
    {.name = "ttl", .env = "LEASED_TTL", .arg = "DURATION",
     .kind = CONFIG_DURATION, FIELD(ttl_ns), .min = 100 * MS, .max = HOUR,
     .def = "30s", .example = "(e.g. 500ms, 30s, 1m)",
     .help = "lease lifetime, 100ms..1h, e.g. 500ms, 30s, 1m"},
    {.name = "log-level", .env = "LEASED_LOG_LEVEL", .arg = "LEVEL",
     .kind = CONFIG_LOG_LEVEL, FIELD(log_level),
     .def = "info",
     .help = "debug, info, warn or error"},
    {.name = "max-pending", .env = "LEASED_MAX_PENDING", .arg = "N",
     .kind = CONFIG_SIZE, FIELD(max_pending), .min = 1, .max = 10000000,
     .def = "65536",
     .help = "requests queued or in progress at once; more get "
             "RESOURCE_EXHAUSTED"},
    {.name = "watch-history", .env = "LEASED_WATCH_HISTORY", .arg = "N",
     .kind = CONFIG_SIZE, FIELD(watch_history), .min = 1, .max = 10000000,
     .def = "10000",
     .help = "changes of leases kept for Watch to resume from (in memory "
             "and in the store); a watcher further behind reads again"},
    {.name = "tls-cert", .env = "LEASED_TLS_CERT", .arg = "FILE",
     .kind = CONFIG_FILE, FIELD(tls_cert),
     .help = "PEM certificate chain: TLS 1.2+ on every TCP listener"},
    {.name = "tls-key", .env = "LEASED_TLS_KEY", .arg = "FILE",
     .kind = CONFIG_FILE, FIELD(tls_key),
     .help = "PEM private key of --tls-cert"},
    {.name = "tls-client-ca", .env = "LEASED_TLS_CLIENT_CA", .arg = "FILE",
     .kind = CONFIG_FILE, FIELD(tls_client_ca),
     .help = "PEM CA certificates: clients must present a certificate one "
             "of them signed (mutual TLS)"},
    {.name = "insecure", .env = "LEASED_INSECURE",
     .kind = CONFIG_SWITCH, FIELD(insecure),
     .help = "allow plaintext on non-loopback addresses (logged as a "
             "warning)"},
    {.name = "auth-token-file", .env = "LEASED_AUTH_TOKEN_FILE", .arg = "FILE",
     .kind = CONFIG_FILE, FIELD(auth_token_file),
     .help = "bearer tokens, one per line as 'NAME TOKEN': every call "
             "needs 'authorization: Bearer TOKEN'; mode 600 or 400"},
    {.name = "admin-token-file", .env = "LEASED_ADMIN_TOKEN_FILE",
     .arg = "FILE",
     .kind = CONFIG_FILE, FIELD(admin_token_file),
     .help = "the admin service's own bearer tokens (else those of "
             "--auth-token-file)"},
    {.name = "policy-file", .env = "LEASED_POLICY_FILE", .arg = "FILE",
     .kind = CONFIG_FILE, FIELD(policy_file),
     .help = "who may use which sessions, owners and the admin service, "
             "one rule per identity (reloaded on SIGHUP); without it, "
             "every authenticated caller may do everything"},
    {.name = "socket-mode", .env = "LEASED_SOCKET_MODE", .arg = "MODE",
     .kind = CONFIG_MODE, FIELD(socket_mode), .min = 0600, .max = 0777,
     .def = "0660", .example = "(e.g. 660)",
     .help = "octal mode of unix sockets"},
    {.name = "metrics-listen", .env = "LEASED_METRICS_LISTEN", .arg = "ADDR",
     .kind = CONFIG_HOSTPORT, FIELD(metrics_listen),
     .help = "serve Prometheus metrics on http://ADDR/metrics (HOST:PORT, "
             "loopback unless --insecure); off unless given"},
    {.name = "drain-timeout", .env = "LEASED_DRAIN_TIMEOUT", .arg = "D",
     .kind = CONFIG_DURATION, FIELD(drain_ns), .min = 100 * MS,
     .max = 24 * HOUR,
     .def = "5s",
     .help = "on SIGTERM, calls in progress get this long before they are "
             "cancelled"},
    /* A raised floor leaves 2^62 takeovers before tokens overflow
     * 64-bit signed integers (SQLite's, PostgreSQL's bigint). */
    {.name = "raise-token-floor", .env = "LEASED_RAISE_TOKEN_FLOOR",
     .arg = "N",
     .kind = CONFIG_U64, FIELD(raise_token_floor), .min = 1,
     .max = INT64_C(1) << 62,
     .help = "after restoring an older backup: before serving, raise every "
             "stored token and the token floor to at least N, so every "
             "token given is above N"},

    {.name = "postgres", .env = "LEASED_POSTGRES", .arg = "CONNINFO",
     .kind = CONFIG_TEXT, FIELD(postgres),
     .section = "Many replicas over PostgreSQL (see docs/ha.md):",
     .help = "keep leases in PostgreSQL instead of SQLite in --data-dir: "
             "any libpq connection string or URI, e.g. 'host=db1,db2 "
             "dbname=leases'; passwords from PGPASSFILE or PGPASSWORD, "
             "never here"},
    {.name = "max-clock-skew", .env = "LEASED_MAX_CLOCK_SKEW", .arg = "D",
     .kind = CONFIG_DURATION, FIELD(max_skew_ns), .min = 0,
     .max = HOUR, .example = "(e.g. 0ms, 500ms, 2s)",
     .def = "500ms",
     .help = "the most the database hosts' clocks differ by: after a "
             "failover, leases held before wait this much longer than the "
             "TTL"},
    {.name = "postgres-connections", .env = "LEASED_POSTGRES_CONNECTIONS",
     .arg = "N",
     .kind = CONFIG_INT, FIELD(pg_connections), .min = 1,
     .max = CONFIG_MAX_PG_CONNECTIONS,
     .def = "2",
     .help = "connections to the database, each a pipeline of up to two "
             "batches of calls, the second waiting at the database while "
             "it decides the first; more let more batches commit at once"},
    {.name = "import-from", .env = "LEASED_IMPORT_FROM", .arg = "DIR",
     .kind = CONFIG_DIR, FIELD(import_from),
     .help = "with --postgres: copy the leases of the SQLite store in DIR "
             "(a --data-dir; its leased stopped) into the database, which "
             "must hold none, keeping every token; then exit"},
    {.name = "postgres-timeout", .env = "LEASED_POSTGRES_TIMEOUT", .arg = "D",
     .kind = CONFIG_DURATION, FIELD(pg_timeout_ns), .min = 100 * MS,
     .max = 60000 * MS,
     .def = "2s",
     .help = "the most one round trip to the database may take; then the "
             "calls in it get UNAVAILABLE and leased reconnects"},

    {.name = "max-streams", .env = "LEASED_MAX_STREAMS", .arg = "N",
     .kind = CONFIG_INT, FIELD(limits.max_streams), .min = 1, .max = 100000,
     .def = "1024",
     .section = "Limits (per connection unless said; see "
                "docs/operations.md):",
     .help = "calls in progress at once"},
    {.name = "max-metadata-size", .env = "LEASED_MAX_METADATA_SIZE",
     .arg = "BYTES",
     .kind = CONFIG_INT, FIELD(limits.max_metadata_bytes), .min = 1024,
     .max = 1 << 20,
     .def = "16384",
     .help = "of a call's headers"},
    {.name = "keepalive-min-time", .env = "LEASED_KEEPALIVE_MIN_TIME",
     .arg = "D",
     .kind = CONFIG_DURATION, FIELD(limits.keepalive_min_ns),
     .min = 100 * MS, .max = 24 * HOUR,
     .def = "5s",
     .help = "clients may ping no more often than this"},
    {.name = "max-ping-strikes", .env = "LEASED_MAX_PING_STRIKES", .arg = "N",
     .kind = CONFIG_INT, FIELD(limits.max_ping_strikes), .min = 0,
     .max = 1000,
     .def = "2",
     .help = "pings too often before the connection is closed"},
    {.name = "handshake-timeout", .env = "LEASED_HANDSHAKE_TIMEOUT",
     .arg = "D",
     .kind = CONFIG_DURATION, FIELD(limits.handshake_timeout_ns),
     .min = 100 * MS, .max = 24 * HOUR,
     .def = "10s",
     .help = "for a new connection's TLS and HTTP/2 start"},
    {.name = "max-connection-idle", .env = "LEASED_MAX_CONNECTION_IDLE",
     .arg = "D",
     .kind = CONFIG_DURATION, FIELD(limits.max_idle_ns), .min = 100 * MS,
     .max = 24 * HOUR, .zero_is_never = true,
     .def = "10m",
     .help = "close a connection without calls this long; 0 never"},
    {.name = "max-connection-age", .env = "LEASED_MAX_CONNECTION_AGE",
     .arg = "D",
     .kind = CONFIG_DURATION, FIELD(limits.max_age_ns), .min = 100 * MS,
     .max = 24 * HOUR, .zero_is_never = true,
     .def = "0",
     .help = "close a connection this old (calls in progress get 10s); "
             "0 never"},
};

#define NOPTIONS (sizeof(config_options) / sizeof(config_options[0]))
const size_t config_noptions = NOPTIONS;

static const char intro[] =
    "Usage: leased [FLAGS]\n"
    "\n"
    "A lease service: serves mecatl.driver.v1.SessionLeaseService\n"
    "(Acquire, Renew, Release) over gRPC, with fencing tokens kept in\n"
    "SQLite in --data-dir, or in PostgreSQL with --postgres. Every flag\n"
    "can also be set as the environment variable shown. SIGHUP reloads\n"
    "the token files, the policy file and the TLS files; SIGTERM and\n"
    "SIGINT drain. See leased(8).\n"
    "\n";

/* Digits only (no sign, no space) in base 10 or 8, within min..max. */
static bool read_number(const char *val, int base, int64_t min, int64_t max,
                        int64_t *n)
{
    if (val[0] < '0' || val[0] > '9')
        return false;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(val, &end, base);
    if (*end != '\0' || errno != 0 || v < (unsigned long long)min ||
        v > (unsigned long long)max)
        return false;
    *n = (int64_t)v;
    return true;
}

/* ns in the largest unit that divides it: "100ms", "24h". */
static const char *duration_text(char *buf, size_t len, int64_t ns)
{
    static const struct {
        const char *unit;
        int64_t ns;
    } units[] = {{"h", HOUR}, {"m", 60000 * MS}, {"s", 1000 * MS},
                 {"ms", MS}};
    size_t k = 0;
    while (k + 1 < sizeof(units) / sizeof(units[0]) &&
           (ns % units[k].ns != 0 || ns == 0))
        k++;
    snprintf(buf, len, "%" PRId64 "%s", ns / units[k].ns, units[k].unit);
    return buf;
}

/* Checks val and stores it in o's field (val is borrowed for as long as
 * cfg is used). `what` names it for messages ("--ttl 50ms",
 * "LEASED_TTL=50ms"). */
static int set(struct config *cfg, const struct config_option *o,
               const char *val, const char *what, char *errmsg, size_t len)
{
    static const size_t field_size[] = {
        [CONFIG_ADDRS] = sizeof(cfg->listen),
        [CONFIG_HOSTPORT] = sizeof(const char *),
        [CONFIG_FILE] = sizeof(const char *),
        [CONFIG_DIR] = sizeof(const char *),
        [CONFIG_TEXT] = sizeof(const char *),
        [CONFIG_SWITCH] = sizeof(bool),
        [CONFIG_INT] = sizeof(int),
        [CONFIG_SIZE] = sizeof(size_t),
        [CONFIG_U64] = sizeof(uint64_t),
        [CONFIG_DURATION] = sizeof(int64_t),
        [CONFIG_MODE] = sizeof(unsigned),
        [CONFIG_LOG_LEVEL] = sizeof(enum log_level),
    };
    if (o->size != field_size[o->kind])
        abort(); /* a row whose kind does not fit its field: a bug */
    void *field = (char *)cfg + o->offset;
    bool plaintext_ok;
    char why[200];
    int64_t n;
    switch (o->kind) {
    case CONFIG_ADDRS:
        if (cfg->nlisten == CONFIG_MAX_LISTEN)
            return errmsg_fail(CONFIG_ERROR, errmsg, len,
                               "%s: at most %d addresses", what,
                               CONFIG_MAX_LISTEN);
        if (addr_check(val, &plaintext_ok, why, sizeof(why)) != 0)
            return errmsg_fail(CONFIG_ERROR, errmsg, len, "%s: %s", what, why);
        cfg->listen[cfg->nlisten++] = val;
        return CONFIG_OK;
    case CONFIG_HOSTPORT:
        if (addr_check(val, &plaintext_ok, why, sizeof(why)) != 0 ||
            strncmp(val, "unix:", 5) == 0)
            return errmsg_fail(CONFIG_ERROR, errmsg, len, "%s: want HOST:PORT",
                               what);
        *(const char **)field = val;
        return CONFIG_OK;
    case CONFIG_FILE:
    case CONFIG_DIR:
    case CONFIG_TEXT:
        if (*val == '\0')
            return errmsg_fail(CONFIG_ERROR, errmsg, len, "%s: empty %s", what,
                               o->kind == CONFIG_FILE  ? "file name"
                               : o->kind == CONFIG_DIR ? "directory"
                                                       : "value");
        *(const char **)field = val;
        return CONFIG_OK;
    case CONFIG_SWITCH:
        if (strcmp(val, "1") == 0 || strcmp(val, "true") == 0)
            *(bool *)field = true;
        else if (strcmp(val, "0") == 0 || strcmp(val, "false") == 0)
            *(bool *)field = false;
        else
            return errmsg_fail(CONFIG_ERROR, errmsg, len, "%s: want 1 or 0",
                               what);
        return CONFIG_OK;
    case CONFIG_INT:
    case CONFIG_SIZE:
    case CONFIG_U64:
        assert(o->kind != CONFIG_INT || o->max <= INT_MAX);
        if (!read_number(val, 10, o->min, o->max, &n))
            return errmsg_fail(CONFIG_ERROR, errmsg, len,
                               "%s: want %" PRId64 "..%" PRId64, what, o->min,
                               o->max);
        if (o->kind == CONFIG_INT)
            *(int *)field = (int)n;
        else if (o->kind == CONFIG_SIZE)
            *(size_t *)field = (size_t)n;
        else
            *(uint64_t *)field = (uint64_t)n;
        return CONFIG_OK;
    case CONFIG_DURATION:
        n = 0;
        if (!(o->zero_is_never && strcmp(val, "0") == 0) &&
            (duration_parse(val, &n) != 0 || n < o->min || n > o->max)) {
            char lo[24], hi[24];
            return errmsg_fail(CONFIG_ERROR, errmsg, len,
                               "%s: want a duration from %s to %s%s%s%s", what,
                               duration_text(lo, sizeof(lo), o->min),
                               duration_text(hi, sizeof(hi), o->max),
                               o->zero_is_never ? ", or 0 for never" : "",
                               o->example != NULL ? " " : "",
                               o->example != NULL ? o->example : "");
        }
        *(int64_t *)field = n;
        return CONFIG_OK;
    case CONFIG_MODE:
        /* From 600 to 777 is the same as: the owner may read and write. */
        if (!read_number(val, 8, o->min, o->max, &n))
            return errmsg_fail(
                CONFIG_ERROR, errmsg, len,
                "%s: want an octal mode from %o to %o that lets the "
                "owner read and write%s%s",
                what, (unsigned)o->min, (unsigned)o->max,
                o->example != NULL ? " " : "",
                o->example != NULL ? o->example : "");
        *(unsigned *)field = (unsigned)n;
        return CONFIG_OK;
    case CONFIG_LOG_LEVEL:
        if (log_parse_level(val, field) != 0)
            return errmsg_fail(CONFIG_ERROR, errmsg, len,
                               "%s: want debug, info, warn or error", what);
        return CONFIG_OK;
    }
    assert(!"a kind set() does not know");
    return errmsg_fail(CONFIG_ERROR, errmsg, len, "%s: unknown option", what);
}

/* Sets o from its variable's value val. A list is split at commas in a
 * copy, cfg->listen_env (the environment is not ours to change). */
static int set_from_env(struct config *cfg, const struct config_option *o,
                        const char *val, char *errmsg, size_t len)
{
    char what[64];
    if (o->kind != CONFIG_ADDRS) {
        snprintf(what, sizeof(what), "%s=%.30s", o->env, val);
        return set(cfg, o, val, what, errmsg, len);
    }
    if (strlen(val) >= sizeof(cfg->listen_env))
        return errmsg_fail(CONFIG_ERROR, errmsg, len, "%s: too long", o->env);
    strcpy(cfg->listen_env, val);
    char *save = NULL;
    for (char *a = strtok_r(cfg->listen_env, ",", &save); a != NULL;
         a = strtok_r(NULL, ",", &save)) {
        snprintf(what, sizeof(what), "%s=%.40s", o->env, a);
        if (set(cfg, o, a, what, errmsg, len) != CONFIG_OK)
            return CONFIG_ERROR;
    }
    return CONFIG_OK;
}

/* Sets o from a flag's value, or from its default (named as the flag). */
static int set_as_flag(struct config *cfg, const struct config_option *o,
                       const char *val, char *errmsg, size_t len)
{
    char what[600];
    snprintf(what, sizeof(what), "--%s %s", o->name, val);
    return set(cfg, o, val, what, errmsg, len);
}

enum { HELP_INDENT = 22, HELP_WIDTH = 79 };

/* One entry of --help: the flag, then text and then note, which is kept
 * whole, in a column of their own. */
static void print_entry(FILE *out, const char *flag, const char *text,
                        const char *note)
{
    int col = fprintf(out, "  %-*s", HELP_INDENT - 2, flag);
    if (col > HELP_INDENT)
        col += fprintf(out, " "); /* two spaces after a long flag */
    col += fprintf(out, " ");
    textwrap_text(out, &col, HELP_WIDTH, HELP_INDENT + 1, text);
    if (note != NULL)
        textwrap_unit(out, &col, HELP_WIDTH, HELP_INDENT + 1, note,
                      strlen(note), false);
    fputc('\n', out);
}

/* --help, from the table. */
static void usage(FILE *out)
{
    fputs(intro, out);
    for (size_t i = 0; i < NOPTIONS; i++) {
        const struct config_option *o = &config_options[i];
        if (o->section != NULL)
            fprintf(out, "\n%s\n", o->section);
        char flag[64], note[128];
        snprintf(flag, sizeof(flag), "--%s%s%s", o->name,
                 o->arg != NULL ? " " : "", o->arg != NULL ? o->arg : "");
        snprintf(note, sizeof(note), "[%s%s%s%s]", o->env,
                 o->kind == CONFIG_ADDRS    ? ", comma-separated"
                 : o->kind == CONFIG_SWITCH ? "=1"
                                            : "",
                 o->def != NULL ? "; default " : "",
                 o->def != NULL ? o->def : "");
        print_entry(out, flag, o->help, note);
    }
    fputc('\n', out);
    print_entry(out, "--help", "print this and exit", NULL);
    print_entry(out, "--version", "print the version and exit", NULL);
}

/* What getopt_long() returns for --help, --version and row i (OPT_ROW +
 * i): above any character, so that a short flag's optopt never looks
 * like one of them, and one each, since glibc takes a prefix of several
 * long options that return the same for the first ("--max"). */
enum { OPT_HELP = 256, OPT_VERSION, OPT_ROW };

/* The flags of argv, in order; given[i] is set for each row given. */
static int parse_argv(struct config *cfg, int argc, char **argv,
                      bool *given, char *errmsg, size_t len)
{
    struct option longopts[NOPTIONS + 3];
    for (size_t i = 0; i < NOPTIONS; i++) {
        const struct config_option *o = &config_options[i];
        int has_arg = o->kind == CONFIG_SWITCH ? no_argument
                                               : required_argument;
        longopts[i] =
            (struct option){o->name, has_arg, NULL, OPT_ROW + (int)i};
    }
    longopts[NOPTIONS] = (struct option){"help", no_argument, NULL, OPT_HELP};
    longopts[NOPTIONS + 1] =
        (struct option){"version", no_argument, NULL, OPT_VERSION};
    longopts[NOPTIONS + 2] = (struct option){NULL, 0, NULL, 0};

    optind = 0; /* glibc: forget everything of a previous parse */
    opterr = 0;
    int opt;
    while ((opt = getopt_long(argc, argv, ":", longopts, NULL)) != -1) {
        const char *arg = argv[optind - 1];
        switch (opt) {
        case OPT_HELP:
            usage(stdout);
            return CONFIG_EXIT;
        case OPT_VERSION:
            printf("leased %s\n", LEASED_VERSION);
            return CONFIG_EXIT;
        case ':':
            return errmsg_fail(CONFIG_ERROR, errmsg, len,
                               "%s needs a value (see --help)", arg);
        case '?':
            if (optopt >= OPT_HELP) /* "--insecure=1" */
                return errmsg_fail(CONFIG_ERROR, errmsg, len,
                                   "%.*s takes no value (see --help)",
                                   (int)strcspn(arg, "="), arg);
            if (optopt != 0) /* a short flag, maybe inside "-xy" */
                return errmsg_fail(CONFIG_ERROR, errmsg, len,
                                   "unknown flag -%c (see --help)", optopt);
            return errmsg_fail(CONFIG_ERROR, errmsg, len,
                               "unknown flag %s (see --help)", arg);
        default:
            assert(opt >= OPT_ROW && opt < OPT_ROW + (int)NOPTIONS);
            given[opt - OPT_ROW] = true;
            if (set_as_flag(cfg, &config_options[opt - OPT_ROW],
                            optarg != NULL ? optarg : "1", errmsg,
                            len) != CONFIG_OK)
                return CONFIG_ERROR;
        }
    }
    if (optind < argc)
        return errmsg_fail(CONFIG_ERROR, errmsg, len,
                           "unexpected argument %s (see --help)",
                           argv[optind]);
    return CONFIG_OK;
}

/* What no single option can check. */
static int check(const struct config *cfg, char *errmsg, size_t len)
{
    if ((cfg->tls_cert == NULL) != (cfg->tls_key == NULL))
        return errmsg_fail(CONFIG_ERROR, errmsg, len,
                           "--tls-cert and --tls-key go together");
    if (cfg->tls_client_ca != NULL && cfg->tls_cert == NULL)
        return errmsg_fail(CONFIG_ERROR, errmsg, len,
                           "--tls-client-ca needs --tls-cert and --tls-key");
    bool plaintext_ok;
    char why[200];
    for (size_t i = 0; i < cfg->nlisten; i++) {
        addr_check(cfg->listen[i], &plaintext_ok, why, sizeof(why));
        if (!plaintext_ok && cfg->tls_cert == NULL && !cfg->insecure)
            return errmsg_fail(
                CONFIG_ERROR, errmsg, len,
                "--listen %s: plaintext is allowed only on loopback "
                "or a unix socket; give --tls-cert and --tls-key, "
                "or --insecure",
                cfg->listen[i]);
    }
    if (cfg->import_from != NULL && cfg->postgres == NULL)
        return errmsg_fail(CONFIG_ERROR, errmsg, len,
                           "--import-from needs --postgres (where to)");
    if (cfg->metrics_listen != NULL) {
        addr_check(cfg->metrics_listen, &plaintext_ok, why, sizeof(why));
        if (!plaintext_ok && !cfg->insecure)
            return errmsg_fail(CONFIG_ERROR, errmsg, len,
                               "--metrics-listen %s: metrics are plain HTTP, "
                               "served on loopback only unless --insecure",
                               cfg->metrics_listen);
    }
    return CONFIG_OK;
}

int config_parse(struct config *cfg, int argc, char **argv, char *errmsg,
                 size_t len)
{
    memset(cfg, 0, sizeof(*cfg));
    bool given[NOPTIONS] = {false}; /* by its flag or its variable */
    int rc = parse_argv(cfg, argc, argv, given, errmsg, len);
    if (rc != CONFIG_OK)
        return rc;
    for (size_t i = 0; i < NOPTIONS; i++) {
        const struct config_option *o = &config_options[i];
        const char *val = getenv(o->env);
        if (val == NULL || given[i])
            continue;
        given[i] = true;
        if (set_from_env(cfg, o, val, errmsg, len) != CONFIG_OK)
            return CONFIG_ERROR;
    }
    for (size_t i = 0; i < NOPTIONS; i++) {
        const struct config_option *o = &config_options[i];
        /* A list is empty also when its variable held only commas. */
        bool empty = o->kind == CONFIG_ADDRS ? cfg->nlisten == 0 : !given[i];
        if (o->def != NULL && empty &&
            set_as_flag(cfg, o, o->def, errmsg, len) != CONFIG_OK)
            return CONFIG_ERROR; /* a bad default: test_config says which */
    }
    return check(cfg, errmsg, len);
}
