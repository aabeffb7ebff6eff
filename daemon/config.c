/* Flags and LEASED_… environment variables (see config.h). */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "addr.h"
#include "duration.h"
#include "version.h"

#define NS_PER_MS INT64_C(1000000)
#define TTL_MIN_NS (100 * NS_PER_MS)
#define TTL_MAX_NS (3600 * 1000 * NS_PER_MS)

static const char usage[] =
    "Usage: leased [FLAGS]\n"
    "\n"
    "A lease service: serves mecatl.driver.v1.SessionLeaseService\n"
    "(Acquire, Renew, Release) over gRPC, with fencing tokens kept in\n"
    "SQLite. Every flag can also be set as the environment variable shown.\n"
    "SIGHUP reloads the token file and the TLS files; SIGTERM drains.\n"
    "\n"
    "  --listen ADDR        listen on ADDR: HOST:PORT or unix:/PATH;\n"
    "                       repeatable; port 0 picks a free port; other\n"
    "                       than loopback only with TLS (or --insecure)\n"
    "                       [LEASED_LISTEN, comma-separated;\n"
    "                       default 127.0.0.1:7443]\n"
    "  --data-dir DIR       where the database and lock file live; created\n"
    "                       if missing [LEASED_DATA_DIR; default ./leased-data]\n"
    "  --ttl DURATION       lease lifetime, 100ms..1h, e.g. 500ms, 30s, 1m\n"
    "                       [LEASED_TTL; default 30s]\n"
    "  --log-level LEVEL    debug, info, warn or error\n"
    "                       [LEASED_LOG_LEVEL; default info]\n"
    "  --max-pending N      requests queued or in progress at once; more get\n"
    "                       RESOURCE_EXHAUSTED [LEASED_MAX_PENDING;\n"
    "                       default 65536]\n"
    "  --tls-cert FILE      PEM certificate chain: TLS 1.2+ on every TCP\n"
    "                       listener [LEASED_TLS_CERT]\n"
    "  --tls-key FILE       PEM private key of --tls-cert [LEASED_TLS_KEY]\n"
    "  --tls-client-ca FILE PEM CA certificates: clients must present a\n"
    "                       certificate one of them signed (mutual TLS)\n"
    "                       [LEASED_TLS_CLIENT_CA]\n"
    "  --insecure           allow plaintext on non-loopback addresses\n"
    "                       (logged as a warning) [LEASED_INSECURE=1]\n"
    "  --auth-token-file F  bearer tokens, one per line: every call needs\n"
    "                       'authorization: Bearer TOKEN'; mode 600\n"
    "                       [LEASED_AUTH_TOKEN_FILE]\n"
    "  --admin-token-file F the admin service's own bearer tokens (else\n"
    "                       those of --auth-token-file)\n"
    "                       [LEASED_ADMIN_TOKEN_FILE]\n"
    "  --socket-mode MODE   octal mode of unix sockets\n"
    "                       [LEASED_SOCKET_MODE; default 0660]\n"
    "  --metrics-listen ADDR  serve Prometheus metrics on http://ADDR/metrics\n"
    "                       (HOST:PORT, loopback unless --insecure)\n"
    "                       [LEASED_METRICS_LISTEN; default off]\n"
    "  --drain-timeout D    on SIGTERM, calls in progress get this long\n"
    "                       before they are cancelled\n"
    "                       [LEASED_DRAIN_TIMEOUT; default 5s]\n"
    "  --raise-token-floor N  after restoring an older backup: before\n"
    "                       serving, raise every stored token and the\n"
    "                       token floor to at least N, so every token\n"
    "                       given is above N [LEASED_RAISE_TOKEN_FLOOR]\n"
    "\n"
    "Limits (per connection unless said; see docs/operations.md):\n"
    "  --max-streams N      calls in progress at once [LEASED_MAX_STREAMS;\n"
    "                       default 1024]\n"
    "  --max-metadata-size BYTES  of a call's headers\n"
    "                       [LEASED_MAX_METADATA_SIZE; default 16384]\n"
    "  --keepalive-min-time D  clients may ping no more often than this\n"
    "                       [LEASED_KEEPALIVE_MIN_TIME; default 5s]\n"
    "  --max-ping-strikes N pings too often before the connection is\n"
    "                       closed [LEASED_MAX_PING_STRIKES; default 2]\n"
    "  --handshake-timeout D  for a new connection's TLS and HTTP/2\n"
    "                       start [LEASED_HANDSHAKE_TIMEOUT; default 10s]\n"
    "  --max-connection-idle D  close a connection without calls this long;\n"
    "                       0 never [LEASED_MAX_CONNECTION_IDLE; default 10m]\n"
    "  --max-connection-age D  close a connection this old (calls in\n"
    "                       progress get 10s); 0 never\n"
    "                       [LEASED_MAX_CONNECTION_AGE; default 0]\n"
    "\n"
    "  --help               print this and exit\n"
    "  --version            print the version and exit\n";

static int fail(char *errmsg, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(errmsg, len, fmt, ap);
    va_end(ap);
    return CONFIG_ERROR;
}

/* Applies one option; `what` names it for messages ("--ttl 50ms",
 * "LEASED_TTL=50ms"). */
static int set_option(struct config *cfg, int opt, const char *val,
                      const char *what, char *errmsg, size_t len)
{
    char why[200];
    switch (opt) {
    case 'l': {
        if (cfg->nlisten == CONFIG_MAX_LISTEN)
            return fail(errmsg, len, "%s: at most %d addresses", what,
                        CONFIG_MAX_LISTEN);
        bool plaintext_ok;
        if (addr_check(val, &plaintext_ok, why, sizeof(why)) != 0)
            return fail(errmsg, len, "%s: %s", what, why);
        cfg->listen[cfg->nlisten++] = val;
        return CONFIG_OK;
    }
    case 'm': {
        bool plaintext_ok;
        if (addr_check(val, &plaintext_ok, why, sizeof(why)) != 0 ||
            strncmp(val, "unix:", 5) == 0)
            return fail(errmsg, len, "%s: want HOST:PORT", what);
        cfg->metrics_listen = val;
        return CONFIG_OK;
    }
    case 'C':
    case 'K':
    case 'A':
    case 'T':
    case 'U':
        if (*val == '\0')
            return fail(errmsg, len, "%s: empty file name", what);
        *(opt == 'C'   ? &cfg->tls_cert
          : opt == 'K' ? &cfg->tls_key
          : opt == 'A' ? &cfg->tls_client_ca
          : opt == 'T' ? &cfg->auth_token_file
                       : &cfg->admin_token_file) = val;
        return CONFIG_OK;
    case 'I':
        if (strcmp(val, "1") == 0 || strcmp(val, "true") == 0)
            cfg->insecure = true;
        else if (strcmp(val, "0") == 0 || strcmp(val, "false") == 0)
            cfg->insecure = false;
        else
            return fail(errmsg, len, "%s: want 1 or 0", what);
        return CONFIG_OK;
    case 'S':
    case 'Z':
    case 'P': {
        static const struct {
            int opt;
            long long min, max;
        } ranges[] = {{'S', 1, 100000}, {'Z', 1024, 1 << 20}, {'P', 0, 1000}};
        size_t k = 0;
        while (ranges[k].opt != opt)
            k++;
        char *end;
        errno = 0;
        long long n = strtoll(val, &end, 10);
        if (*end != '\0' || errno != 0 || val[0] < '0' || val[0] > '9' ||
            n < ranges[k].min || n > ranges[k].max)
            return fail(errmsg, len, "%s: want %lld..%lld", what,
                        ranges[k].min, ranges[k].max);
        *(opt == 'S'   ? &cfg->limits.max_streams
          : opt == 'Z' ? &cfg->limits.max_metadata_bytes
                       : &cfg->limits.max_ping_strikes) = (int)n;
        return CONFIG_OK;
    }
    case 'k':
    case 'H':
    case 'i':
    case 'a':
    case 'D': {
        int64_t ns = 0;
        bool never_ok = opt == 'i' || opt == 'a';
        bool never = never_ok && strcmp(val, "0") == 0;
        if (!never && (duration_parse(val, &ns) != 0 ||
                       ns < 100 * NS_PER_MS || ns > 24 * TTL_MAX_NS))
            return fail(errmsg, len, "%s: want a duration from 100ms to 24h%s",
                        what, never_ok ? ", or 0 for never" : "");
        *(opt == 'k'   ? &cfg->limits.keepalive_min_ns
          : opt == 'H' ? &cfg->limits.handshake_timeout_ns
          : opt == 'i' ? &cfg->limits.max_idle_ns
          : opt == 'a' ? &cfg->limits.max_age_ns
                       : &cfg->drain_ns) = ns;
        return CONFIG_OK;
    }
    case 'M': {
        char *end;
        errno = 0;
        unsigned long mode = strtoul(val, &end, 8);
        if (*end != '\0' || errno != 0 || val[0] < '0' || val[0] > '7' ||
            mode > 0777 || (mode & 0600) != 0600)
            return fail(errmsg, len,
                        "%s: want an octal mode from 600 to 777 that lets "
                        "the owner read and write (e.g. 660)",
                        what);
        cfg->socket_mode = (unsigned)mode;
        return CONFIG_OK;
    }
    case 'd':
        if (*val == '\0')
            return fail(errmsg, len, "%s: empty directory", what);
        cfg->data_dir = val;
        return CONFIG_OK;
    case 't':
        if (duration_parse(val, &cfg->ttl_ns) != 0 ||
            cfg->ttl_ns < TTL_MIN_NS || cfg->ttl_ns > TTL_MAX_NS)
            return fail(errmsg, len,
                        "%s: want a duration from 100ms to 1h "
                        "(e.g. 500ms, 30s, 1m)",
                        what);
        return CONFIG_OK;
    case 'v':
        if (log_parse_level(val, &cfg->log_level) != 0)
            return fail(errmsg, len, "%s: want debug, info, warn or error",
                        what);
        return CONFIG_OK;
    case 'p':
    case 'F': {
        /* A raised floor leaves 2^62 takeovers before tokens overflow
         * SQLite's 64-bit signed integers. */
        unsigned long long max = opt == 'p' ? 10000000 : 1ULL << 62;
        char *end;
        errno = 0;
        unsigned long long n = strtoull(val, &end, 10);
        if (*end != '\0' || errno != 0 || n < 1 || n > max ||
            val[0] < '0' || val[0] > '9')
            return fail(errmsg, len, "%s: want 1..%llu", what, max);
        if (opt == 'p')
            cfg->max_pending = (size_t)n;
        else
            cfg->raise_token_floor = n;
        return CONFIG_OK;
    }
    }
    return fail(errmsg, len, "%s: unknown option", what);
}

static const struct option long_options[] = {
    {"listen", required_argument, NULL, 'l'},
    {"data-dir", required_argument, NULL, 'd'},
    {"ttl", required_argument, NULL, 't'},
    {"log-level", required_argument, NULL, 'v'},
    {"max-pending", required_argument, NULL, 'p'},
    {"tls-cert", required_argument, NULL, 'C'},
    {"tls-key", required_argument, NULL, 'K'},
    {"tls-client-ca", required_argument, NULL, 'A'},
    {"insecure", no_argument, NULL, 'I'},
    {"auth-token-file", required_argument, NULL, 'T'},
    {"admin-token-file", required_argument, NULL, 'U'},
    {"socket-mode", required_argument, NULL, 'M'},
    {"max-streams", required_argument, NULL, 'S'},
    {"max-metadata-size", required_argument, NULL, 'Z'},
    {"keepalive-min-time", required_argument, NULL, 'k'},
    {"max-ping-strikes", required_argument, NULL, 'P'},
    {"handshake-timeout", required_argument, NULL, 'H'},
    {"max-connection-idle", required_argument, NULL, 'i'},
    {"max-connection-age", required_argument, NULL, 'a'},
    {"drain-timeout", required_argument, NULL, 'D'},
    {"metrics-listen", required_argument, NULL, 'm'},
    {"raise-token-floor", required_argument, NULL, 'F'},
    {"help", no_argument, NULL, 'h'},
    {"version", no_argument, NULL, 'V'},
    {NULL, 0, NULL, 0},
};

static const struct {
    const char *env;
    int opt;
} env_options[] = {
    {"LEASED_DATA_DIR", 'd'},
    {"LEASED_TTL", 't'},
    {"LEASED_LOG_LEVEL", 'v'},
    {"LEASED_MAX_PENDING", 'p'},
    {"LEASED_TLS_CERT", 'C'},
    {"LEASED_TLS_KEY", 'K'},
    {"LEASED_TLS_CLIENT_CA", 'A'},
    {"LEASED_INSECURE", 'I'},
    {"LEASED_AUTH_TOKEN_FILE", 'T'},
    {"LEASED_ADMIN_TOKEN_FILE", 'U'},
    {"LEASED_SOCKET_MODE", 'M'},
    {"LEASED_MAX_STREAMS", 'S'},
    {"LEASED_MAX_METADATA_SIZE", 'Z'},
    {"LEASED_KEEPALIVE_MIN_TIME", 'k'},
    {"LEASED_MAX_PING_STRIKES", 'P'},
    {"LEASED_HANDSHAKE_TIMEOUT", 'H'},
    {"LEASED_MAX_CONNECTION_IDLE", 'i'},
    {"LEASED_MAX_CONNECTION_AGE", 'a'},
    {"LEASED_DRAIN_TIMEOUT", 'D'},
    {"LEASED_METRICS_LISTEN", 'm'},
    {"LEASED_RAISE_TOKEN_FLOOR", 'F'},
};

/* Options whose flag was not given come from the environment. */
static int parse_env(struct config *cfg, const bool *given, char *errmsg,
                     size_t len)
{
    char what[64];
    for (size_t i = 0; i < sizeof(env_options) / sizeof(env_options[0]); i++) {
        const char *val = getenv(env_options[i].env);
        if (val == NULL || given[env_options[i].opt])
            continue;
        snprintf(what, sizeof(what), "%s=%.30s", env_options[i].env, val);
        if (set_option(cfg, env_options[i].opt, val, what, errmsg, len) !=
            CONFIG_OK)
            return CONFIG_ERROR;
    }
    const char *listen = getenv("LEASED_LISTEN");
    if (listen == NULL || given['l'])
        return CONFIG_OK;
    if (strlen(listen) >= sizeof(cfg->listen_env))
        return fail(errmsg, len, "LEASED_LISTEN: too long");
    strcpy(cfg->listen_env, listen);
    char *save = NULL;
    for (char *a = strtok_r(cfg->listen_env, ",", &save); a != NULL;
         a = strtok_r(NULL, ",", &save)) {
        snprintf(what, sizeof(what), "LEASED_LISTEN=%.40s", a);
        if (set_option(cfg, 'l', a, what, errmsg, len) != CONFIG_OK)
            return CONFIG_ERROR;
    }
    return CONFIG_OK;
}

/* What no single option can check. */
static int check(const struct config *cfg, char *errmsg, size_t len)
{
    if ((cfg->tls_cert == NULL) != (cfg->tls_key == NULL))
        return fail(errmsg, len, "--tls-cert and --tls-key go together");
    if (cfg->tls_client_ca != NULL && cfg->tls_cert == NULL)
        return fail(errmsg, len,
                    "--tls-client-ca needs --tls-cert and --tls-key");
    bool plaintext_ok;
    char why[200];
    for (size_t i = 0; i < cfg->nlisten; i++) {
        addr_check(cfg->listen[i], &plaintext_ok, why, sizeof(why));
        if (!plaintext_ok && cfg->tls_cert == NULL && !cfg->insecure)
            return fail(errmsg, len,
                        "--listen %s: plaintext is allowed only on loopback "
                        "or a unix socket; give --tls-cert and --tls-key, "
                        "or --insecure",
                        cfg->listen[i]);
    }
    if (cfg->metrics_listen != NULL) {
        addr_check(cfg->metrics_listen, &plaintext_ok, why, sizeof(why));
        if (!plaintext_ok && !cfg->insecure)
            return fail(errmsg, len,
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
    cfg->data_dir = "./leased-data";
    cfg->ttl_ns = 30 * 1000 * NS_PER_MS;
    cfg->log_level = LOG_INFO;
    cfg->max_pending = 65536;
    cfg->socket_mode = 0660;
    cfg->drain_ns = 5000 * NS_PER_MS;
    cfg->limits = (struct config_limits){
        .max_streams = 1024,
        .max_metadata_bytes = 16384,
        .keepalive_min_ns = 5000 * NS_PER_MS,
        .max_ping_strikes = 2,
        .handshake_timeout_ns = 10000 * NS_PER_MS,
        .max_idle_ns = 600000 * NS_PER_MS,
        .max_age_ns = 0,
    };

    bool given[128] = {false};
    optind = 0; /* glibc: forget everything of a previous parse */
    opterr = 0;
    int opt, index = 0;
    while ((opt = getopt_long(argc, argv, ":", long_options, &index)) != -1) {
        const char *arg = argv[optind - 1];
        char what[600];
        switch (opt) {
        case 'h':
            fputs(usage, stdout);
            return CONFIG_EXIT;
        case 'V':
            printf("leased %s\n", LEASED_VERSION);
            return CONFIG_EXIT;
        case ':':
            return fail(errmsg, len, "%s needs a value (see --help)", arg);
        case '?':
            if (optopt != 0) /* a short flag, maybe inside "-xy" */
                return fail(errmsg, len, "unknown flag -%c (see --help)",
                            optopt);
            return fail(errmsg, len, "unknown flag %s (see --help)", arg);
        default:
            given[opt] = true;
            snprintf(what, sizeof(what), "--%s %s", long_options[index].name,
                     optarg != NULL ? optarg : "");
            if (set_option(cfg, opt, optarg != NULL ? optarg : "1", what,
                           errmsg, len) != CONFIG_OK)
                return CONFIG_ERROR;
        }
    }
    if (optind < argc)
        return fail(errmsg, len, "unexpected argument %s (see --help)",
                    argv[optind]);
    if (parse_env(cfg, given, errmsg, len) != CONFIG_OK)
        return CONFIG_ERROR;
    if (cfg->nlisten == 0)
        cfg->listen[cfg->nlisten++] = "127.0.0.1:7443";
    return check(cfg, errmsg, len);
}
