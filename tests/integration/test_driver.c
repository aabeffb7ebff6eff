/*
 * liblease's gRPC driver against the real leased: TLS, mutual TLS, bearer
 * tokens, the plaintext rule, several targets with failover, and the
 * conformance suite over TLS with a token. Certificates come from
 * certs.py (openssl) for each run.
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "daemon_proc.h"
#include "lease.h"

static char certs[64]; /* the directory certs.py filled */
static char path_buf[8][128];

/* certs/NAME; a few at once may be live. */
static const char *cert(const char *name)
{
    static int next;
    char *p = path_buf[next++ % 8];
    snprintf(p, sizeof(path_buf[0]), "%s/%s", certs, name);
    return p;
}

/* A file of the daemon's only (mode 600) holding text. */
static void write_file(const char *path, const char *text)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    CHECK(fd >= 0 && write(fd, text, strlen(text)) == (ssize_t)strlen(text));
    close(fd);
}

static void make_certs(void)
{
    snprintf(certs, sizeof(certs), "/tmp/leased-driver-XXXXXX");
    CHECK(mkdtemp(certs) != NULL);
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "/usr/bin/python3 %s %s >/dev/null",
             getenv("LEASED_CERTS_PY"), certs);
    CHECK(system(cmd) == 0);
    write_file(cert("tokens"), "tok-123\n");
}

static void remove_certs(void)
{
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", certs);
    CHECK(system(cmd) == 0);
}

static void real_sleep(void *arg, int64_t ns)
{
    (void)arg;
    struct timespec ts = {ns / 1000000000, ns % 1000000000};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

/* A loopback port nobody listens on; or, given silent, one that listens
 * but never accepts (connections wait unanswered in its backlog, as with
 * a host that drops packets) until *silent is closed. */
static int loopback_port(int *silent)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t n = sizeof(a);
    CHECK(bind(s, (struct sockaddr *)&a, sizeof(a)) == 0);
    CHECK(getsockname(s, (struct sockaddr *)&a, &n) == 0);
    if (silent != NULL) {
        CHECK(listen(s, 16) == 0);
        *silent = s;
    } else {
        close(s);
    }
    return ntohs(a.sin_port);
}

static int dead_port(void)
{
    return loopback_port(NULL);
}

static int acquire(const char *target, const struct lease_grpc_options *o,
                   const char *session)
{
    struct lease_client *c;
    int rc = lease_grpc_open(target, o, &c);
    if (rc != LEASE_OK)
        return rc;
    struct lease l;
    rc = lease_acquire(c, session, "owner-1", &l);
    lease_client_destroy(c);
    return rc;
}

TEST(tls_and_token_pass_the_conformance_suite)
{
    make_certs();
    struct daemon_proc d;
    CHECK(daemon_start(&d, "2s", "--tls-cert", cert("server.pem"),
                       "--tls-key", cert("server.key"), "--auth-token-file",
                       cert("tokens"), NULL) == 0);
    struct lease_grpc_options o = {.tls_ca_file = cert("ca.pem"),
                                   .token = "tok-123"};
    struct lease_client *c;
    CHECK_EQ_I64(lease_grpc_open(d.addr, &o, &c), LEASE_OK);
    struct lease_conformance conf = {
        .client = c, .ttl_ns = 2000 * INT64_C(1000000),
        .advance = real_sleep, .report = stdout, .prefix = "tls"};
    CHECK_EQ_I64(lease_conformance_run(&conf), 0);
    lease_client_destroy(c);
    CHECK_EQ_I64(daemon_stop(&d), 0);
    remove_certs();
}

/* Mecatl's protocol works unchanged for an identity the policy allows
 * (a token without a name is token-LINE); outside it, the driver reports
 * LEASE_EDENIED. */
TEST(policy_allows_the_conformance_suite_and_denies_the_rest)
{
    make_certs();
    write_file(cert("named-tokens"), "tok-123\nnarrow tok-456\n");
    write_file(cert("policy"), "token-1 sessions=pol- owners=*\n"
                               "narrow sessions=pol- owners=owner-\n");
    struct daemon_proc d;
    CHECK(daemon_start(&d, "2s", "--auth-token-file",
                       cert("named-tokens"), "--policy-file", cert("policy"),
                       NULL) == 0);
    struct lease_grpc_options o = {.token = "tok-123"};
    struct lease_client *c;
    CHECK_EQ_I64(lease_grpc_open(d.addr, &o, &c), LEASE_OK);
    struct lease_conformance conf = {
        .client = c, .ttl_ns = 2000 * INT64_C(1000000),
        .advance = real_sleep, .report = stdout, .prefix = "pol"};
    CHECK_EQ_I64(lease_conformance_run(&conf), 0);
    struct lease l;
    CHECK_EQ_I64(lease_acquire(c, "other-1", "owner-a", &l), LEASE_EDENIED);
    CHECK(strstr(lease_errmsg(), "identity \"token-1\" may not use this "
                                 "session_id") != NULL);
    lease_client_destroy(c);
    o.token = "tok-456";
    CHECK_EQ_I64(lease_grpc_open(d.addr, &o, &c), LEASE_OK);
    CHECK_EQ_I64(lease_acquire(c, "pol-1", "owner-1", &l), LEASE_OK);
    CHECK_EQ_I64(lease_acquire(c, "pol-2", "intruder", &l), LEASE_EDENIED);
    CHECK(strstr(lease_errmsg(), "identity \"narrow\" may not use this "
                                 "owner") != NULL);
    lease_client_destroy(c);
    CHECK_EQ_I64(daemon_stop(&d), 0);
    remove_certs();
}

TEST(tls_and_token_refusals)
{
    make_certs();
    struct daemon_proc d;
    CHECK(daemon_start(&d, "5s", "--tls-cert", cert("server.pem"),
                       "--tls-key", cert("server.key"), "--auth-token-file",
                       cert("tokens"), NULL) == 0);
    /* A short deadline: refused connections are retried until then. */
    struct lease_grpc_options good = {.timeout_ms = 1000,
                                      .tls_ca_file = cert("ca.pem"),
                                      .token = "tok-123"};
    CHECK_EQ_I64(acquire(d.addr, &good, "a"), LEASE_OK);
    /* No token, a wrong one: the server says UNAUTHENTICATED. */
    struct lease_grpc_options o = good;
    o.token = NULL;
    CHECK_EQ_I64(acquire(d.addr, &o, "b"), LEASE_EUNAUTH);
    CHECK(strstr(lease_errmsg(), "bearer token") != NULL);
    o.token = "tok-124";
    CHECK_EQ_I64(acquire(d.addr, &o, "b"), LEASE_EUNAUTH);
    /* A CA that did not sign the server's certificate; plaintext. */
    o = good;
    o.tls_ca_file = cert("foreign-ca.pem");
    CHECK_EQ_I64(acquire(d.addr, &o, "b"), LEASE_EUNAVAILABLE);
    o = good;
    o.tls_ca_file = NULL;
    CHECK_EQ_I64(acquire(d.addr, &o, "b"), LEASE_EUNAVAILABLE);
    /* The name checked in the certificate. */
    o = good;
    o.tls_server_name = "localhost";
    CHECK_EQ_I64(acquire(d.addr, &o, "c"), LEASE_OK);
    o.tls_server_name = "other.example";
    CHECK_EQ_I64(acquire(d.addr, &o, "d"), LEASE_EUNAVAILABLE);
    CHECK_EQ_I64(daemon_stop(&d), 0);
    remove_certs();
}

TEST(mutual_tls)
{
    make_certs();
    struct daemon_proc d;
    CHECK(daemon_start(&d, "5s", "--tls-cert", cert("server.pem"),
                       "--tls-key", cert("server.key"), "--tls-client-ca",
                       cert("ca.pem"), NULL) == 0);
    struct lease_grpc_options o = {.timeout_ms = 1000,
                                   .tls_ca_file = cert("ca.pem"),
                                   .tls_cert_file = cert("client1.pem"),
                                   .tls_key_file = cert("client1.key")};
    CHECK_EQ_I64(acquire(d.addr, &o, "m"), LEASE_OK);
    o.tls_cert_file = cert("foreign.pem");
    o.tls_key_file = cert("foreign.key");
    CHECK_EQ_I64(acquire(d.addr, &o, "n"), LEASE_EUNAVAILABLE);
    o.tls_cert_file = o.tls_key_file = NULL;
    CHECK_EQ_I64(acquire(d.addr, &o, "n"), LEASE_EUNAVAILABLE);
    CHECK_EQ_I64(daemon_stop(&d), 0);
    remove_certs();
}

TEST(open_checks_its_options)
{
    make_certs();
    struct lease_client *c;
    /* Plaintext beyond loopback: refused; with TLS, fine. */
    CHECK_EQ_I64(lease_grpc_open("10.0.0.1:7443", NULL, &c), LEASE_EINVAL);
    CHECK(strstr(lease_errmsg(), "plaintext") != NULL);
    CHECK_EQ_I64(lease_grpc_open("127.0.0.1:1,10.0.0.1:7443", NULL, &c),
                 LEASE_EINVAL);
    struct lease_grpc_options o = {.tls_ca_file = cert("ca.pem")};
    CHECK_EQ_I64(lease_grpc_open("10.0.0.1:7443,leases.example:7443", &o,
                                 &c),
                 LEASE_OK);
    lease_client_destroy(c);
    /* Bad combinations and files. */
    struct lease_grpc_options bad[] = {
        {.tls_cert_file = cert("client1.pem"),
         .tls_key_file = cert("client1.key")},
        {.tls_ca_file = cert("ca.pem"), .tls_cert_file = cert("client1.pem")},
        {.tls_ca_file = "/nonexistent/ca.pem"},
        {.token = "has space"},
        {.token = ""},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        CHECK_EQ_I64(lease_grpc_open("127.0.0.1:1", &bad[i], &c),
                     LEASE_EINVAL);
        CHECK(c == NULL);
    }
    CHECK_EQ_I64(lease_grpc_open("127.0.0.1:1,,127.0.0.1:2", NULL, &c),
                 LEASE_EINVAL);
    CHECK_EQ_I64(lease_grpc_open("127.0.0.1:1,127.0.0.1:2,127.0.0.1:3,"
                                 "127.0.0.1:4,127.0.0.1:5,127.0.0.1:6,"
                                 "127.0.0.1:7,127.0.0.1:8,127.0.0.1:9",
                                 NULL, &c),
                 LEASE_EINVAL);
    remove_certs();
}

TEST(failover_to_the_next_target)
{
    struct daemon_proc d;
    CHECK(daemon_start(&d, "5s", NULL) == 0);
    char targets[300];
    snprintf(targets, sizeof(targets), "127.0.0.1:%d,%s", dead_port(),
             d.addr);
    struct lease_grpc_options o = {.timeout_ms = 5000};
    struct lease_client *c;
    CHECK_EQ_I64(lease_grpc_open(targets, &o, &c), LEASE_OK);
    struct lease a, b;
    CHECK_EQ_I64(lease_acquire(c, "f", "alice", &a), LEASE_OK);
    CHECK_EQ_I64(lease_renew(c, &a, &b), LEASE_OK); /* stays on the live one */
    CHECK_EQ_I64(b.token, a.token);
    CHECK_EQ_I64(lease_acquire(c, "f", "bob", &b), LEASE_EHELD);
    lease_client_destroy(c);
    /* Every target down: unavailable, at the deadline. */
    snprintf(targets, sizeof(targets), "127.0.0.1:%d,127.0.0.1:%d",
             dead_port(), dead_port());
    o.timeout_ms = 800;
    CHECK_EQ_I64(lease_grpc_open(targets, &o, &c), LEASE_OK);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    CHECK_EQ_I64(lease_acquire(c, "f", "bob", &b), LEASE_EUNAVAILABLE);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double took = (double)(t1.tv_sec - t0.tv_sec) +
                  (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    CHECK(took > 0.5 && took < 3.0);
    lease_client_destroy(c);
    CHECK_EQ_I64(daemon_stop(&d), 0);
}

/* A first target that never answers takes its share of the deadline
 * only: the call is answered by the next. */
TEST(failover_past_a_silent_target)
{
    struct daemon_proc d;
    CHECK(daemon_start(&d, "5s", NULL) == 0);
    int silent;
    char targets[300];
    snprintf(targets, sizeof(targets), "127.0.0.1:%d,%s",
             loopback_port(&silent), d.addr);
    struct lease_grpc_options o = {.timeout_ms = 3000};
    struct lease_client *c;
    CHECK_EQ_I64(lease_grpc_open(targets, &o, &c), LEASE_OK);
    struct lease a, b;
    CHECK_EQ_I64(lease_acquire(c, "s", "alice", &a), LEASE_OK);
    CHECK_EQ_I64(lease_renew(c, &a, &b), LEASE_OK);
    CHECK_EQ_I64(lease_acquire(c, "s", "bob", &b), LEASE_EHELD);
    lease_client_destroy(c);
    close(silent);
    CHECK_EQ_I64(daemon_stop(&d), 0);
}

/* A server that restarts within the deadline: the call waits it out. */
TEST(restart_within_the_deadline_is_ridden_out)
{
    struct daemon_proc d;
    CHECK(daemon_start(&d, "5s", NULL) == 0);
    struct lease_grpc_options o = {.timeout_ms = 5000};
    struct lease_client *c;
    CHECK_EQ_I64(lease_grpc_open(d.addr, &o, &c), LEASE_OK);
    struct lease a, b;
    CHECK_EQ_I64(lease_acquire(c, "r", "alice", &a), LEASE_OK);
    char addr[128];
    snprintf(addr, sizeof(addr), "%s", d.addr);
    CHECK_EQ_I64(daemon_stop(&d), 0);
    /* Back on the same port a second later (a new data directory is fine
     * here: only the connection matters), while the call below waits. */
    pid_t pid = fork();
    if (pid == 0) {
        struct timespec pause = {1, 0};
        nanosleep(&pause, NULL);
        char data[] = "/tmp/leased-restart-XXXXXX";
        if (mkdtemp(data) == NULL)
            _exit(1);
        execl(getenv("LEASED_BIN"), "leased", "--listen", addr,
              "--data-dir", data, (char *)NULL);
        _exit(127);
    }
    CHECK(pid > 0);
    CHECK_EQ_I64(lease_acquire(c, "r2", "bob", &b), LEASE_OK);
    lease_client_destroy(c);
    kill(pid, SIGTERM);
    int status;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

static atomic_int keeper_lost;

static void trace_trouble(void *arg, const struct lease *l, int err,
                          const char *why)
{
    (void)arg, (void)l;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    fprintf(stderr, "TROUBLE %ld.%03ld err=%d %s\n", (long)ts.tv_sec % 100,
            ts.tv_nsec / 1000000, err, why);
}

static void count_lost(void *arg, const struct lease *l, int err)
{
    (void)arg, (void)l, (void)err;
    atomic_fetch_add(&keeper_lost, 1);
}

/* kill -9 of the daemon, back a second later on the same data: the
 * keeper rides it out (the restart quarantine keeps the lease its
 * owner's) and never reports the lease lost. The TTL leaves the
 * restarted daemon (slow to start under a sanitizer on a busy machine)
 * a few seconds before the keeper's lease would end. */
TEST(keeper_rides_out_a_daemon_kill9)
{
    struct daemon_proc d;
    CHECK(daemon_start(&d, "6s", NULL) == 0);
    struct lease_client *c;
    struct lease_grpc_options o = {.timeout_ms = 1000};
    CHECK_EQ_I64(lease_grpc_open(d.addr, &o, &c), LEASE_OK);
    struct lease_keeper_callbacks cb = {.lost = count_lost,
                                        .trouble = trace_trouble};
    struct lease_keeper_options ko = {.ttl_ns = 6 * INT64_C(1000000000)};
    struct lease_keeper *k;
    struct lease first;
    CHECK_EQ_I64(lease_keeper_start(c, "kept", "keeper-1", &ko, &cb, &k,
                                    &first),
                 LEASE_OK);
    kill(d.pid, SIGKILL);
    waitpid(d.pid, NULL, 0);
    d.pid = 0;
    struct timespec second = {1, 0};
    nanosleep(&second, NULL);
    char data[128];
    snprintf(data, sizeof(data), "%s/data", d.dir);
    pid_t pid = fork();
    if (pid == 0) {
        execl(getenv("LEASED_BIN"), "leased", "--listen", d.addr,
              "--data-dir", data, "--ttl", "6s", (char *)NULL);
        _exit(127);
    }
    struct timespec wait = {8, 0}; /* more than a TTL */
    nanosleep(&wait, NULL);
    CHECK(lease_keeper_valid(k));
    CHECK_EQ_I64(atomic_load(&keeper_lost), 0);
    struct lease now, other;
    lease_keeper_lease(k, &now);
    CHECK_EQ_I64(now.token, first.token);
    CHECK_EQ_I64(lease_acquire(c, "kept", "rival", &other), LEASE_EHELD);
    CHECK_EQ_I64(lease_keeper_stop(k), LEASE_OK);
    CHECK_EQ_I64(lease_acquire(c, "kept", "rival", &other), LEASE_OK);
    CHECK(other.token > first.token);
    lease_client_destroy(c);
    kill(pid, SIGTERM);
    int status;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    daemon_stop(&d); /* removes the directory */
}

/* Every client is destroyed, so gRPC shuts down (no channel is left
 * open), and has finished before the process exits. */
static int grpc_shut_down(void)
{
    return lease_grpc_wait_shutdown(10000);
}

CHECK_MAIN_THEN(grpc_shut_down, tls_and_token_pass_the_conformance_suite,
                policy_allows_the_conformance_suite_and_denies_the_rest,
                tls_and_token_refusals, mutual_tls, open_checks_its_options,
                failover_to_the_next_target, failover_past_a_silent_target,
                restart_within_the_deadline_is_ridden_out,
                keeper_rides_out_a_daemon_kill9)
