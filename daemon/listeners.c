/* Listeners and connection limits of the gRPC server (see listeners.h). */
#include "listeners.h"

#include <ctype.h>
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "log.h"

#define MAX_RECEIVE_BYTES (64 * 1024)
#define AGE_GRACE_MS 10000 /* for calls on a connection past its age */

/* Logs the address clients can use: with the real port when it was 0. */
static void log_listening(const char *addr, int port, bool tls)
{
    const char *colon = strrchr(addr, ':');
    if (strncmp(addr, "unix:", 5) == 0)
        log_info("listening", "addr=%s tls=0", addr);
    else
        log_info("listening", "addr=%.*s:%d tls=%d", (int)(colon - addr),
                 addr, port, (int)tls);
}

/* strerror(err) as a reason inside a sentence: "address already in use". */
static void errno_reason(int err, char *out, size_t len)
{
    snprintf(out, len, "%s", strerror(err));
    /* Not an acronym's first letter ("RPC struct is bad"). */
    if (len > 1 && isupper((unsigned char)out[0]) &&
        !isupper((unsigned char)out[1]))
        out[0] = (char)tolower((unsigned char)out[0]);
}

/* A unix socket's directory must exist and must not let others replace
 * the socket: no group or other write unless sticky (like /tmp). */
static int check_socket_dir(const char *addr, char *errmsg, size_t len)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof(dir), "%s", addr + 5);
    struct stat st;
    const char *d = dirname(dir);
    if (stat(d, &st) != 0) {
        char why[128];
        errno_reason(errno, why, sizeof(why));
        snprintf(errmsg, len, "cannot listen on %s: socket directory %s: %s",
                 addr, d, why);
        return -1;
    }
    if (!S_ISDIR(st.st_mode) ||
        ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0 &&
         (st.st_mode & S_ISVTX) == 0)) {
        snprintf(errmsg, len,
                 "cannot listen on %s: socket directory %s is %s; want one "
                 "only its owner can write (or sticky, like /tmp)",
                 addr, d,
                 S_ISDIR(st.st_mode) ? "writable by group or others"
                                     : "not a directory");
        return -1;
    }
    return 0;
}

/* The errno of the system call that failed, from the error gRPC 1.51
 * logs when it cannot add a port: a tree of statuses whose leaves say
 * `…{syscall:'bind', os_error:'Address already in use', errno:98, …}`.
 * The first one is that of the first address the name resolved to.
 * Returns 0 when there is none (not a system call's failure, or another
 * format). */
static int failed_errno(const char *message)
{
    static const char key[] = "errno:";
    for (const char *p = strstr(message, key); p != NULL;
         p = strstr(p + 1, key)) {
        bool word_start = p == message ||
                          !(isalnum((unsigned char)p[-1]) || p[-1] == '_');
        char *end;
        long err = strtol(p + sizeof(key) - 1, &end, 10);
        if (word_start && end != p + sizeof(key) - 1 && err > 0 &&
            err < 4096)
            return (int)err;
    }
    return 0;
}

/* Binds one address: a unix socket plaintext, created with the socket
 * mode from the first moment (umask); TCP with TLS when configured.
 * Returns the port (> 0), or 0 with errmsg set: "cannot listen on ADDR:
 * REASON". gRPC's own error for a failed bind (one long line) is held
 * back while it runs and replaced by the reason it gives; an error that
 * gives none is logged as gRPC wrote it. */
static int bind_one(grpc_server *server, const struct frontend_options *o,
                    const char *addr, char *errmsg, size_t len)
{
    bool unix_socket = strncmp(addr, "unix:", 5) == 0;
    if (unix_socket && check_socket_dir(addr, errmsg, len) != 0)
        return 0;
    grpc_server_credentials *creds =
        !unix_socket && o->tls != NULL
            ? tls_server_credentials(o->tls)
            : grpc_insecure_server_credentials_create();
    if (creds == NULL) {
        snprintf(errmsg, len, "%s: cannot create TLS credentials", addr);
        return 0;
    }
    mode_t old_umask = 0;
    if (unix_socket)
        old_umask = umask(0777 & ~o->socket_mode);
    struct log_hold held;
    log_hold_begin(&held);
    int port = grpc_server_add_http2_port(server, addr, creds);
    log_hold_end();
    if (unix_socket)
        umask(old_umask);
    grpc_server_credentials_release(creds);
    if (port > 0) {
        log_hold_flush(&held); /* an error that did not stop it */
        return port;
    }
    int err = held.held ? failed_errno(held.message) : 0;
    if (err != 0) {
        char why[128];
        errno_reason(err, why, sizeof(why));
        snprintf(errmsg, len, "cannot listen on %s: %s", addr, why);
    } else {
        snprintf(errmsg, len, "cannot listen on %s%s", addr,
                 held.held ? " (gRPC's error is logged above)" : "");
        log_hold_flush(&held);
    }
    return 0;
}

/* gRPC 1.51 aborts when a server that holds listeners is destroyed before
 * it was shut down ("assertion failed: ShutdownCalled() ||
 * listeners_.empty()"): when a later address fails, the ones bound before
 * it are closed here, so that the caller can destroy the server and log
 * why. Shutting down needs a completion queue; a private one will do. */
static void shut_down_unstarted(grpc_server *server)
{
    grpc_completion_queue *cq = grpc_completion_queue_create_for_next(NULL);
    int tag;
    grpc_server_shutdown_and_notify(server, cq, &tag);
    grpc_event ev;
    do
        ev = grpc_completion_queue_next(
            cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    while (ev.type != GRPC_OP_COMPLETE || ev.tag != &tag);
    grpc_completion_queue_shutdown(cq);
    while (grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_REALTIME),
                                      NULL)
               .type != GRPC_QUEUE_SHUTDOWN)
        ;
    grpc_completion_queue_destroy(cq);
}

int listeners_bind(grpc_server *server, const struct frontend_options *o,
                   char *errmsg, size_t len)
{
    int *ports = calloc(o->nlisten, sizeof(*ports));
    if (ports == NULL) {
        snprintf(errmsg, len, "out of memory");
        return -1;
    }
    int rc = 0;
    for (size_t i = 0; i < o->nlisten && rc == 0; i++) {
        ports[i] = bind_one(server, o, o->listen[i], errmsg, len);
        rc = ports[i] > 0 ? 0 : -1;
    }
    if (rc == 0)
        grpc_server_start(server);
    else if (ports[0] > 0) /* a later address failed */
        shut_down_unstarted(server);
    for (size_t i = 0; i < o->nlisten && rc == 0; i++)
        log_listening(o->listen[i], ports[i],
                      o->tls != NULL && strncmp(o->listen[i], "unix:", 5));
    free(ports);
    return rc;
}

static grpc_arg int_arg(const char *key, int value)
{
    grpc_arg a = {.type = GRPC_ARG_INTEGER, .key = (char *)key};
    a.value.integer = value;
    return a;
}

grpc_server *listeners_server_create(const struct config_limits *l)
{
    const int64_t ns_per_ms = 1000000;
    grpc_arg args[] = {
        int_arg(GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, MAX_RECEIVE_BYTES),
        /* gRPC binds with SO_REUSEPORT by default, so a second daemon on
         * the same port would silently share it and split the clients
         * between two lease tables. An address in use must fail. */
        int_arg(GRPC_ARG_ALLOW_REUSEPORT, 0),
        int_arg(GRPC_ARG_MAX_CONCURRENT_STREAMS, l->max_streams),
        int_arg(GRPC_ARG_MAX_METADATA_SIZE, l->max_metadata_bytes),
        int_arg(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
                (int)(l->keepalive_min_ns / ns_per_ms)),
        int_arg(GRPC_ARG_HTTP2_MAX_PING_STRIKES, l->max_ping_strikes),
        int_arg(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS,
                (int)(l->handshake_timeout_ns / ns_per_ms)),
        int_arg(GRPC_ARG_MAX_CONNECTION_IDLE_MS,
                l->max_idle_ns > 0 ? (int)(l->max_idle_ns / ns_per_ms)
                                   : INT_MAX),
        int_arg(GRPC_ARG_MAX_CONNECTION_AGE_MS,
                l->max_age_ns > 0 ? (int)(l->max_age_ns / ns_per_ms)
                                  : INT_MAX),
        int_arg(GRPC_ARG_MAX_CONNECTION_AGE_GRACE_MS, AGE_GRACE_MS),
        /* Less work per call (docs/benchmarks.md): no channelz records,
         * and no deadline timer: the front end decides a call whatever
         * its deadline, and the client's own deadline ends its wait. */
        int_arg(GRPC_ARG_ENABLE_CHANNELZ, 0),
        int_arg(GRPC_ARG_ENABLE_DEADLINE_CHECKS, 0),
    };
    grpc_channel_args chargs = {sizeof(args) / sizeof(args[0]), args};
    return grpc_server_create(&chargs, NULL);
}
