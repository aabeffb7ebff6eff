/* liblease's front door: argument checks, error texts, the driver's
 * address rule and its transport errors. */
#include <arpa/inet.h>
#include <stdbool.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "check.h"
#include "lease.h"

TEST(strerror_names_every_error)
{
    for (int e = LEASE_EUNAUTH; e <= LEASE_OK; e++)
        CHECK(strcmp(lease_strerror(e), "unknown error") != 0);
    CHECK_STR(lease_strerror(42), "unknown error");
}

TEST(grpc_refuses_plaintext_beyond_loopback)
{
    struct lease_client *c = (struct lease_client *)1;
    CHECK_EQ_I64(lease_grpc_open("10.1.2.3:7443", NULL, &c), LEASE_EINVAL);
    CHECK(c == NULL);
    CHECK(strstr(lease_errmsg(), "loopback") != NULL);
    CHECK_EQ_I64(lease_grpc_open("example.com:7443", NULL, &c),
                 LEASE_EINVAL);
    CHECK_EQ_I64(lease_grpc_open(NULL, NULL, &c), LEASE_EINVAL);
}

/* Binds a loopback TCP socket on a free port, listening or not; writes
 * "127.0.0.1:PORT" into target. Returns the socket. */
static int loopback_socket(bool listening, char *target, size_t len)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t alen = sizeof(a);
    CHECK(bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0);
    if (listening)
        CHECK(listen(fd, 16) == 0);
    CHECK(getsockname(fd, (struct sockaddr *)&a, &alen) == 0);
    snprintf(target, len, "127.0.0.1:%d", ntohs(a.sin_port));
    return fd;
}

TEST(unreachable_server_is_unavailable)
{
    /* A port nobody listens on: bind one, close it. */
    char target[64];
    close(loopback_socket(false, target, sizeof(target)));
    struct lease_client *c;
    struct lease_grpc_options o = {.timeout_ms = 2000};
    CHECK_EQ_I64(lease_grpc_open(target, &o, &c), LEASE_OK);
    struct lease l;
    int err = lease_acquire(c, "s", "o", &l);
    CHECK(err == LEASE_EUNAVAILABLE || err == LEASE_EDEADLINE);
    lease_client_destroy(c);
}

TEST(silent_server_is_deadline)
{
    /* Listens but never speaks HTTP/2: the outcome is unknown. */
    char target[64];
    int fd = loopback_socket(true, target, sizeof(target));
    struct lease_client *c;
    struct lease_grpc_options o = {.timeout_ms = 300};
    CHECK_EQ_I64(lease_grpc_open(target, &o, &c), LEASE_OK);
    struct lease l;
    CHECK_EQ_I64(lease_acquire(c, "s", "o", &l), LEASE_EDEADLINE);
    lease_client_destroy(c);
    close(fd);
}

TEST(arguments_checked_before_any_backend)
{
    struct lease_client *c;
    CHECK_EQ_I64(lease_memory_open(1000, NULL, NULL, &c), LEASE_OK);
    struct lease l;
    CHECK_EQ_I64(lease_acquire(c, NULL, "o", &l), LEASE_EINVAL);
    CHECK_EQ_I64(lease_acquire(c, "s", "", &l), LEASE_EINVAL);
    CHECK(strstr(lease_errmsg(), "owner") != NULL);
    CHECK_EQ_I64(lease_renew(c, NULL, &l), LEASE_EINVAL);
    CHECK_EQ_I64(lease_release(c, NULL), LEASE_EINVAL);
    lease_client_destroy(c);
    CHECK_EQ_I64(lease_memory_open(0, NULL, NULL, &c), LEASE_EINVAL);
    CHECK(c == NULL);
    lease_client_destroy(NULL);
}

TEST(renew_in_place)
{
    struct lease_client *c;
    CHECK_EQ_I64(lease_memory_open(INT64_C(30000000000), NULL, NULL, &c),
                 LEASE_OK);
    struct lease l;
    CHECK_EQ_I64(lease_acquire(c, "s", "o", &l), LEASE_OK);
    int64_t before = l.expiry_ns;
    CHECK_EQ_I64(lease_renew(c, &l, &l), LEASE_OK);
    CHECK(l.expiry_ns > before);
    CHECK_STR(l.session_id, "s");
    CHECK_STR(l.owner, "o");
    lease_client_destroy(c);
}

static int64_t fake_ns = INT64_C(1700000000000000000);

static int64_t fake_clock(void *arg)
{
    (void)arg;
    return fake_ns;
}

TEST(memory_collects_old_entries_and_tokens_still_rise)
{
    struct lease_client *c;
    int64_t ttl = INT64_C(1000000000);
    CHECK_EQ_I64(lease_memory_open(ttl, fake_clock, NULL, &c), LEASE_OK);
    struct lease a, b;
    CHECK_EQ_I64(lease_acquire(c, "s", "A", &a), LEASE_OK);
    CHECK_EQ_I64(lease_release(c, &a), LEASE_OK);
    fake_ns += 3 * ttl;
    char id[32];
    for (int i = 0; i < 2000; i++) { /* acquires collect as they go */
        snprintf(id, sizeof(id), "other-%d", i);
        CHECK_EQ_I64(lease_acquire(c, id, "B", &b), LEASE_OK);
    }
    CHECK_EQ_I64(lease_acquire(c, "s", "C", &b), LEASE_OK);
    CHECK(b.token > a.token);
    lease_client_destroy(c);
}

/* Every client is destroyed, so gRPC shuts down (no channel is left
 * open), and has finished before the process exits. */
static int grpc_shut_down(void)
{
    return lease_grpc_wait_shutdown(10000);
}

CHECK_MAIN_THEN(grpc_shut_down,
                memory_collects_old_entries_and_tokens_still_rise,
                strerror_names_every_error,
                grpc_refuses_plaintext_beyond_loopback,
                unreachable_server_is_unavailable, silent_server_is_deadline,
                arguments_checked_before_any_backend, renew_in_place)
