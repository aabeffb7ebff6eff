/* Listeners and connection limits of the gRPC server (see listeners.h). */
#include "listeners.h"

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

/* A unix socket's directory must exist and must not let others replace
 * the socket: no group or other write unless sticky (like /tmp). */
static int check_socket_dir(const char *addr, char *errmsg, size_t len)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof(dir), "%s", addr + 5);
    struct stat st;
    const char *d = dirname(dir);
    if (stat(d, &st) != 0) {
        snprintf(errmsg, len, "%s: socket directory %s: %s", addr, d,
                 strerror(errno));
        return -1;
    }
    if (!S_ISDIR(st.st_mode) ||
        ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0 &&
         (st.st_mode & S_ISVTX) == 0)) {
        snprintf(errmsg, len,
                 "%s: socket directory %s is %s; want one only its owner "
                 "can write (or sticky, like /tmp)",
                 addr, d,
                 S_ISDIR(st.st_mode) ? "writable by group or others"
                                     : "not a directory");
        return -1;
    }
    return 0;
}

/* Binds one address: a unix socket plaintext, created with the socket
 * mode from the first moment (umask); TCP with TLS when configured.
 * Returns the port (> 0), or 0 with errmsg set. */
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
    int port = grpc_server_add_http2_port(server, addr, creds);
    if (unix_socket)
        umask(old_umask);
    grpc_server_credentials_release(creds);
    if (port <= 0)
        snprintf(errmsg, len, "cannot listen on %s", addr);
    return port > 0 ? port : 0;
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
    };
    grpc_channel_args chargs = {sizeof(args) / sizeof(args[0]), args};
    return grpc_server_create(&chargs, NULL);
}
