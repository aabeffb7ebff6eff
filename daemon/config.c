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
    "\n"
    "  --listen ADDR        listen on ADDR: HOST:PORT (loopback only for\n"
    "                       now) or unix:/PATH; repeatable; port 0 picks a\n"
    "                       free port [LEASED_LISTEN, comma-separated;\n"
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

int config_parse_duration(const char *text, int64_t *ns)
{
    static const struct {
        const char *unit;
        int64_t ns;
    } units[] = {{"ms", NS_PER_MS},
                 {"s", 1000 * NS_PER_MS},
                 {"m", 60 * 1000 * NS_PER_MS},
                 {"h", 3600 * 1000 * NS_PER_MS}};
    const char *p = text;
    int64_t total = 0;
    if (*p == '\0')
        return -1;
    while (*p != '\0') {
        if (*p < '0' || *p > '9')
            return -1;
        errno = 0;
        char *end;
        unsigned long long n = strtoull(p, &end, 10);
        if (errno != 0 || n > 100000000)
            return -1;
        size_t i;
        for (i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
            size_t ul = strlen(units[i].unit);
            /* "m" must not match the start of "ms". */
            if (strncmp(end, units[i].unit, ul) == 0 &&
                !(ul == 1 && end[0] == 'm' && end[1] == 's'))
                break;
        }
        if (i == sizeof(units) / sizeof(units[0]))
            return -1;
        total += (int64_t)n * units[i].ns;
        if (total > 1000 * TTL_MAX_NS)
            return -1;
        p = end + strlen(units[i].unit);
    }
    *ns = total;
    return 0;
}

/* Applies one option; `what` names it for messages ("--ttl 50ms",
 * "LEASED_TTL=50ms"). */
static int set_option(struct config *cfg, int opt, const char *val,
                      const char *what, char *errmsg, size_t len)
{
    char why[200];
    switch (opt) {
    case 'l':
        if (cfg->nlisten == CONFIG_MAX_LISTEN)
            return fail(errmsg, len, "%s: at most %d addresses", what,
                        CONFIG_MAX_LISTEN);
        if (addr_check_plaintext(val, why, sizeof(why)) != 0)
            return fail(errmsg, len, "%s: %s", what, why);
        cfg->listen[cfg->nlisten++] = val;
        return CONFIG_OK;
    case 'd':
        if (*val == '\0')
            return fail(errmsg, len, "%s: empty directory", what);
        cfg->data_dir = val;
        return CONFIG_OK;
    case 't':
        if (config_parse_duration(val, &cfg->ttl_ns) != 0 ||
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
    case 'p': {
        char *end;
        errno = 0;
        unsigned long long n = strtoull(val, &end, 10);
        if (*end != '\0' || errno != 0 || n < 1 || n > 10000000 ||
            val[0] < '0' || val[0] > '9')
            return fail(errmsg, len, "%s: want 1..10000000", what);
        cfg->max_pending = (size_t)n;
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

int config_parse(struct config *cfg, int argc, char **argv, char *errmsg,
                 size_t len)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->data_dir = "./leased-data";
    cfg->ttl_ns = 30 * 1000 * NS_PER_MS;
    cfg->log_level = LOG_INFO;
    cfg->max_pending = 65536;

    bool given[128] = {false};
    optind = 1;
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
            return fail(errmsg, len, "unknown flag %s (see --help)", arg);
        default:
            given[opt] = true;
            snprintf(what, sizeof(what), "--%s %s", long_options[index].name,
                     optarg);
            if (set_option(cfg, opt, optarg, what, errmsg, len) != CONFIG_OK)
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
    return CONFIG_OK;
}
