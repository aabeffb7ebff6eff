/*
 * leasectl hold SESSION [--owner O] [--wait D] [--grace D] [--ttl D]
 *               -- CMD ARGS…
 *
 * Like flock(1), across hosts: acquire the lease (waiting up to D with
 * --wait), run CMD with LEASE_SESSION, LEASE_OWNER and LEASE_TOKEN in its
 * environment, keep the lease with liblease's keeper (lease.h) while CMD
 * runs, and release it when CMD exits; exit with CMD's status (128 + the
 * signal when a signal ended it).
 *
 * The keeper's policy is hold's: renew at a third of the TTL less a random
 * tenth of it (so that many holds do not renew in step), retry a failed
 * renewal every tenth of the TTL (at most every second), and trust the
 * lease until the local deadline: the send time of the last successful
 * renewal (or the acquire) plus the TTL, less a tenth. When the keeper
 * says the lease is lost (a renewal says it is held by someone else, or
 * none succeeded before the deadline), CMD gets SIGTERM, then SIGKILL
 * after --grace (5 s), and the lease, no longer ours, is not released.
 * SIGTERM, SIGINT and SIGHUP to leasectl are passed on to CMD.
 *
 * The TTL is what the first grant left of the lease when it came back
 * (expiry minus the local clock), or --ttl when the clocks of this host
 * and the daemon's may differ. So hold acquires once itself (with --wait,
 * and to learn the TTL, or say the clocks are apart), then starts the
 * keeper with that TTL: its acquire is the same owner's again, which keeps
 * the token, and starts its deadline.
 *
 * The owner is --owner, else $LEASE_OWNER, else USER@HOST/PID-NONCE:
 * unlike acquire's USER@HOST, unique to the run, so that two holds of one
 * user exclude each other as two flock(1)s do. CMD's LEASE_OWNER makes a
 * `leasectl renew SESSION` within it act as the holder.
 *
 * Threads: the keeper renews on its own; the main one waits for CMD; and
 * one, started before any other (hold_block_signals), takes SIGTERM,
 * SIGINT, SIGHUP and SIGCHLD with sigwaitinfo, every other thread
 * blocking them. (A handler would run on whatever thread the kernel
 * picks, gRPC's included, and a ThreadSanitizer build defers it while
 * that thread sleeps in a library: a signal to pass on could wait
 * forever.) Each event (CMD exited, a signal to pass on, the lease lost)
 * sets a flag and writes a byte to a pipe the main thread polls: the
 * signal thread, and the keeper's callbacks on its thread. Only the main
 * thread signals CMD. Before CMD runs, those signals do to leasectl
 * what they would without hold. One hold per process: the state is at
 * file scope.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "leasectl.h"

#define NFORWARDED 3
static const int forwarded[NFORWARDED] = {SIGTERM, SIGINT, SIGHUP};

static sigset_t caught;                 /* forwarded and SIGCHLD */
static sigset_t mask_before;            /* CMD starts with it */
static atomic_int wake_fd = -1;         /* the pipe's write end */
static atomic_bool forwarding;          /* signals go to CMD from now */
static atomic_bool pending[NFORWARDED]; /* to pass on to CMD */
static atomic_bool lost;                /* the keeper said so */

/* Wakes hold's loop. */
static void wake(void)
{
    char byte = 0;
    /* Full (EAGAIN): a wake-up is pending anyway. */
    ssize_t n = write(atomic_load(&wake_fd), &byte, 1);
    (void)n;
}

/* The signal thread. */
static void *take_signals(void *arg)
{
    (void)arg;
    for (;;) {
        int sig = sigwaitinfo(&caught, NULL);
        if (sig < 0)
            continue; /* EINTR */
        if (!atomic_load(&forwarding)) {
            if (sig == SIGCHLD)
                continue;
            /* No CMD yet: what the signal would do without hold (its
             * disposition is leasectl's own: the default ends it, and
             * one ignored, as under nohup, stays ignored). */
            sigset_t one;
            sigemptyset(&one);
            sigaddset(&one, sig);
            pthread_sigmask(SIG_UNBLOCK, &one, NULL);
            raise(sig);
            pthread_sigmask(SIG_BLOCK, &one, NULL);
            continue;
        }
        for (int i = 0; i < NFORWARDED; i++)
            if (forwarded[i] == sig)
                atomic_store(&pending[i], true);
        wake(); /* SIGCHLD too */
    }
    return NULL;
}

int hold_block_signals(void)
{
    sigemptyset(&caught);
    for (int i = 0; i < NFORWARDED; i++)
        sigaddset(&caught, forwarded[i]);
    sigaddset(&caught, SIGCHLD);
    int err = pthread_sigmask(SIG_BLOCK, &caught, &mask_before);
    if (err != 0)
        return err;
    pthread_attr_t attr;
    err = pthread_attr_init(&attr);
    if (err == 0) {
        pthread_t t;
        err = pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        if (err == 0)
            err = pthread_create(&t, &attr, take_signals, NULL);
        pthread_attr_destroy(&attr);
    }
    if (err != 0)
        pthread_sigmask(SIG_SETMASK, &mask_before, NULL);
    return err;
}

/* The keeper's callbacks, on its thread. */
static void on_lost(void *arg, const struct lease *l, int err)
{
    (void)arg;
    if (err == LEASE_EHELD)
        fprintf(stderr, "leasectl: hold: the lease of %s was lost "
                        "(FAILED_PRECONDITION)\n",
                l->session_id);
    else
        fprintf(stderr, "leasectl: hold: no renewal of %s before its "
                        "deadline: treating it as lost (DEADLINE_EXCEEDED)\n",
                l->session_id);
    atomic_store(&lost, true);
    wake();
}

static void on_trouble(void *arg, const struct lease *l, int err,
                       const char *why)
{
    (void)arg, (void)l, (void)err;
    fprintf(stderr, "leasectl: hold: renew: %s\n", why);
}

/* "NAME=value" in memory of its own; NULL when out of memory. */
static char *env_entry(const char *name, const char *value)
{
    size_t len = strlen(name) + 1 + strlen(value) + 1;
    char *e = malloc(len);
    if (e != NULL)
        snprintf(e, len, "%s=%s", name, value);
    return e;
}

static bool is_lease_var(const char *e)
{
    static const char *const names[] = {"LEASE_SESSION=", "LEASE_OWNER=",
                                        "LEASE_TOKEN="};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (strncmp(e, names[i], strlen(names[i])) == 0)
            return true;
    return false;
}

/* Starts cmd (borrowed) with l's LEASE_SESSION, LEASE_OWNER and
 * LEASE_TOKEN over our environment, SIGTERM, SIGINT and SIGHUP at their
 * defaults, and leasectl's signal mask from before hold. posix_spawnp,
 * not fork: other threads (the keeper's, gRPC's) run meanwhile. Returns
 * 0 with *pid, or an errno. */
static int start(const struct lease *l, char **cmd, pid_t *pid)
{
    char token[32];
    snprintf(token, sizeof(token), "%llu", (unsigned long long)l->token);
    char *own[3] = {env_entry("LEASE_SESSION", l->session_id),
                    env_entry("LEASE_OWNER", l->owner),
                    env_entry("LEASE_TOKEN", token)};
    size_t n = 0;
    while (environ[n] != NULL)
        n++;
    char **env = calloc(n + 3 + 1, sizeof(*env));
    int err = ENOMEM;
    if (env == NULL || own[0] == NULL || own[1] == NULL || own[2] == NULL)
        goto out;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (!is_lease_var(environ[i]))
            env[k++] = environ[i];
    for (size_t i = 0; i < 3; i++)
        env[k++] = own[i];
    env[k] = NULL;

    posix_spawnattr_t attr;
    err = posix_spawnattr_init(&attr);
    if (err != 0)
        goto out;
    sigset_t defaults;
    sigemptyset(&defaults);
    for (int i = 0; i < NFORWARDED; i++)
        sigaddset(&defaults, forwarded[i]);
    err = posix_spawnattr_setsigdefault(&attr, &defaults);
    if (err == 0)
        err = posix_spawnattr_setsigmask(&attr, &mask_before);
    if (err == 0)
        err = posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF |
                                                  POSIX_SPAWN_SETSIGMASK);
    if (err == 0)
        err = posix_spawnp(pid, cmd[0], NULL, &attr, cmd, env);
    posix_spawnattr_destroy(&attr);
out:
    for (size_t i = 0; i < 3; i++)
        free(own[i]);
    free(env);
    return err;
}

static int exit_code(int status)
{
    if (WIFEXITED(status))
        return WEXITSTATUS(status);
    return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : EXIT_FAILED;
}

/* Waits for child to exit, passing signals on, and stopping it (SIGTERM,
 * SIGKILL after grace_ns) once the lease is lost. Returns its exit code. */
static int supervise(pid_t child, int wake_rd, int64_t grace_ns)
{
    bool stopping = false;
    int64_t kill_at = -1; /* when SIGKILL is due; -1: not */
    for (;;) {
        int status;
        pid_t done = waitpid(child, &status, WNOHANG);
        if (done == child)
            return exit_code(status);
        if (done < 0 && errno != EINTR) {
            fprintf(stderr, "leasectl: hold: waitpid: %s\n", strerror(errno));
            return EXIT_FAILED;
        }
        for (int i = 0; i < NFORWARDED; i++)
            if (atomic_exchange(&pending[i], false))
                kill(child, forwarded[i]);
        int64_t now = nanotime_mono();
        if (!stopping && atomic_load(&lost)) {
            stopping = true;
            kill(child, SIGTERM);
            kill_at = now + grace_ns;
        }
        if (kill_at >= 0 && now >= kill_at) {
            kill(child, SIGKILL);
            kill_at = -1;
        }
        int timeout_ms =
            kill_at < 0 ? -1 : (int)((kill_at - now + 999999) / 1000000);
        struct pollfd p = {.fd = wake_rd, .events = POLLIN};
        if (poll(&p, 1, timeout_ms) > 0) {
            char bytes[64];
            while (read(wake_rd, bytes, sizeof(bytes)) > 0) {
            }
        }
    }
}

/* No renewal may wait past the lease's deadline: calls get at most a
 * third of the TTL from here on. */
static void shorten_calls(struct ctl *c, int64_t ttl_ns)
{
    if (c->opts.timeout_ms * INT64_C(1000000) <= ttl_ns / 3)
        return;
    struct lease_grpc_options o = c->opts;
    o.timeout_ms = ttl_ns / 3 / 1000000 > 0 ? ttl_ns / 3 / 1000000 : 1;
    struct lease_client *shorter;
    if (lease_grpc_open(c->args.url, &o, &shorter) == LEASE_OK) {
        lease_client_destroy(c->client);
        c->client = shorter;
    }
}

int ctl_hold(struct ctl *c)
{
    const struct ctl_args *a = &c->args;
    char buf[LEASE_OWNER_MAX + 1];
    const char *owner = ctl_owner(a->owner, true, buf, sizeof(buf));
    int rc = ctl_reach(c);
    if (rc != EXIT_OK)
        return rc;

    struct lease l;
    rc = ctl_acquire(c, a->arg, owner, a->wait_ns, &l);
    if (rc != LEASE_OK)
        return ctl_fail(rc, "hold: acquire");
    int64_t ttl_ns = a->ttl_ns > 0 ? a->ttl_ns : l.expiry_ns - nanotime_wall();
    if (ttl_ns <= 0) {
        fprintf(stderr, "leasectl: hold: the lease came back expired (are "
                        "the clocks apart? give --ttl)\n");
        lease_release(c->client, &l);
        return EXIT_FAILED;
    }
    shorten_calls(c, ttl_ns);

    /* The pipe and the signal thread stay until leasectl exits, a moment
     * after this returns: a late signal only writes to the pipe. */
    int fds[2];
    if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) {
        fprintf(stderr, "leasectl: hold: pipe: %s\n", strerror(errno));
        lease_release(c->client, &l);
        return EXIT_FAILED;
    }
    atomic_store(&wake_fd, fds[1]);
    struct lease_keeper_options ko = {.ttl_ns = ttl_ns};
    struct lease_keeper_callbacks cb = {.lost = on_lost,
                                        .trouble = on_trouble};
    struct lease_keeper *k;
    rc = lease_keeper_start(c->client, a->arg, owner, &ko, &cb, &k, &l);
    if (rc != LEASE_OK) {
        int code = ctl_fail(rc, "hold: acquire");
        lease_release(c->client, &l);
        return code;
    }
    atomic_store(&forwarding, true);

    pid_t child;
    int code;
    int err = start(&l, a->run, &child);
    if (err == EAGAIN || err == ENOMEM) {
        fprintf(stderr, "leasectl: hold: fork: %s\n", strerror(err));
        code = EXIT_FAILED;
    } else if (err != 0) {
        fprintf(stderr, "leasectl: hold: %s: %s\n", a->run[0], strerror(err));
        code = 127; /* as a shell says it */
    } else {
        code = supervise(child, fds[0], a->grace_ns);
    }
    rc = lease_keeper_stop(k); /* releases, unless lost */
    if (rc != LEASE_OK)
        ctl_fail(rc, "hold: release");
    return code;
}
