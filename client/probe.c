/*
 * leased-probe: asks a leased whether it is serving (grpc.health.v1
 * Check), for container health checks and scripts.
 *
 *   leased-probe [ADDR] [--timeout D] [--tls-ca FILE
 *                [--tls-cert FILE --tls-key FILE]]
 *
 * ADDR is HOST:PORT or unix:PATH; without it, the first address of
 * $LEASED_LISTEN, else 127.0.0.1:7443. Prints the status; exits 0 when
 * SERVING, 1 otherwise (NOT_SERVING, unreachable, timed out: a failed
 * call is said on stderr by its gRPC status, "UNAVAILABLE (14)"), 2 on
 * bad usage.
 */
#include <getopt.h>
#include <grpc/grpc.h>
#include <grpc/support/time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conn.h"
#include "duration.h"
#include "grpc/health/v1/health.pb-c.h"
#include "status.h"
#include "unary.h"

static const char usage[] =
    "Usage: leased-probe [ADDR] [--timeout D] [--tls-ca FILE\n"
    "                    [--tls-cert FILE --tls-key FILE]]\n"
    "\n"
    "Asks leased at ADDR (HOST:PORT or unix:PATH; default: the first\n"
    "address of $LEASED_LISTEN, else 127.0.0.1:7443) whether it is\n"
    "serving. Exits 0 when SERVING, 1 otherwise, 2 on bad usage.\n"
    "\n"
    "  --timeout D     give up after D [2s]\n"
    "  --tls-ca FILE   speak TLS, trusting the PEM CA certificates in FILE\n"
    "  --tls-cert FILE, --tls-key FILE\n"
    "                  a client certificate, for leased --tls-client-ca\n";

/* One Check call; returns the ServingStatus, or -1. */
static int check(grpc_channel *ch, gpr_timespec deadline)
{
    Grpc__Health__V1__HealthCheckRequest req =
        GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
    ProtobufCMessage *resp;
    char details[256];
    grpc_status_code status = unary_call(
        ch, "/grpc.health.v1.Health/Check", NULL, 0, false, &req.base,
        &grpc__health__v1__health_check_response__descriptor, deadline, &resp,
        NULL, details, sizeof(details));
    if (status != GRPC_STATUS_OK) {
        fprintf(stderr, "leased-probe: %s (%d)%s%s\n",
                status_name((int)status), (int)status,
                details[0] != '\0' ? ": " : "", details);
        return -1;
    }
    int serving = (int)((Grpc__Health__V1__HealthCheckResponse *)resp)->status;
    protobuf_c_message_free_unpacked(resp, NULL);
    return serving;
}

int main(int argc, char **argv)
{
    static const struct option options[] = {
        {"timeout", required_argument, NULL, 't'},
        {"tls-ca", required_argument, NULL, 'a'},
        {"tls-cert", required_argument, NULL, 'c'},
        {"tls-key", required_argument, NULL, 'k'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0}};
    const char *ca = NULL, *cert = NULL, *key = NULL;
    int64_t timeout_ns = 2000000000;
    int opt;
    while ((opt = getopt_long(argc, argv, "", options, NULL)) != -1) {
        switch (opt) {
        case 't':
            if (duration_parse(optarg, &timeout_ns) != 0)
                goto bad;
            break;
        case 'a':
            ca = optarg;
            break;
        case 'c':
            cert = optarg;
            break;
        case 'k':
            key = optarg;
            break;
        case 'h':
            fputs(usage, stdout);
            return 0;
        default:
            goto bad;
        }
    }
    if (argc - optind > 1 || (cert == NULL) != (key == NULL) ||
        (cert != NULL && ca == NULL))
        goto bad;
    char addr[256] = "127.0.0.1:7443";
    const char *env = getenv("LEASED_LISTEN");
    if (optind < argc)
        snprintf(addr, sizeof(addr), "%s", argv[optind]);
    else if (env != NULL && *env != '\0')
        snprintf(addr, sizeof(addr), "%.*s", (int)strcspn(env, ","), env);

    grpc_init();
    struct lease_grpc_options o = {
        .tls_ca_file = ca, .tls_cert_file = cert, .tls_key_file = key};
    char why[512];
    grpc_channel_credentials *creds = conn_credentials(&o, why, sizeof(why));
    int status = -1;
    if (creds == NULL) {
        fprintf(stderr, "leased-probe: %s\n", why);
    } else {
        grpc_channel *ch = grpc_channel_create(addr, creds, NULL);
        status = check(ch, gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                                        gpr_time_from_nanos(
                                            timeout_ns, GPR_TIMESPAN)));
        grpc_channel_destroy(ch);
        grpc_channel_credentials_release(creds);
    }
    grpc_shutdown();
    conn_wait_shutdown(1000); /* exit after gRPC's threads: see lease.h */
    static const char *const names[] = {"UNKNOWN", "SERVING", "NOT_SERVING",
                                        "SERVICE_UNKNOWN"};
    printf("%s %s\n", addr,
           status >= 0 && status <= 3 ? names[status] : "UNREACHABLE");
    return status == 1 ? 0 : 1;
bad:
    fputs(usage, stderr);
    return 2;
}
