/*
 * leased: parses the configuration, wires the parts together, handles
 * signals, and nothing else.
 *
 *   config -> mode (mode.h: embedded, SQLite in a data directory; or
 *          shared, PostgreSQL) -> frontend (gRPC, completion-queue
 *          thread) -> uv_run
 *
 * SIGTERM/SIGINT: health NOT_SERVING, stop accepting, answer the calls in
 * progress (cancel what is left after --drain-timeout), commit, close,
 * exit 0. SIGHUP: reload the token files, the policy file and the TLS
 * files. A failed fsync ends the process at once with EX_IOERR (74),
 * answering nothing more: the supervisor restarts it, and the new
 * process reads what the disk really holds (see mode_embedded.c).
 */
#include <assert.h>
#include <errno.h>
#include <grpc/grpc.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sysexits.h>
#include <unistd.h>
#include <uv.h>

#include "addr.h"
#include "audit.h"
#include "config.h"
#include "datadir.h"
#include "frontend.h"
#include "history.h"
#include "import.h"
#include "log.h"
#include "metrics.h"
#include "metrics_http.h"
#include "mode.h"
#include "policy.h"
#include "tls.h"
#include "tokens.h"
#include "version.h"

struct daemon {
    struct mode *mode; /* the loop side */
    struct frontend *frontend;
    struct tls *tls;       /* NULL: no TLS */
    struct tokens *tokens; /* NULL: no bearer tokens */
    struct tokens *admin_tokens; /* NULL: admin calls use tokens */
    struct policy *policy; /* NULL: every caller may do anything */
    struct history *history;      /* what the mode tells Watch streams */
    struct metrics_http *metrics; /* NULL: no --metrics-listen */
    int signal_fd; /* SIGTERM, SIGINT and SIGHUP, read by the loop */
    uv_poll_t signals;
    bool signals_started;
    bool stopping;
};

static bool on_arrived(void *arg, struct request *req)
{
    struct daemon *d = arg;
    return mode_arrive(d->mode, req);
}

static void on_requests(void *arg, struct request *list)
{
    struct daemon *d = arg;
    mode_submit(d->mode, list);
}

static void on_ended(void *arg)
{
    struct daemon *d = arg;
    mode_cancelled(d->mode);
}

static void reply(void *arg, struct request *req)
{
    struct daemon *d = arg;
    if (req->status == REPLY_OK && req->change == CHANGE_REVOKE)
        atomic_fetch_add(&metrics.revokes, 1);
    audit_change(req);
    frontend_reply(d->frontend, req);
}

static void on_wanted(void *arg, size_t at)
{
    struct daemon *d = arg;
    if (d->frontend != NULL)
        frontend_want_requests(d->frontend, at);
}

static void on_storage(void *arg, bool ok)
{
    struct daemon *d = arg;
    if (d->frontend != NULL)
        frontend_set_serving(d->frontend, ok);
}

/* A sync failed: nothing in memory can be trusted, and no graceful stop
 * could answer anything more. Like a kill -9, which every promise already
 * survives, but with a reason and an exit code. */
static void on_fatal(void *arg, const char *why)
{
    log_error("sync_failed", "error=\"%s\" action=exit exit_code=%d", why,
              EX_IOERR);
    _exit(EX_IOERR);
}

static void on_mode_closed(void *arg)
{
    struct daemon *d = arg;
    if (d->signals_started)
        uv_close((uv_handle_t *)&d->signals, NULL);
}

static void on_frontend_stopped(void *arg)
{
    struct daemon *d = arg;
    frontend_destroy(d->frontend);
    d->frontend = NULL;
    mode_close(d->mode, on_mode_closed, d);
}

/* Logs the error event msg with why as its reason, quoted: a reason may
 * hold what a bad line of a file, or a server's error, holds. */
static void failed(const char *msg, const char *why)
{
    char quoted[512];
    log_quotable(quoted, sizeof(quoted), why, strlen(why));
    log_error(msg, "reason=\"%s\"", quoted);
}

/* A file named in the flags did not load again: why, quoted (as in
 * failed()). */
static void reload_failed(const char *what, const char *why)
{
    char quoted[512];
    log_quotable(quoted, sizeof(quoted), why, strlen(why));
    log_warn("reload_failed", "what=%s reason=\"%s\"", what, quoted);
}

/* SIGHUP: the token files, the policy file and the TLS files again;
 * what fails to load keeps its old contents. */
static void reload(struct daemon *d)
{
    char err[512];
    struct tokens *sets[] = {d->tokens, d->admin_tokens};
    const char *names[] = {"tokens", "admin_tokens"};
    for (int i = 0; i < 2; i++) {
        if (sets[i] == NULL)
            continue;
        if (tokens_reload(sets[i], err, sizeof(err)) == 0)
            log_info("reloaded", "what=%s count=%zu", names[i],
                     tokens_count(sets[i]));
        else
            reload_failed(names[i], err);
    }
    if (d->policy != NULL) {
        if (policy_reload(d->policy, err, sizeof(err)) == 0)
            log_info("reloaded", "what=policy rules=%zu",
                     policy_count(d->policy));
        else
            reload_failed("policy", err);
    }
    if (d->tls != NULL) {
        if (tls_reload(d->tls, err, sizeof(err)) == 0)
            log_info("reloaded", "what=tls");
        else
            reload_failed("tls", err);
    }
}

static void write_policy_metrics(void *arg, FILE *f)
{
    policy_write_metrics(arg, f);
}

/* SIGTERM, SIGINT: the drain. */
static void stop(struct daemon *d, int signum)
{
    if (d->stopping || d->frontend == NULL)
        return;
    d->stopping = true;
    log_info("stopping", "signal=%s", signum == SIGTERM ? "TERM" : "INT");
    frontend_shutdown(d->frontend);
    mode_drain(d->mode);
}

static void on_signals(uv_poll_t *h, int status, int events)
{
    (void)status;
    (void)events;
    struct daemon *d = h->data;
    struct signalfd_siginfo si;
    while (read(d->signal_fd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
        if (si.ssi_signo == SIGHUP)
            reload(d);
        else
            stop(d, (int)si.ssi_signo);
    }
}

/* Every connection takes a descriptor, and gRPC 1.51 stops accepting for
 * good when accept() runs out of them: take all the kernel allows. */
static void raise_fd_limit(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return;
    if (rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
        getrlimit(RLIMIT_NOFILE, &rl);
    }
    log_info("fd_limit", "nofile=%llu", (unsigned long long)rl.rlim_cur);
}

/* The TLS files, the token files and the policy file, as configured;
 * warns about plaintext
 * on non-loopback addresses. Returns 0, or -1 with errmsg set. */
static int load_security(const struct config *cfg, struct daemon *d,
                         char *errmsg, size_t len)
{
    if (cfg->tls_cert != NULL) {
        d->tls = tls_load(cfg->tls_cert, cfg->tls_key, cfg->tls_client_ca,
                          errmsg, len);
        if (d->tls == NULL)
            return -1;
    }
    if (cfg->auth_token_file != NULL) {
        d->tokens = tokens_load(cfg->auth_token_file, errmsg, len);
        if (d->tokens == NULL)
            return -1;
    }
    if (cfg->admin_token_file != NULL) {
        d->admin_tokens = tokens_load(cfg->admin_token_file, errmsg, len);
        if (d->admin_tokens == NULL)
            return -1;
    }
    if (cfg->policy_file != NULL) {
        d->policy = policy_load(cfg->policy_file, errmsg, len);
        if (d->policy == NULL)
            return -1;
        log_info("policy_loaded", "rules=%zu", policy_count(d->policy));
    }
    for (size_t i = 0; i < cfg->nlisten && d->tls == NULL; i++) {
        bool plaintext_ok;
        char why[200];
        addr_check(cfg->listen[i], &plaintext_ok, why, sizeof(why));
        if (!plaintext_ok)
            log_warn("insecure", "addr=%s reason=\"plaintext on a "
                     "non-loopback address (--insecure)\"", cfg->listen[i]);
    }
    return 0;
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
    /* A file size limit (ulimit -f, LimitFSIZE=) reached by the database
     * must fail the write (EFBIG: storage failing, UNAVAILABLE), not
     * kill the daemon. */
    signal(SIGXFSZ, SIG_IGN);
    raise_fd_limit();
    metrics_init();

    struct daemon d = {0};
    if (load_security(&cfg, &d, err, sizeof(err)) != 0) {
        failed("startup_failed", err);
        return 1;
    }

    if (cfg.import_from != NULL) {
        if (import_sqlite(&cfg, err, sizeof(err)) == 0)
            return 0;
        failed("import_failed", err);
        return 1;
    }

    /* SIGTERM, SIGINT and SIGHUP stay blocked in every thread from here
     * on (this one, and gRPC's and the metrics server's, which inherit
     * the mask), and the loop reads them from a signalfd: no handler runs
     * on any thread, and one that arrives before the loop runs waits for
     * it. (With handlers, ThreadSanitizer's deferred delivery lost one
     * SIGTERM in a few hundred, and a thread asleep in gRPC's futex waits
     * could hold one unhandled.) */
    sigset_t loop_signals;
    sigemptyset(&loop_signals);
    sigaddset(&loop_signals, SIGTERM);
    sigaddset(&loop_signals, SIGINT);
    sigaddset(&loop_signals, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &loop_signals, NULL);
    d.signal_fd = signalfd(-1, &loop_signals, SFD_NONBLOCK | SFD_CLOEXEC);
    if (d.signal_fd < 0) {
        log_error("startup_failed", "reason=\"signalfd: %s\"",
                  strerror(errno));
        return 1;
    }

    uv_loop_t *loop = uv_default_loop();
    const struct mode_ops *mode = cfg.postgres != NULL ? &mode_shared
                                                       : &mode_embedded;
    d.history = history_create(cfg.watch_history);
    if (d.history == NULL) {
        failed("startup_failed", "out of memory");
        return 1;
    }
    struct mode_hooks hooks = {reply,    on_storage, on_wanted,
                               on_fatal, &d,         d.history};
    if (mode->open(loop, &cfg, &hooks, &d.mode, err, sizeof(err)) != 0) {
        failed("startup_failed", err);
        history_destroy(d.history);
        return 1;
    }

    /* The loop reads the signals only once it runs, when the frontend is
     * there: a SIGTERM right after `listening` drains rather than kills. */
    uv_poll_init(loop, &d.signals, d.signal_fd);
    d.signals.data = &d;
    uv_poll_start(&d.signals, UV_READABLE, on_signals);
    d.signals_started = true;

    log_route_grpc();
    grpc_init();
    struct frontend_callbacks cb = {on_arrived, on_requests,
                                    on_frontend_stopped, on_ended, &d};
    struct frontend_options fo = {
        .listen = cfg.listen,
        .nlisten = cfg.nlisten,
        .max_pending = cfg.max_pending,
        .tls = d.tls,
        .tokens = d.tokens,
        .admin_tokens = d.admin_tokens,
        .policy = d.policy,
        .socket_mode = cfg.socket_mode,
        .limits = &cfg.limits,
        .drain_ns = cfg.drain_ns,
        .history = d.history,
    };
    if (d.policy != NULL)
        metrics_set_extra(write_policy_metrics, d.policy);
    if (cfg.metrics_listen != NULL)
        d.metrics = metrics_http_start(cfg.metrics_listen, err, sizeof(err));
    if (cfg.metrics_listen == NULL || d.metrics != NULL)
        d.frontend = frontend_create(loop, &fo, &cb, err, sizeof(err));
    if (d.frontend == NULL) {
        log_error("startup_failed", "reason=\"%s\"", err);
        metrics_http_stop(d.metrics);
        mode_close(d.mode, on_mode_closed, &d);
        uv_run(loop, UV_RUN_DEFAULT);
        uv_loop_close(loop);
        close(d.signal_fd);
        grpc_shutdown_blocking();
        tls_free(d.tls);
        tokens_free(d.tokens);
        tokens_free(d.admin_tokens);
        policy_free(d.policy);
        history_destroy(d.history);
        return 1;
    }
    log_info("started", "version=%s store=%s data_dir=%s ttl_ms=%lld pid=%ld",
             LEASED_VERSION, mode->name, mode_where(d.mode),
             (long long)(cfg.ttl_ns / 1000000), (long)getpid());

    uv_run(loop, UV_RUN_DEFAULT);

    uv_loop_close(loop);
    close(d.signal_fd);
    metrics_http_stop(d.metrics);
    /* grpc_shutdown() may leave gRPC's threads to finish after we exit;
     * wait for them, so that the process ends with nothing running. */
    grpc_shutdown_blocking();
    tls_free(d.tls);
    tokens_free(d.tokens);
    tokens_free(d.admin_tokens);
    policy_free(d.policy);
    history_destroy(d.history);
    log_info("stopped", NULL);
    return 0;
}
