/*
 * Fuzz target: the flag parser, config_parse() (daemon/config.h).
 *
 * The input is split at newlines and NUL bytes into arguments after
 * argv[0] (at most MAX_ARGS of them); an argument of the form
 * LEASED_NAME=VALUE is put into the environment instead, for this run
 * only, so that the LEASED_… variables are fuzzed too. Each argument is
 * a buffer of its own exact size, so that reading past one trips
 * AddressSanitizer.
 *
 * Whatever the input, config_parse() must return (it never exits; --help
 * and --version print and return CONFIG_EXIT), leave no allocation
 * behind, and:
 *  - CONFIG_ERROR: a NUL-terminated reason within the buffer given;
 *  - CONFIG_OK: every value within the range its flag allows, the
 *    listen addresses 1..CONFIG_MAX_LISTEN of them and each valid, TLS
 *    files given together, and plaintext only where allowed.
 * The whole struct config is borrowed from argv, the environment and
 * static strings: config.h has no free function because config_parse()
 * allocates nothing, and LeakSanitizer holds it to that.
 */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "addr.h"
#include "config.h"
#include "fuzz.h"

#define REQUIRE(cond)                                                      \
    do {                                                                   \
        if (!(cond))                                                       \
            abort();                                                       \
    } while (0)

#define MAX_ARGS 64
#define MS INT64_C(1000000)

extern char **environ;

/* The runner's own LEASED_… variables would make results depend on where
 * the fuzzer runs: remove them once. */
static void clear_leased_env(void)
{
    static bool done;
    if (done)
        return;
    done = true;
    for (bool found = true; found;) {
        found = false;
        for (char **e = environ; *e != NULL; e++) {
            const char *eq = strchr(*e, '=');
            if (strncmp(*e, "LEASED_", 7) != 0 || eq == NULL)
                continue;
            char *name = strndup(*e, (size_t)(eq - *e));
            REQUIRE(name != NULL);
            REQUIRE(unsetenv(name) == 0);
            free(name);
            found = true; /* environ changed: look again */
            break;
        }
    }
}

static bool in_range(int64_t v, int64_t lo, int64_t hi)
{
    return v >= lo && v <= hi;
}

static bool may_be_plaintext(const char *addr)
{
    bool plaintext_ok;
    char why[200];
    return addr_check(addr, &plaintext_ok, why, sizeof(why)) == 0 &&
           plaintext_ok;
}

static void check_ok(const struct config *c)
{
    REQUIRE(c->nlisten >= 1 && c->nlisten <= CONFIG_MAX_LISTEN);
    bool tls = c->tls_cert != NULL;
    for (size_t i = 0; i < c->nlisten; i++) {
        bool plaintext_ok;
        char why[200];
        REQUIRE(c->listen[i] != NULL);
        REQUIRE(addr_check(c->listen[i], &plaintext_ok, why, sizeof(why)) ==
                0);
        REQUIRE(plaintext_ok || tls || c->insecure);
    }
    REQUIRE(c->data_dir != NULL && c->data_dir[0] != '\0');
    REQUIRE(in_range(c->ttl_ns, 100 * MS, 3600 * 1000 * MS));
    REQUIRE(c->log_level >= LOG_DEBUG && c->log_level <= LOG_ERROR);
    REQUIRE(c->max_pending >= 1 && c->max_pending <= 10000000);
    REQUIRE((c->tls_cert == NULL) == (c->tls_key == NULL));
    REQUIRE(c->tls_client_ca == NULL || tls);
    const char *files[] = {c->tls_cert, c->tls_key, c->tls_client_ca,
                           c->auth_token_file, c->admin_token_file};
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++)
        REQUIRE(files[i] == NULL || files[i][0] != '\0');
    REQUIRE(c->socket_mode <= 0777 && (c->socket_mode & 0600) == 0600);
    const int64_t day = 24 * 3600 * 1000 * MS;
    REQUIRE(in_range(c->drain_ns, 100 * MS, day));
    if (c->metrics_listen != NULL) {
        REQUIRE(strncmp(c->metrics_listen, "unix:", 5) != 0);
        REQUIRE(may_be_plaintext(c->metrics_listen) || c->insecure);
    }
    REQUIRE(c->raise_token_floor <= UINT64_C(1) << 62);
    const struct config_limits *l = &c->limits;
    REQUIRE(in_range(l->max_streams, 1, 100000));
    REQUIRE(in_range(l->max_metadata_bytes, 1024, 1 << 20));
    REQUIRE(in_range(l->keepalive_min_ns, 100 * MS, day));
    REQUIRE(in_range(l->max_ping_strikes, 0, 1000));
    REQUIRE(in_range(l->handshake_timeout_ns, 100 * MS, day));
    REQUIRE(l->max_idle_ns == 0 || in_range(l->max_idle_ns, 100 * MS, day));
    REQUIRE(l->max_age_ns == 0 || in_range(l->max_age_ns, 100 * MS, day));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    clear_leased_env();
    char *argv[MAX_ARGS + 2];
    char *env[MAX_ARGS];
    int argc = 0, nenv = 0;
    static char arg0[] = "leased";
    argv[argc++] = arg0;
    for (size_t start = 0; start < size && argc + nenv <= MAX_ARGS;) {
        size_t end = start;
        while (end < size && data[end] != '\n' && data[end] != '\0')
            end++;
        char *s = malloc(end - start + 1);
        REQUIRE(s != NULL);
        memcpy(s, data + start, end - start);
        s[end - start] = '\0';
        if (strncmp(s, "LEASED_", 7) == 0 && strchr(s, '=') != NULL) {
            env[nenv++] = s;
            REQUIRE(putenv(s) == 0); /* s itself, not a copy */
        } else {
            argv[argc++] = s;
        }
        start = end + 1; /* so a trailing separator adds no argument */
    }
    argv[argc] = NULL;

    struct config cfg;
    /* Odd-sized inputs get a short buffer, to exercise cut messages. */
    size_t errlen = size % 2 != 0 ? 16 : 512;
    char *errmsg = malloc(errlen);
    REQUIRE(errmsg != NULL);
    memset(errmsg, 'x', errlen);
    int rc = config_parse(&cfg, argc, argv, errmsg, errlen);
    if (rc == CONFIG_ERROR)
        REQUIRE(memchr(errmsg, '\0', errlen) != NULL);
    else if (rc == CONFIG_OK)
        check_ok(&cfg);
    else
        REQUIRE(rc == CONFIG_EXIT);
    free(errmsg);
    for (int i = 1; i < argc; i++)
        free(argv[i]);
    for (int i = 0; i < nenv; i++) {
        /* By name, before freeing what environ points to. */
        char *name = strndup(env[i], (size_t)(strchr(env[i], '=') - env[i]));
        REQUIRE(name != NULL);
        unsetenv(name);
        free(name);
        free(env[i]);
    }
    return 0;
}
