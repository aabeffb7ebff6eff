/* Configuration: durations, listen addresses, flags and environment. */
#include <stdlib.h>

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
    const char *bad[] = {"", "5", "s", "1x", "-1s", "1.5s", "1s ", "ms",
                         "1001h", "22222222h", "100000000h", "999h3601s"};
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

TEST(defaults)
{
    unsetenv("LEASED_LISTEN");
    unsetenv("LEASED_TTL");
    struct config cfg;
    char *argv[] = {"leased", NULL};
    CHECK_EQ_I64(parse(&cfg, argv), CONFIG_OK);
    CHECK_EQ_I64(cfg.nlisten, 1);
    CHECK_STR(cfg.listen[0], "127.0.0.1:7443");
    CHECK_STR(cfg.data_dir, "./leased-data");
    CHECK_EQ_I64(cfg.ttl_ns, 30000 * MS);
    CHECK_EQ_U64(cfg.raise_token_floor, 0);
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

CHECK_MAIN(durations, listen_addresses, defaults, raise_token_floor,
           flags_win_over_environment, bad_flags_refused,
           plaintext_rule_and_tls_flags, socket_mode)
