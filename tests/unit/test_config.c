/* Configuration: durations, listen addresses, flags and environment,
 * and the table of options (daemon/config.c) against its users: every
 * row reachable by flag and variable, --help, docs/operations.md and
 * the man page, docs/leased.8. */
#include <stdlib.h>
#include <unistd.h>

#include "check.h"
#include "addr.h"
#include "config.h"
#include "duration.h"

#define MS INT64_C(1000000)

TEST(durations)
{
    int64_t ns;
    CHECK(duration_parse("500ms", &ns) == 0 && ns == 500 * MS);
    CHECK(duration_parse("3s", &ns) == 0 && ns == 3000 * MS);
    CHECK(duration_parse("1m", &ns) == 0 && ns == 60000 * MS);
    CHECK(duration_parse("1h", &ns) == 0 && ns == 3600000 * MS);
    CHECK(duration_parse("1m30s", &ns) == 0 && ns == 90000 * MS);
    CHECK(duration_parse("1000h", &ns) == 0 && ns == 3600000000 * MS);
    /* Decimals, as Go's durations (and etcd's, Consul's flags) take. */
    CHECK(duration_parse("1.5s", &ns) == 0 && ns == 1500 * MS);
    CHECK(duration_parse("0.25s", &ns) == 0 && ns == 250 * MS);
    CHECK(duration_parse("1.5m", &ns) == 0 && ns == 90000 * MS);
    CHECK(duration_parse("0.5ms", &ns) == 0 && ns == 500000);
    CHECK(duration_parse("999.999999999h", &ns) == 0 &&
          ns == INT64_C(999) * 3600000 * MS + INT64_C(999999999) * 3600);
    CHECK(duration_parse("2.000000001s", &ns) == 0 && ns == 2000000001);
    CHECK(duration_parse("1m0.5s", &ns) == 0 && ns == 60500 * MS);
    const char *bad[] = {"", "5", "s", "1x", "-1s", "1s ", "ms",
                         "1001h", "22222222h", "100000000h", "999h3601s",
                         "1.s", ".5s", "1.5", "1..5s", "1.5.5s",
                         "1.1234567891s", "1000.5h", "999.9999999999h",
                         "1.-5s", "1. 5s"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        CHECK(duration_parse(bad[i], &ns) != 0);
}

TEST(listen_addresses)
{
    char err[256];
    const char *good[] = {"127.0.0.1:7443", "127.1.2.3:0", "[::1]:7443",
                          "localhost:1", "unix:/tmp/x.sock"};
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
        CHECK(addr_check_plaintext(good[i], err, sizeof(err)) == 0);
    const char *bad[] = {"0.0.0.0:7443", "10.0.0.1:1", "[::]:1",
                         "example.com:1", "127.0.0.1", "127.0.0.1:",
                         "127.0.0.1:99999", "unix:", ":7443", "[::1:1"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        CHECK(addr_check_plaintext(bad[i], err, sizeof(err)) != 0);
    addr_check_plaintext("0.0.0.0:7443", err, sizeof(err));
    CHECK(strstr(err, "loopback") != NULL);
}

static int parse(struct config *cfg, char **argv)
{
    int argc = 0;
    while (argv[argc] != NULL)
        argc++;
    char err[256];
    return config_parse(cfg, argc, argv, err, sizeof(err));
}

/* So that the runner's LEASED_… variables change nothing. */
static void clear_env(void)
{
    for (size_t i = 0; i < config_noptions; i++)
        unsetenv(config_options[i].env);
}

/* Every field, as docs/operations.md gives its default. */
TEST(defaults)
{
    clear_env();
    struct config cfg;
    char *argv[] = {"leased", NULL};
    CHECK_EQ_I64(parse(&cfg, argv), CONFIG_OK);
    CHECK_EQ_I64(cfg.nlisten, 1);
    CHECK_STR(cfg.listen[0], "127.0.0.1:7443");
    CHECK_STR(cfg.data_dir, "./leased-data");
    CHECK_EQ_I64(cfg.ttl_ns, 30000 * MS);
    CHECK_EQ_I64(cfg.log_level, LOG_INFO);
    CHECK_EQ_U64(cfg.max_pending, 65536);
    CHECK(cfg.tls_cert == NULL && cfg.tls_key == NULL);
    CHECK(cfg.tls_client_ca == NULL && !cfg.insecure);
    CHECK(cfg.auth_token_file == NULL && cfg.admin_token_file == NULL);
    CHECK_EQ_I64(cfg.socket_mode, 0660);
    CHECK_EQ_I64(cfg.drain_ns, 5000 * MS);
    CHECK(cfg.metrics_listen == NULL);
    CHECK_EQ_U64(cfg.raise_token_floor, 0);
    CHECK(cfg.postgres == NULL);
    CHECK_EQ_I64(cfg.max_skew_ns, 500 * MS);
    CHECK_EQ_I64(cfg.pg_timeout_ns, 2000 * MS);
    CHECK_EQ_I64(cfg.pg_connections, 2);
    CHECK_EQ_I64(cfg.limits.max_streams, 1024);
    CHECK_EQ_I64(cfg.limits.max_metadata_bytes, 16384);
    CHECK_EQ_I64(cfg.limits.keepalive_min_ns, 5000 * MS);
    CHECK_EQ_I64(cfg.limits.max_ping_strikes, 2);
    CHECK_EQ_I64(cfg.limits.handshake_timeout_ns, 10000 * MS);
    CHECK_EQ_I64(cfg.limits.max_idle_ns, 600000 * MS);
    CHECK_EQ_I64(cfg.limits.max_age_ns, 0);
    /* A list variable with no address in it leaves the default. */
    setenv("LEASED_LISTEN", ",,", 1);
    CHECK_EQ_I64(parse(&cfg, argv), CONFIG_OK);
    CHECK_EQ_I64(cfg.nlisten, 1);
    CHECK_STR(cfg.listen[0], "127.0.0.1:7443");
    unsetenv("LEASED_LISTEN");
}

TEST(raise_token_floor)
{
    struct config cfg;
    char *a1[] = {"leased", "--raise-token-floor", "4611686018427387904",
                  NULL};
    CHECK_EQ_I64(parse(&cfg, a1), CONFIG_OK);
    CHECK_EQ_U64(cfg.raise_token_floor, UINT64_C(1) << 62);
    setenv("LEASED_RAISE_TOKEN_FLOOR", "77", 1);
    char *a2[] = {"leased", NULL};
    CHECK_EQ_I64(parse(&cfg, a2), CONFIG_OK);
    CHECK_EQ_U64(cfg.raise_token_floor, 77);
    unsetenv("LEASED_RAISE_TOKEN_FLOOR");
    /* Zero, past 2^62, signs and words: refused. */
    static const char *const bad[] = {"0", "4611686018427387905", "-1",
                                      "+5", "5x", ""};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char *a[] = {"leased", "--raise-token-floor", (char *)bad[i], NULL};
        CHECK_EQ_I64(parse(&cfg, a), CONFIG_ERROR);
    }
}

TEST(flags_win_over_environment)
{
    setenv("LEASED_TTL", "2s", 1);
    setenv("LEASED_LISTEN", "127.0.0.1:1,unix:/tmp/a.sock", 1);
    struct config cfg;
    char *argv[] = {"leased", NULL};
    CHECK_EQ_I64(parse(&cfg, argv), CONFIG_OK);
    CHECK_EQ_I64(cfg.ttl_ns, 2000 * MS);
    CHECK_EQ_I64(cfg.nlisten, 2);
    char *argv2[] = {"leased", "--ttl", "500ms", "--listen", "[::1]:0",
                     "--listen", "127.0.0.2:5", NULL};
    CHECK_EQ_I64(parse(&cfg, argv2), CONFIG_OK);
    CHECK_EQ_I64(cfg.ttl_ns, 500 * MS);
    CHECK_EQ_I64(cfg.nlisten, 2);
    CHECK_STR(cfg.listen[0], "[::1]:0");
    unsetenv("LEASED_TTL");
    unsetenv("LEASED_LISTEN");
}

TEST(bad_flags_refused)
{
    struct config cfg;
    char *a1[] = {"leased", "--ttl", "50ms", NULL};
    CHECK_EQ_I64(parse(&cfg, a1), CONFIG_ERROR);
    char *a2[] = {"leased", "--ttl", "2h", NULL};
    CHECK_EQ_I64(parse(&cfg, a2), CONFIG_ERROR);
    char *a3[] = {"leased", "--bogus", NULL};
    CHECK_EQ_I64(parse(&cfg, a3), CONFIG_ERROR);
    char *a4[] = {"leased", "--listen", "0.0.0.0:7443", NULL};
    CHECK_EQ_I64(parse(&cfg, a4), CONFIG_ERROR);
    char *a5[] = {"leased", "--max-pending", "0", NULL};
    CHECK_EQ_I64(parse(&cfg, a5), CONFIG_ERROR);
    char *a6[] = {"leased", "--ttl", NULL};
    CHECK_EQ_I64(parse(&cfg, a6), CONFIG_ERROR);
    char *a7[] = {"leased", "extra", NULL};
    CHECK_EQ_I64(parse(&cfg, a7), CONFIG_ERROR);
    char *a7b[] = {"leased", "--import-from", "/old", NULL};
    CHECK_EQ_I64(parse(&cfg, a7b), CONFIG_ERROR);
    char *a7c[] = {"leased", "--postgres", "", NULL};
    CHECK_EQ_I64(parse(&cfg, a7c), CONFIG_ERROR);
    char *a7d[] = {"leased", "--max-clock-skew", "2h", NULL};
    CHECK_EQ_I64(parse(&cfg, a7d), CONFIG_ERROR);
    setenv("LEASED_TTL", "forever", 1);
    char *a8[] = {"leased", NULL};
    char err[256];
    CHECK_EQ_I64(config_parse(&cfg, 1, a8, err, sizeof(err)), CONFIG_ERROR);
    CHECK(strstr(err, "LEASED_TTL=forever") != NULL);
    /* A flag wins, so a broken variable it overrides does not matter. */
    char *a9[] = {"leased", "--ttl", "1s", NULL};
    CHECK_EQ_I64(parse(&cfg, a9), CONFIG_OK);
    unsetenv("LEASED_TTL");
    /* Messages name the flag and the value. */
    char *a10[] = {"leased", "--ttl", "50ms", NULL};
    CHECK_EQ_I64(config_parse(&cfg, 3, a10, err, sizeof(err)), CONFIG_ERROR);
    CHECK(strncmp(err, "--ttl 50ms: ", 12) == 0);
    char *a11[] = {"leased", "--max-pending=0", NULL};
    CHECK_EQ_I64(config_parse(&cfg, 2, a11, err, sizeof(err)), CONFIG_ERROR);
    CHECK(strncmp(err, "--max-pending 0: ", 17) == 0);
    /* A short flag cluster is named by its flag, and leaves nothing
     * behind for the next parse. */
    char *a12[] = {"leased", "-xy", NULL};
    CHECK_EQ_I64(config_parse(&cfg, 2, a12, err, sizeof(err)), CONFIG_ERROR);
    CHECK(strncmp(err, "unknown flag -x ", 16) == 0);
    char *a13[] = {"leased", "--ttl", "1s", NULL};
    CHECK_EQ_I64(config_parse(&cfg, 3, a13, err, sizeof(err)), CONFIG_OK);
}

TEST(plaintext_rule_and_tls_flags)
{
    struct config cfg;
    char err[256];
    /* Non-loopback TCP needs TLS, or --insecure said out loud. */
    char *a1[] = {"leased", "--listen", "0.0.0.0:7443", NULL};
    CHECK_EQ_I64(config_parse(&cfg, 3, a1, err, sizeof(err)), CONFIG_ERROR);
    CHECK(strstr(err, "--insecure") != NULL);
    char *a2[] = {"leased", "--listen", "0.0.0.0:7443", "--insecure", NULL};
    CHECK_EQ_I64(parse(&cfg, a2), CONFIG_OK);
    CHECK(cfg.insecure);
    char *a3[] = {"leased", "--listen", "10.0.0.1:7443", "--tls-cert", "c",
                  "--tls-key", "k", NULL};
    CHECK_EQ_I64(parse(&cfg, a3), CONFIG_OK);
    CHECK_STR(cfg.tls_cert, "c");
    CHECK_STR(cfg.tls_key, "k");
    CHECK(cfg.tls_client_ca == NULL && !cfg.insecure);
    /* Malformed addresses are refused whatever the security. */
    char *a4[] = {"leased", "--listen", "10.0.0.1", "--insecure", NULL};
    CHECK_EQ_I64(parse(&cfg, a4), CONFIG_ERROR);
    /* Certificate and key go together; a client CA needs both. */
    char *a5[] = {"leased", "--tls-cert", "c", NULL};
    CHECK_EQ_I64(config_parse(&cfg, 3, a5, err, sizeof(err)), CONFIG_ERROR);
    CHECK(strstr(err, "go together") != NULL);
    char *a6[] = {"leased", "--tls-client-ca", "ca", NULL};
    CHECK_EQ_I64(parse(&cfg, a6), CONFIG_ERROR);
    /* From the environment too. */
    setenv("LEASED_INSECURE", "1", 1);
    setenv("LEASED_AUTH_TOKEN_FILE", "/etc/leased/tokens", 1);
    char *a7[] = {"leased", "--listen", "0.0.0.0:1", NULL};
    CHECK_EQ_I64(parse(&cfg, a7), CONFIG_OK);
    CHECK(cfg.insecure);
    CHECK_STR(cfg.auth_token_file, "/etc/leased/tokens");
    setenv("LEASED_INSECURE", "maybe", 1);
    CHECK_EQ_I64(parse(&cfg, a7), CONFIG_ERROR);
    unsetenv("LEASED_INSECURE");
    unsetenv("LEASED_AUTH_TOKEN_FILE");
}

TEST(socket_mode)
{
    struct config cfg;
    char *a1[] = {"leased", NULL};
    CHECK_EQ_I64(parse(&cfg, a1), CONFIG_OK);
    CHECK_EQ_I64(cfg.socket_mode, 0660);
    char *a2[] = {"leased", "--socket-mode", "0600", NULL};
    CHECK_EQ_I64(parse(&cfg, a2), CONFIG_OK);
    CHECK_EQ_I64(cfg.socket_mode, 0600);
    char *a3[] = {"leased", "--socket-mode", "666", NULL};
    CHECK_EQ_I64(parse(&cfg, a3), CONFIG_OK);
    CHECK_EQ_I64(cfg.socket_mode, 0666);
    const char *bad[] = {"400", "060", "1777", "8", "abc", "", "-600"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char *a[] = {"leased", "--socket-mode", (char *)bad[i], NULL};
        CHECK_EQ_I64(parse(&cfg, a), CONFIG_ERROR);
    }
}

static const struct config_option *find(const char *name)
{
    for (size_t i = 0; i < config_noptions; i++)
        if (strcmp(config_options[i].name, name) == 0)
            return &config_options[i];
    return NULL;
}

static bool tried[64]; /* by row, in every_option_by_flag_and_variable */

/* Parses `--name value` (`--name` for a switch) into c[0] and
 * env=value into c[1]: both must pass. Then env broken beside the flag:
 * alone it must fail, naming the variable; the flag must win over it. */
static bool both(struct config c[2], const char *name, const char *env,
                 const char *value)
{
    const struct config_option *o = find(name);
    if (o == NULL || strcmp(o->env, env) != 0) {
        fprintf(stderr, "no row --%s with %s\n", name, env);
        return false;
    }
    tried[o - config_options] = true;
    char flag[64], err[256];
    snprintf(flag, sizeof(flag), "--%s", name);
    char *by_flag[] = {"leased", flag,
                       o->kind == CONFIG_SWITCH ? NULL : (char *)value, NULL};
    char *none[] = {"leased", NULL};
    bool ok = parse(&c[0], by_flag) == CONFIG_OK;
    setenv(env, value, 1);
    ok = parse(&c[1], none) == CONFIG_OK && ok;
    /* An empty value is wrong for every kind but a list, which is then
     * empty. */
    setenv(env, o->kind == CONFIG_ADDRS ? "bad" : "", 1);
    struct config other;
    ok = config_parse(&other, 1, none, err, sizeof(err)) == CONFIG_ERROR &&
         strncmp(err, env, strlen(env)) == 0 && ok;
    ok = parse(&other, by_flag) == CONFIG_OK && ok;
    unsetenv(env);
    if (!ok)
        fprintf(stderr, "--%s / %s=%s: %s\n", name, env, value, err);
    return ok;
}

/* Each option by its flag and by its variable, with a value other than
 * its default, lands in its own field: written out here, not read from
 * the table, so that a wrong name, variable or field fails. */
TEST(every_option_by_flag_and_variable)
{
    clear_env();
    CHECK(config_noptions <= sizeof(tried) / sizeof(tried[0]));
    memset(tried, 0, sizeof(tried));
    struct config c[2];
    CHECK(both(c, "listen", "LEASED_LISTEN", "unix:/tmp/t.sock"));
    CHECK(c[0].nlisten == 1 && c[1].nlisten == 1);
    CHECK_STR(c[0].listen[0], "unix:/tmp/t.sock");
    CHECK_STR(c[1].listen[0], "unix:/tmp/t.sock");
    CHECK(both(c, "data-dir", "LEASED_DATA_DIR", "/var/lib/leased"));
    CHECK_STR(c[0].data_dir, "/var/lib/leased");
    CHECK_STR(c[1].data_dir, "/var/lib/leased");
    CHECK(both(c, "ttl", "LEASED_TTL", "1m"));
    CHECK(c[0].ttl_ns == 60000 * MS && c[1].ttl_ns == 60000 * MS);
    CHECK(both(c, "log-level", "LEASED_LOG_LEVEL", "debug"));
    CHECK(c[0].log_level == LOG_DEBUG && c[1].log_level == LOG_DEBUG);
    CHECK(both(c, "max-pending", "LEASED_MAX_PENDING", "7"));
    CHECK(c[0].max_pending == 7 && c[1].max_pending == 7);
    CHECK(both(c, "watch-history", "LEASED_WATCH_HISTORY", "5"));
    CHECK(c[0].watch_history == 5 && c[1].watch_history == 5);
    setenv("LEASED_TLS_KEY", "k", 1); /* they go together */
    CHECK(both(c, "tls-cert", "LEASED_TLS_CERT", "c"));
    CHECK_STR(c[0].tls_cert, "c");
    CHECK_STR(c[1].tls_cert, "c");
    unsetenv("LEASED_TLS_KEY");
    setenv("LEASED_TLS_CERT", "c", 1);
    CHECK(both(c, "tls-key", "LEASED_TLS_KEY", "k"));
    CHECK_STR(c[0].tls_key, "k");
    CHECK_STR(c[1].tls_key, "k");
    setenv("LEASED_TLS_KEY", "k", 1);
    CHECK(both(c, "tls-client-ca", "LEASED_TLS_CLIENT_CA", "ca"));
    CHECK_STR(c[0].tls_client_ca, "ca");
    CHECK_STR(c[1].tls_client_ca, "ca");
    unsetenv("LEASED_TLS_CERT");
    unsetenv("LEASED_TLS_KEY");
    CHECK(both(c, "insecure", "LEASED_INSECURE", "true"));
    CHECK(c[0].insecure && c[1].insecure);
    CHECK(both(c, "auth-token-file", "LEASED_AUTH_TOKEN_FILE", "/t"));
    CHECK_STR(c[0].auth_token_file, "/t");
    CHECK_STR(c[1].auth_token_file, "/t");
    CHECK(both(c, "admin-token-file", "LEASED_ADMIN_TOKEN_FILE", "/a"));
    CHECK_STR(c[0].admin_token_file, "/a");
    CHECK_STR(c[1].admin_token_file, "/a");
    CHECK(both(c, "policy-file", "LEASED_POLICY_FILE", "/p"));
    CHECK_STR(c[0].policy_file, "/p");
    CHECK_STR(c[1].policy_file, "/p");
    CHECK(both(c, "socket-mode", "LEASED_SOCKET_MODE", "600"));
    CHECK(c[0].socket_mode == 0600 && c[1].socket_mode == 0600);
    CHECK(both(c, "metrics-listen", "LEASED_METRICS_LISTEN", "[::1]:9464"));
    CHECK_STR(c[0].metrics_listen, "[::1]:9464");
    CHECK_STR(c[1].metrics_listen, "[::1]:9464");
    CHECK(both(c, "drain-timeout", "LEASED_DRAIN_TIMEOUT", "2s"));
    CHECK(c[0].drain_ns == 2000 * MS && c[1].drain_ns == 2000 * MS);
    CHECK(both(c, "raise-token-floor", "LEASED_RAISE_TOKEN_FLOOR", "9"));
    CHECK(c[0].raise_token_floor == 9 && c[1].raise_token_floor == 9);
    CHECK(both(c, "postgres", "LEASED_POSTGRES", "dbname=leases"));
    CHECK_STR(c[0].postgres, "dbname=leases");
    CHECK_STR(c[1].postgres, "dbname=leases");
    CHECK(both(c, "max-clock-skew", "LEASED_MAX_CLOCK_SKEW", "0ms"));
    CHECK(c[0].max_skew_ns == 0 && c[1].max_skew_ns == 0);
    setenv("LEASED_POSTGRES", "dbname=x", 1); /* it needs --postgres */
    CHECK(both(c, "import-from", "LEASED_IMPORT_FROM", "/old"));
    CHECK_STR(c[0].import_from, "/old");
    CHECK_STR(c[1].import_from, "/old");
    unsetenv("LEASED_POSTGRES");
    CHECK(both(c, "postgres-connections", "LEASED_POSTGRES_CONNECTIONS",
               "4"));
    CHECK(c[0].pg_connections == 4 && c[1].pg_connections == 4);
    CHECK(both(c, "postgres-timeout", "LEASED_POSTGRES_TIMEOUT", "750ms"));
    CHECK(c[0].pg_timeout_ns == 750 * MS && c[1].pg_timeout_ns == 750 * MS);
    CHECK(both(c, "max-streams", "LEASED_MAX_STREAMS", "10"));
    CHECK(c[0].limits.max_streams == 10 && c[1].limits.max_streams == 10);
    CHECK(both(c, "max-metadata-size", "LEASED_MAX_METADATA_SIZE", "2048"));
    CHECK(c[0].limits.max_metadata_bytes == 2048 &&
          c[1].limits.max_metadata_bytes == 2048);
    CHECK(both(c, "keepalive-min-time", "LEASED_KEEPALIVE_MIN_TIME", "1s"));
    CHECK(c[0].limits.keepalive_min_ns == 1000 * MS &&
          c[1].limits.keepalive_min_ns == 1000 * MS);
    CHECK(both(c, "max-ping-strikes", "LEASED_MAX_PING_STRIKES", "0"));
    CHECK(c[0].limits.max_ping_strikes == 0 &&
          c[1].limits.max_ping_strikes == 0);
    CHECK(both(c, "handshake-timeout", "LEASED_HANDSHAKE_TIMEOUT", "3s"));
    CHECK(c[0].limits.handshake_timeout_ns == 3000 * MS &&
          c[1].limits.handshake_timeout_ns == 3000 * MS);
    CHECK(both(c, "max-connection-idle", "LEASED_MAX_CONNECTION_IDLE", "0"));
    CHECK(c[0].limits.max_idle_ns == 0 && c[1].limits.max_idle_ns == 0);
    CHECK(both(c, "max-connection-age", "LEASED_MAX_CONNECTION_AGE", "1h"));
    CHECK(c[0].limits.max_age_ns == 3600000 * MS &&
          c[1].limits.max_age_ns == 3600000 * MS);
    /* And no row went untried. */
    for (size_t i = 0; i < config_noptions; i++) {
        if (!tried[i])
            fprintf(stderr, "untested option --%s\n", config_options[i].name);
        CHECK(tried[i]);
    }
}

/* The message of each kind, word for word as before the table. */
TEST(messages)
{
    clear_env();
    static const struct {
        const char *args[4], *message;
    } cases[] = {
        {{"--metrics-listen", "unix:/m"}, "--metrics-listen unix:/m: want "
                                          "HOST:PORT"},
        {{"--tls-cert", ""}, "--tls-cert : empty file name"},
        {{"--data-dir", ""}, "--data-dir : empty directory"},
        {{"--max-streams", "0"}, "--max-streams 0: want 1..100000"},
        {{"--max-ping-strikes=1001"}, "--max-ping-strikes 1001: want 0..1000"},
        {{"--max-pending", "-1"}, "--max-pending -1: want 1..10000000"},
        {{"--raise-token-floor", "0"},
         "--raise-token-floor 0: want 1..4611686018427387904"},
        {{"--ttl", "2h"}, "--ttl 2h: want a duration from 100ms to 1h (e.g. "
                          "500ms, 30s, 1m)"},
        {{"--drain-timeout", "0"},
         "--drain-timeout 0: want a duration from 100ms to 24h"},
        {{"--max-connection-idle", "25h"},
         "--max-connection-idle 25h: want a duration from 100ms to 24h, or "
         "0 for never"},
        {{"--socket-mode", "400"},
         "--socket-mode 400: want an octal mode from 600 to 777 that lets "
         "the owner read and write (e.g. 660)"},
        {{"--log-level", "loud"},
         "--log-level loud: want debug, info, warn or error"},
        {{"--ttl"}, "--ttl needs a value (see --help)"},
        {{"--bogus"}, "unknown flag --bogus (see --help)"},
        /* A prefix of one flag is that flag; of several, none. */
        {{"--max", "5"}, "unknown flag --max (see --help)"},
        {{"--max-pe", "0"}, "--max-pending 0: want 1..10000000"},
        {{"--insecure=1"}, "--insecure takes no value (see --help)"},
        {{"--ttl", "1s", "x"}, "unexpected argument x (see --help)"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char *argv[6] = {"leased"};
        int argc = 1;
        while (argc - 1 < 4 && cases[i].args[argc - 1] != NULL) {
            argv[argc] = (char *)cases[i].args[argc - 1];
            argc++;
        }
        struct config cfg;
        char err[256] = "";
        CHECK_EQ_I64(config_parse(&cfg, argc, argv, err, sizeof(err)),
                     CONFIG_ERROR);
        CHECK_STR(err, cases[i].message);
    }
    char many[17 * 16] = "", *argv[2 * 17 + 1] = {"leased"};
    for (int i = 0; i < 17; i++) {
        argv[1 + 2 * i] = "--listen";
        argv[2 + 2 * i] = many + 16 * i;
        snprintf(many + 16 * i, 16, "127.0.0.1:%d", i);
    }
    struct config cfg;
    char err[256] = "";
    CHECK_EQ_I64(config_parse(&cfg, 35, argv, err, sizeof(err)),
                 CONFIG_ERROR);
    CHECK_STR(err, "--listen 127.0.0.1:16: at most 16 addresses");
    CHECK_EQ_I64(config_parse(&cfg, 33, argv, err, sizeof(err)), CONFIG_OK);
    char long_list[1100];
    memset(long_list, 'x', sizeof(long_list) - 1);
    long_list[sizeof(long_list) - 1] = '\0';
    setenv("LEASED_LISTEN", long_list, 1);
    CHECK_EQ_I64(config_parse(&cfg, 1, argv, err, sizeof(err)), CONFIG_ERROR);
    CHECK_STR(err, "LEASED_LISTEN: too long");
    setenv("LEASED_LISTEN", "x,127.0.0.1:1", 1);
    CHECK_EQ_I64(config_parse(&cfg, 1, argv, err, sizeof(err)), CONFIG_ERROR);
    CHECK(strncmp(err, "LEASED_LISTEN=x: ", 17) == 0);
    unsetenv("LEASED_LISTEN");
}

/* What config_parse() prints for --help, caught from stdout; its runs of
 * spaces and newlines made single spaces in *flat. */
static bool help_text(char *text, size_t len, char *flat)
{
    fflush(stdout);
    FILE *f = tmpfile();
    int saved = dup(STDOUT_FILENO);
    if (f == NULL || saved < 0 || dup2(fileno(f), STDOUT_FILENO) < 0)
        return false;
    struct config cfg;
    char *argv[] = {"leased", "--help", NULL};
    int rc = parse(&cfg, argv);
    fflush(stdout);
    dup2(saved, STDOUT_FILENO);
    close(saved);
    rewind(f);
    size_t n = fread(text, 1, len - 1, f);
    fclose(f);
    text[n] = '\0';
    size_t k = 0;
    for (const char *p = text; *p != '\0'; p++)
        if (!(*p == ' ' || *p == '\n') ||
            (k > 0 && flat[k - 1] != ' '))
            flat[k++] = *p == '\n' ? ' ' : *p;
    flat[k] = '\0';
    return rc == CONFIG_EXIT && n < len - 1;
}

/* --help has each row, its help whole, then "[VARIABLE…; default D]",
 * and nothing else but --help and --version, in 79 columns. */
TEST(help_lists_every_option)
{
    static char text[16384], flat[16384];
    CHECK(help_text(text, sizeof(text), flat));
    for (size_t i = 0; i < config_noptions; i++) {
        const struct config_option *o = &config_options[i];
        char want[1024];
        snprintf(want, sizeof(want), "--%s%s%s %s [%s", o->name,
                 o->arg != NULL ? " " : "", o->arg != NULL ? o->arg : "",
                 o->help, o->env);
        const char *at = strstr(flat, want);
        const char *end = at != NULL ? strchr(at, ']') : NULL;
        if (end == NULL) {
            fprintf(stderr, "--help lacks \"%s…]\"\n", want);
            CHECK(end != NULL);
            continue;
        }
        char def[128] = "";
        if (o->def != NULL)
            snprintf(def, sizeof(def), "; default %s]", o->def);
        size_t n = strlen(def);
        CHECK((size_t)(end + 1 - at) >= n &&
              strncmp(end + 1 - n, def, n) == 0);
        const char *note = at + strlen(want); /* after "[VARIABLE" */
        CHECK(o->def != NULL ||
              memchr(note, ';', (size_t)(end - note)) == NULL);
    }
    int entries = 0;
    for (const char *line = text; *line != '\0';) {
        size_t n = strcspn(line, "\n");
        CHECK(n <= 79);
        entries += strncmp(line, "  --", 4) == 0;
        line += n + (line[n] == '\n');
    }
    CHECK_EQ_I64(entries, config_noptions + 2);
    CHECK(strstr(flat, " --help print this and exit") != NULL);
    CHECK(strstr(flat, " --version print the version and exit") != NULL);
}

/* Cell k (0 first) of a table row "| a | b | c |", trimmed, into out. */
static void cell(const char *row, int k, char *out, size_t len)
{
    const char *bar = row; /* the '|' before cell k */
    for (int i = 0; i < k && bar != NULL; i++)
        bar = strchr(bar + 1, '|');
    const char *end = bar != NULL ? strchr(bar + 1, '|') : NULL;
    out[0] = '\0';
    if (end == NULL)
        return;
    const char *start = bar + 1 + strspn(bar + 1, " ");
    size_t n = (size_t)(end - start);
    while (n > 0 && start[n - 1] == ' ')
        n--;
    snprintf(out, len, "%.*s", (int)n, start);
}

/* The flag tables of docs/operations.md: each row of config_options
 * once, with its variable, its value's name and its default (or "none"
 * or "off" when it has none); no other flag but --help and --version. */
TEST(docs_list_every_option)
{
    const char *path = getenv("OPERATIONS_MD"); /* tests/meson.build */
    FILE *f = path != NULL ? fopen(path, "r") : NULL;
    if (f == NULL)
        fprintf(stderr, "cannot read OPERATIONS_MD=%s\n", path ? path : "");
    CHECK(f != NULL);
    if (f == NULL)
        return;
    int seen[64] = {0};
    CHECK(config_noptions <= sizeof(seen) / sizeof(seen[0]));
    char row[4096];
    while (fgets(row, sizeof(row), f) != NULL) {
        if (strncmp(row, "| `--", 5) != 0)
            continue;
        char flag[256], env[256], def[256];
        cell(row, 0, flag, sizeof(flag)); /* `--name ARG` */
        cell(row, 1, env, sizeof(env));   /* `LEASED_X` (comma-separated) */
        cell(row, 2, def, sizeof(def));   /* `30s`, none, off */
        if (strcmp(flag, "`--help`, `--version`") == 0)
            continue;
        size_t n = strcspn(flag + 3, " `");
        char name[128];
        snprintf(name, sizeof(name), "%.*s", (int)n, flag + 3);
        const struct config_option *o = find(name);
        if (o == NULL) {
            fprintf(stderr, "docs: --%s is no option\n", name);
            CHECK(o != NULL);
            continue;
        }
        seen[o - config_options]++;
        char want[256];
        snprintf(want, sizeof(want), "`--%s%s%s`", o->name,
                 o->arg != NULL ? " " : "", o->arg != NULL ? o->arg : "");
        CHECK_STR(flag, want);
        size_t n_env = strlen(o->env);
        CHECK(env[0] == '`' && strncmp(env + 1, o->env, n_env) == 0 &&
              (env[1 + n_env] == '`' || env[1 + n_env] == '='));
        if (o->def != NULL) {
            snprintf(want, sizeof(want), "`%s`", o->def);
            if (strncmp(def, want, strlen(want)) != 0)
                fprintf(stderr, "docs: --%s default %s, not %s\n", o->name,
                        def, want);
            CHECK(strncmp(def, want, strlen(want)) == 0);
        } else {
            CHECK(strcmp(def, "none") == 0 || strcmp(def, "off") == 0);
        }
    }
    fclose(f);
    for (size_t i = 0; i < config_noptions; i++) {
        if (seen[i] != 1)
            fprintf(stderr, "docs list --%s %d times\n",
                    config_options[i].name, seen[i]);
        CHECK_EQ_I64(seen[i], 1);
    }
}

/* A man page's line without its escapes for a hyphen and for the
 * font: "\\-\\-listen" reads "--listen", "\\fIX\\fP" reads "X". */
static void unescape(const char *in, char *out, size_t len)
{
    size_t k = 0;
    for (const char *p = in; *p != '\0' && *p != '\n' && k + 1 < len; p++) {
        if (p[0] == '\\' && p[1] == '-') {
            out[k++] = '-';
            p++;
        } else if (p[0] == '\\' && p[1] == 'f' && p[2] != '\0') {
            p += 2;
        } else {
            out[k++] = *p;
        }
    }
    out[k] = '\0';
}

/* docs/leased.8's OPTIONS: each row of config_options has one entry
 * (".TP", then ".BI \\-\\-NAME \" ARG\"", or ".B \\-\\-NAME" for a
 * switch) that names its variable and, when it has one, says
 * "Default: D."; no entry for a flag that is no option but --help and
 * --version. So a flag added, renamed or given another default in
 * config.c, and not in the man page, fails here. */
TEST(man_page_lists_every_option)
{
    const char *path = getenv("LEASED_8"); /* tests/meson.build */
    FILE *f = path != NULL ? fopen(path, "r") : NULL;
    if (f == NULL)
        fprintf(stderr, "cannot read LEASED_8=%s\n", path ? path : "");
    CHECK(f != NULL);
    if (f == NULL)
        return;
    int seen[64] = {0};
    CHECK(config_noptions <= sizeof(seen) / sizeof(seen[0]));
    static char entry[8192];
    const struct config_option *o = NULL; /* the entry being read */
    bool after_tp = false;
    char line[1024], text[1024];
    for (bool more = true; more;) {
        more = fgets(line, sizeof(line), f) != NULL;
        unescape(more ? line : "", text, sizeof(text));
        bool ends = !more || strncmp(text, ".TP", 3) == 0 ||
                    strncmp(text, ".SS", 3) == 0 ||
                    strncmp(text, ".SH", 3) == 0;
        if (ends && o != NULL) {
            if (strstr(entry, o->env) == NULL)
                fprintf(stderr, "leased.8: --%s lacks %s\n", o->name,
                        o->env);
            CHECK(strstr(entry, o->env) != NULL);
            if (o->def != NULL) {
                char want[128];
                snprintf(want, sizeof(want), "Default: %s.", o->def);
                if (strstr(entry, want) == NULL)
                    fprintf(stderr, "leased.8: --%s lacks \"%s\"\n",
                            o->name, want);
                CHECK(strstr(entry, want) != NULL);
            }
            o = NULL;
        }
        if (o != NULL) {
            size_t n = strlen(entry);
            snprintf(entry + n, sizeof(entry) - n, "%s ", text);
        }
        /* The line after .TP is the entry's tag. */
        if (after_tp && (strncmp(text, ".BI --", 6) == 0 ||
                         strncmp(text, ".B --", 5) == 0)) {
            const char *flag = strchr(text, '-') + 2;
            size_t n = strcspn(flag, " \"");
            char name[128];
            snprintf(name, sizeof(name), "%.*s", (int)n, flag);
            if (strcmp(name, "help") != 0 && strcmp(name, "version") != 0) {
                o = find(name);
                if (o == NULL)
                    fprintf(stderr, "leased.8: --%s is no option\n", name);
                CHECK(o != NULL);
            }
            if (o != NULL) {
                seen[o - config_options]++;
                char want[256];
                if (o->arg != NULL)
                    snprintf(want, sizeof(want), ".BI --%s \" %s\"",
                             o->name, o->arg);
                else
                    snprintf(want, sizeof(want), ".B --%s", o->name);
                CHECK_STR(text, want);
                entry[0] = '\0';
            }
        }
        after_tp = strncmp(text, ".TP", 3) == 0;
    }
    fclose(f);
    for (size_t i = 0; i < config_noptions; i++) {
        if (seen[i] != 1)
            fprintf(stderr, "leased.8 lists --%s %d times\n",
                    config_options[i].name, seen[i]);
        CHECK_EQ_I64(seen[i], 1);
    }
}

CHECK_MAIN(durations, listen_addresses, defaults, raise_token_floor,
           flags_win_over_environment, bad_flags_refused,
           plaintext_rule_and_tls_flags, socket_mode,
           every_option_by_flag_and_variable, messages,
           help_lists_every_option, docs_list_every_option,
           man_page_lists_every_option)
