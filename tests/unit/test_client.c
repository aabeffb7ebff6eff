/* liblease's front door: argument checks, error texts, the driver's
 * address rule and its transport errors. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "lease.h"

TEST(strerror_names_every_error)
{
    for (int e = LEASE_EGONE; e <= LEASE_OK; e++)
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

static int64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * INT64_C(1000000000) + ts.tv_nsec;
}

static int64_t wall_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ts.tv_sec * INT64_C(1000000000) + ts.tv_nsec;
}

/* A backend without a Wait of its own (memory): lease_wait asks again
 * until the holder's lease ran out, or gives up at its deadline. */
TEST(wait_asks_a_backend_without_wait_until_the_lease_ends)
{
    struct lease_client *c;
    CHECK_EQ_I64(lease_memory_open(INT64_C(300000000), NULL, NULL, &c),
                 LEASE_OK);
    struct lease a, b;
    CHECK_EQ_I64(lease_acquire(c, "s", "A", &a), LEASE_OK);
    CHECK_EQ_I64(lease_wait(c, "s", "B", mono_ns() + INT64_C(10000000000), &b),
                 LEASE_OK);
    CHECK(b.token > a.token);
    CHECK(wall_ns() >= a.expiry_ns);
    int64_t start = mono_ns();
    CHECK_EQ_I64(lease_wait(c, "s", "C", start + INT64_C(100000000), &a),
                 LEASE_EHELD);
    CHECK(mono_ns() - start >= INT64_C(100000000));
    CHECK_EQ_I64(lease_wait(c, "s", "", start, &a), LEASE_EINVAL);
    lease_client_destroy(c);
}

/* A backend with a Wait of its own that answers what `wait_says`, and an
 * acquire that is held until `acquires` reaches `free_at`. */
struct scripted {
    int wait_says, waits, acquires, free_at;
};

static int scripted_acquire(void *impl, const char *session_id,
                            const char *owner, struct lease *out, char *errmsg,
                            size_t len)
{
    struct scripted *b = impl;
    if (++b->acquires < b->free_at)
        return LEASE_EHELD;
    memset(out, 0, sizeof(*out));
    snprintf(out->session_id, sizeof(out->session_id), "%s", session_id);
    snprintf(out->owner, sizeof(out->owner), "%s", owner);
    out->token = 7;
    return LEASE_OK;
}

static int scripted_wait(void *impl, const char *session_id, const char *owner,
                         int64_t deadline_ns, struct lease *out, char *errmsg,
                         size_t len)
{
    struct scripted *b = impl;
    b->waits++;
    if (b->wait_says == LEASE_EDEADLINE)
        while (mono_ns() < deadline_ns)
            ;
    snprintf(errmsg, len, "scripted");
    return b->wait_says;
}

static int scripted_renew(void *impl, const struct lease *cur,
                          struct lease *out, char *errmsg, size_t len)
{
    return LEASE_EHELD;
}

static int scripted_release(void *impl, const struct lease *cur, char *errmsg,
                            size_t len)
{
    return LEASE_OK;
}

static const struct lease_backend scripted_backend = {
    .acquire = scripted_acquire,
    .renew = scripted_renew,
    .release = scripted_release,
    .wait = scripted_wait,
};

/* A wait the server ended at the deadline is settled by one acquire,
 * whose answer is lease_wait's (a grant made as the call ended). A
 * server without Wait (UNSUPPORTED) is asked with acquire instead. */
TEST(wait_settles_its_deadline_and_falls_back_without_wait)
{
    struct scripted b = {.wait_says = LEASE_EDEADLINE, .free_at = 1};
    struct lease_client *c = lease_client_create(&scripted_backend, &b);
    CHECK(c != NULL);
    struct lease l;
    CHECK_EQ_I64(lease_wait(c, "s", "o", mono_ns() + 1000000, &l), LEASE_OK);
    CHECK(b.waits == 1 && b.acquires == 1 && l.token == 7);
    b = (struct scripted){.wait_says = LEASE_EDEADLINE, .free_at = 2};
    CHECK_EQ_I64(lease_wait(c, "s", "o", mono_ns() + 1000000, &l), LEASE_EHELD);
    CHECK(b.waits == 1 && b.acquires == 1);
    b = (struct scripted){.wait_says = LEASE_EUNSUPPORTED, .free_at = 2};
    CHECK_EQ_I64(lease_wait(c, "s", "o", mono_ns() + INT64_C(5000000000), &l),
                 LEASE_OK);
    CHECK(b.waits == 1 && b.acquires == 2);
    /* Any other answer of the wait is lease_wait's, with its reason. */
    b = (struct scripted){.wait_says = LEASE_EDENIED, .free_at = 1};
    CHECK_EQ_I64(lease_wait(c, "s", "o", INT64_MAX, &l), LEASE_EDENIED);
    CHECK(b.acquires == 0);
    CHECK_STR(lease_errmsg(), "scripted");
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
                arguments_checked_before_any_backend, renew_in_place,
                wait_asks_a_backend_without_wait_until_the_lease_ends,
                wait_settles_its_deadline_and_falls_back_without_wait)
