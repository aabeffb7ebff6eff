/*
 * leased: parses the configuration, wires the parts together, handles
 * signals, and nothing else.
 *
 *   config -> data directory lock -> store -> server (engine, loop side)
 *          -> frontend (gRPC, completion-queue thread) -> uv_run
 *
 * SIGTERM/SIGINT: stop accepting, answer the calls in progress, commit,
 * close, exit 0.
 */
#include <grpc/grpc.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <uv.h>

#include "config.h"
#include "datadir.h"
#include "frontend.h"
#include "log.h"
#include "server.h"
#include "store.h"
#include "version.h"

#define BUSY_TIMEOUT_MS 2000

struct daemon {
    struct server *server;
    struct frontend *frontend;
    uv_signal_t sigterm, sigint;
    bool signals_started;
    bool stopping;
};

static void on_requests(void *arg, struct request *list)
{
    struct daemon *d = arg;
    server_submit(d->server, list);
}

static void reply(void *arg, struct request *req)
{
    struct daemon *d = arg;
    frontend_reply(d->frontend, req);
}

static void on_server_closed(void *arg)
{
    struct daemon *d = arg;
    if (d->signals_started) {
        uv_close((uv_handle_t *)&d->sigterm, NULL);
        uv_close((uv_handle_t *)&d->sigint, NULL);
    }
}

static void on_frontend_stopped(void *arg)
{
    struct daemon *d = arg;
    frontend_destroy(d->frontend);
    d->frontend = NULL;
    server_close(d->server, on_server_closed, d);
}

static void on_signal(uv_signal_t *h, int signum)
{
    struct daemon *d = h->data;
    if (d->stopping)
        return;
    d->stopping = true;
    log_info("stopping", "signal=%s", signum == SIGTERM ? "TERM" : "INT");
    frontend_shutdown(d->frontend);
}

int main(int argc, char **argv)
{
    struct config cfg;
    char err[512];
    int rc = config_parse(&cfg, argc, argv, err, sizeof(err));
    if (rc == CONFIG_EXIT)
        return 0;
    if (rc != CONFIG_OK) {
        fprintf(stderr, "leased: %s\n", err);
        return 2;
    }
    log_set_level(cfg.log_level);
    signal(SIGPIPE, SIG_IGN);

    int lock_fd = datadir_lock(cfg.data_dir, err, sizeof(err));
    if (lock_fd < 0) {
        log_error("startup_failed", "reason=\"%s\"", err);
        return 1;
    }
    char db_path[PATH_MAX];
    snprintf(db_path, sizeof(db_path), "%s/leased.db", cfg.data_dir);
    struct store *store;
    if (store_open(db_path, BUSY_TIMEOUT_MS, &store, err, sizeof(err)) != 0) {
        log_error("startup_failed", "reason=\"%s\"", err);
        return 1;
    }

    uv_loop_t *loop = uv_default_loop();
    struct daemon d = {0};
    d.server = server_create(loop, store, cfg.ttl_ns, err, sizeof(err));
    if (d.server == NULL) {
        log_error("startup_failed", "reason=\"%s\"", err);
        return 1;
    }
    server_set_reply(d.server, reply, &d);

    log_route_grpc();
    grpc_init();
    struct frontend_callbacks cb = {on_requests, on_frontend_stopped, &d};
    d.frontend = frontend_create(loop, cfg.listen, cfg.nlisten,
                                 cfg.max_pending, &cb, err, sizeof(err));
    if (d.frontend == NULL) {
        log_error("startup_failed", "reason=\"%s\"", err);
        server_close(d.server, on_server_closed, &d);
        uv_run(loop, UV_RUN_DEFAULT);
        uv_loop_close(loop);
        grpc_shutdown();
        return 1;
    }
    uv_signal_init(loop, &d.sigterm);
    uv_signal_init(loop, &d.sigint);
    d.sigterm.data = d.sigint.data = &d;
    uv_signal_start(&d.sigterm, on_signal, SIGTERM);
    uv_signal_start(&d.sigint, on_signal, SIGINT);
    d.signals_started = true;
    log_info("started", "version=%s data_dir=%s ttl_ms=%lld pid=%ld",
             LEASED_VERSION, cfg.data_dir, (long long)(cfg.ttl_ns / 1000000),
             (long)getpid());

    uv_run(loop, UV_RUN_DEFAULT);

    uv_loop_close(loop);
    /* grpc_shutdown() may leave gRPC's threads to finish after we exit;
     * wait for them, so that the process ends with nothing running. */
    grpc_shutdown_blocking();
    close(lock_fd);
    log_info("stopped", NULL);
    return 0;
}
