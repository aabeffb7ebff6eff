/*
 * One conformance suite (liblease's lease_conformance_run), every
 * backend: the in-memory and the file-lock ones on a fake clock, and the
 * real leased through the gRPC driver on a short TTL with real sleeps.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "check.h"
#include "daemon_proc.h"
#include "lease.h"

static int64_t fake_now = INT64_C(1700000000000000000);

static int64_t fake_clock(void *arg)
{
    (void)arg;
    return fake_now;
}

static void fake_advance(void *arg, int64_t ns)
{
    (void)arg;
    fake_now += ns;
}

static void real_sleep(void *arg, int64_t ns)
{
    (void)arg;
    struct timespec ts = {ns / 1000000000, ns % 1000000000};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

TEST(memory)
{
    struct lease_client *c;
    int64_t ttl = INT64_C(30000000000);
    CHECK_EQ_I64(lease_memory_open(ttl, fake_clock, NULL, &c), LEASE_OK);
    struct lease_conformance conf = {
        .client = c, .ttl_ns = ttl, .advance = fake_advance,
        .report = stdout};
    CHECK_EQ_I64(lease_conformance_run(&conf), 0);
    lease_client_destroy(c);
}

TEST(file)
{
    char dir[] = "/tmp/leased-files-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    struct lease_client *c;
    int64_t ttl = INT64_C(30000000000);
    CHECK_EQ_I64(lease_file_open(dir, ttl, fake_clock, NULL, &c), LEASE_OK);
    struct lease_conformance conf = {
        .client = c, .ttl_ns = ttl, .advance = fake_advance,
        .report = stdout, .prefix = "file"};
    CHECK_EQ_I64(lease_conformance_run(&conf), 0);
    CHECK_EQ_I64(lease_conformance_run(&conf), 0); /* over its leftovers */
    lease_client_destroy(c);
    char cmd[64];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
}

/* The daemon's TTL: 2 s, or $LEASED_TEST_TTL_MS (slower runs, such as
 * under valgrind, need more). The suite waits out 2.65 TTLs a run; a
 * shorter TTL could expire a lease between two calls that expect it live
 * on a loaded machine (a sanitizer build beside other suites). */
TEST(daemon)
{
    const char *env = getenv("LEASED_TEST_TTL_MS");
    long ttl_ms = env != NULL ? atol(env) : 2000;
    char ttl[32];
    snprintf(ttl, sizeof(ttl), "%ldms", ttl_ms);
    struct daemon_proc d;
    if (daemon_start(&d, ttl, NULL) != 0) {
        CHECK(!"daemon started");
        return;
    }
    struct lease_client *c;
    struct lease_grpc_options opts = {.timeout_ms = 5000};
    CHECK_EQ_I64(lease_grpc_open(d.addr, &opts, &c), LEASE_OK);
    struct lease_conformance conf = {
        .client = c, .ttl_ns = ttl_ms * INT64_C(1000000),
        .advance = real_sleep, .report = stdout, .prefix = "daemon"};
    CHECK_EQ_I64(lease_conformance_run(&conf), 0);
    /* Twice against the same state: the suite must not trip over its own
     * leftovers. */
    CHECK_EQ_I64(lease_conformance_run(&conf), 0);
    lease_client_destroy(c);
    CHECK_EQ_I64(daemon_stop(&d), 0);
}

/* A backend that breaks a rule must fail the suite (negative control). */
static int broken_acquire(void *impl, const char *session_id,
                          const char *owner, struct lease *out, char *errmsg,
                          size_t len)
{
    /* Everyone wins, always with token 1. */
    (void)impl, (void)errmsg, (void)len;
    snprintf(out->session_id, sizeof(out->session_id), "%s", session_id);
    snprintf(out->owner, sizeof(out->owner), "%s", owner);
    out->token = 1;
    out->expiry_ns = fake_now + 1;
    return LEASE_OK;
}

static int broken_renew(void *impl, const struct lease *cur,
                        struct lease *out, char *errmsg, size_t len)
{
    (void)impl, (void)errmsg, (void)len;
    *out = *cur;
    out->expiry_ns++;
    return LEASE_OK;
}

static int broken_release(void *impl, const struct lease *cur, char *errmsg,
                          size_t len)
{
    (void)impl, (void)cur, (void)errmsg, (void)len;
    return LEASE_OK;
}

TEST(broken_backend_fails)
{
    static const struct lease_backend broken = {.acquire = broken_acquire,
                                                .renew = broken_renew,
                                                .release = broken_release};
    struct lease_client *c = lease_client_create(&broken, NULL);
    struct lease_conformance conf = {
        .client = c, .ttl_ns = 1000, .advance = fake_advance};
    CHECK(lease_conformance_run(&conf) >= 5);
    lease_client_destroy(c);
}

/* Every client is destroyed, so gRPC shuts down (no channel is left
 * open), and has finished before the process exits. */
static int grpc_shut_down(void)
{
    return lease_grpc_wait_shutdown(10000);
}

CHECK_MAIN_THEN(grpc_shut_down, memory, file, daemon, broken_backend_fails)
