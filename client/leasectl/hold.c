/*
 * leasectl hold SESSION [--owner O] [--wait D] [--grace D] [--ttl D]
 *               -- CMD ARGS…
 *
 * Like flock(1), across hosts: acquire the lease (waiting up to D with
 * --wait), run CMD while liblease's keeper (lease.h) keeps it, and
 * release it once CMD and everything it left in its process group are
 * gone; exit with CMD's status (128 + the signal when a signal ended it).
 *
 * The deadline rule (docs/client.md): the lease is trusted until the send
 * time of the last successful renewal (or the acquire) plus the TTL, less
 * lease_margin_min(TTL) for the rates of the clocks and a late wake-up,
 * and less the time the group takes to be gone after SIGKILL (kill_time),
 * on the monotonic clock. CMD's process group gets SIGTERM at the
 * deadline less --grace, and SIGKILL at the deadline, unless a renewal
 * moved it first: CMD is gone before leased can grant the session to
 * anyone else, whatever fails (the daemon stopped, the network silent,
 * a renewal refused). A refused renewal (the lease is lost for certain)
 * brings SIGTERM at once and SIGKILL --grace later, at the deadline at
 * the latest. Once SIGTERM went out, the SIGKILL it announced comes
 * whatever a later renewal says. The lease, lost, is not released.
 *
 * The TTL is the service's (leased says it with each grant), or --ttl
 * when shorter; --ttl longer than the service's is refused. A server
 * that does not say its TTL (another server of Mecatl's protocol) gets
 * --ttl, or the grant's expiry less this host's wall clock, with a
 * warning. --grace is at most half the TTL (so that SIGTERM never comes
 * before renewals had a fair chance); by default 5 s or a tenth of the
 * TTL, whichever is less. So hold acquires once itself (with --wait, and
 * to learn the TTL), checks the options against it, then starts the
 * keeper: its acquire is the same owner's again, which keeps the token,
 * and starts its deadline.
 *
 * CMD's process group, the guardian that kills it if leasectl dies, and
 * the terminal are group.c's. CMD's environment has LEASE_SESSION,
 * LEASE_OWNER, LEASE_TOKEN and LEASE_DEADLINE (the deadline of the lease
 * CMD starts with, in whole seconds of the Unix epoch, rounded down).
 *
 * The owner is --owner, else $LEASE_OWNER, else USER@HOST/PID-NONCE:
 * unlike acquire's USER@HOST, unique to the run, so that two holds of one
 * user exclude each other as two flock(1)s do. CMD's LEASE_OWNER makes a
 * `leasectl renew SESSION` within it act as the holder.
 *
 * Threads: the keeper renews on its own two; the main one supervises the
 * group; and one, started before any other (hold_block_signals), takes
 * SIGTERM, SIGINT, SIGHUP and SIGCHLD with sigwaitinfo, every other
 * thread blocking them. (A handler would run on whatever thread the
 * kernel picks, gRPC's included, and a ThreadSanitizer build defers it
 * while that thread sleeps in a library: a signal to pass on could wait
 * forever.) Each event (a child changed state, a signal to pass on, the
 * lease lost) sets a flag and writes a byte to a pipe the main thread
 * polls: the signal thread, and the keeper's callbacks on its threads.
 * Only the main thread signals the group. Before CMD runs, those signals
 * do to leasectl what they would without hold. One hold per process: the
 * state is at file scope.
 *
 * FAULT_BROKEN("hold_late_kill") is a negative control of the holders'
 * fault campaign (tests/faults/holders), compiled into its test build
 * only: the hold of old, SIGTERM at the deadline and SIGKILL --grace
 * after it.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "faultpoint.h"
#include "group.h"
#include "leasectl.h"

#define NFORWARDED 3
static const int forwarded[NFORWARDED] = {SIGTERM, SIGINT, SIGHUP};

#define S INT64_C(1000000000)
#define GRACE_DEFAULT_NS (5 * S)
#define KILL_TIME_NS (200 * 1000000)
#define KILL_AGAIN_MS 10 /* while killed processes linger */
#define STOPPING_POLL_MS 50 /* while stopping: what left the group ends */

static sigset_t caught;                 /* forwarded and SIGCHLD */
static sigset_t mask_before;            /* CMD starts with it */
static atomic_int wake_fd = -1;         /* the pipe's write end */
static atomic_bool forwarding;          /* signals go to CMD from now */
static atomic_bool pending[NFORWARDED]; /* to pass on to CMD */
static atomic_int lost_err;             /* the keeper's, once lost; 0 */

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
    err = ctl_start_thread(take_signals);
    if (err != 0)
        pthread_sigmask(SIG_SETMASK, &mask_before, NULL);
    return err;
}

/* The keeper's callbacks, on its threads. */
static void on_lost(void *arg, const struct lease *l, int err)
{
    (void)arg;
    char s[CTL_ESCAPED_LEN(LEASE_SESSION_MAX)];
    ctl_escaped(l->session_id, s, sizeof(s));
    if (err == LEASE_EHELD)
        fprintf(stderr, "leasectl: hold: the lease of %s was lost "
                        "(FAILED_PRECONDITION)\n",
                s);
    else
        fprintf(stderr, "leasectl: hold: no renewal of %s before its "
                        "deadline: treating it as lost (DEADLINE_EXCEEDED)\n",
                s);
    atomic_store(&lost_err, err != 0 ? err : LEASE_EUNAVAILABLE);
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

#define NVARS 4
static const char *const var_names[NVARS] = {"LEASE_SESSION", "LEASE_OWNER",
                                             "LEASE_TOKEN", "LEASE_DEADLINE"};

static bool is_lease_var(const char *e)
{
    for (size_t i = 0; i < NVARS; i++) {
        size_t n = strlen(var_names[i]);
        if (strncmp(e, var_names[i], n) == 0 && e[n] == '=')
            return true;
    }
    return false;
}

/* Starts cmd (borrowed) in group g with l's variables over our
 * environment, SIGTERM, SIGINT and SIGHUP at their defaults, and
 * leasectl's signal mask from before hold; deadline_ns (monotonic) is
 * the lease's. Returns 0 or an errno. */
static int start(struct group *g, const struct lease *l, int64_t deadline_ns,
                 char **cmd)
{
    char token[32], deadline[32];
    snprintf(token, sizeof(token), "%llu", (unsigned long long)l->token);
    int64_t wall = nanotime_wall() + (deadline_ns - nanotime_mono());
    snprintf(deadline, sizeof(deadline), "%lld", (long long)(wall / S));
    const char *values[NVARS] = {l->session_id, l->owner, token, deadline};
    char *own[NVARS];
    bool ok = true;
    for (size_t i = 0; i < NVARS; i++)
        ok = (own[i] = env_entry(var_names[i], values[i])) != NULL && ok;
    size_t n = 0;
    while (environ[n] != NULL)
        n++;
    char **env = calloc(n + NVARS + 1, sizeof(*env));
    int err = ENOMEM;
    if (env != NULL && ok) {
        size_t k = 0;
        for (size_t i = 0; i < n; i++)
            if (!is_lease_var(environ[i]))
                env[k++] = environ[i];
        for (size_t i = 0; i < NVARS; i++)
            env[k++] = own[i];
        env[k] = NULL;
        err = group_start(g, cmd, env, &mask_before, forwarded, NFORWARDED);
    }
    for (size_t i = 0; i < NVARS; i++)
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

/* Sleeps until a wake-up, or at most until the monotonic time until
 * (-1: no limit). */
static void wait_event(int wake_rd, int64_t until)
{
    int timeout_ms = -1;
    if (until >= 0) {
        int64_t left = until - nanotime_mono();
        timeout_ms = left <= 0 ? 0 : (int)((left + 999999) / 1000000);
    }
    struct pollfd p = {.fd = wake_rd, .events = POLLIN};
    if (poll(&p, 1, timeout_ms) > 0) {
        char bytes[64];
        while (read(wake_rd, bytes, sizeof(bytes)) > 0) {
        }
    }
}

/* Runs the group until it is empty: passes signals on, and stops it on
 * time (see the top of the file). Returns CMD's exit code. */
static int supervise(struct group *g, struct lease_keeper *k,
                     const char *session, int wake_rd, int64_t grace_ns)
{
    int64_t kill_at = -1; /* once SIGTERM went out, when SIGKILL is due */
    bool killed = false;
    for (;;) {
        group_reap(g);
        if (g->done && group_empty(g))
            return exit_code(g->status);
        for (int i = 0; i < NFORWARDED; i++)
            if (atomic_exchange(&pending[i], false))
                group_signal(g, forwarded[i]);
        int64_t now = nanotime_mono();
        int64_t deadline = lease_keeper_deadline(k);
        int64_t term_at = FAULT_BROKEN("hold_late_kill")
                              ? deadline /* a control: see the top */
                              : deadline - grace_ns;
        bool lost = atomic_load(&lost_err) != 0;
        if (kill_at < 0 && (now >= term_at || lost || g->done)) {
            /* Time to go; or the lease is lost for certain; or CMD is
             * gone and what it left behind must go before the release. */
            char s[CTL_ESCAPED_LEN(LEASE_SESSION_MAX)];
            if (!g->done && !lost && now >= deadline)
                /* Stopped past the deadline (leasectl itself was
                 * stopped or starved): the keeper may not have said so
                 * yet. */
                fprintf(stderr,
                        "leasectl: hold: no renewal of %s before "
                        "its deadline: treating it as lost, "
                        "stopping the command\n",
                        ctl_escaped(session, s, sizeof(s)));
            else if (!g->done && !lost)
                fprintf(stderr, "leasectl: hold: no renewal of %s in time: "
                                "stopping the command, %.3gs before the "
                                "lease's deadline\n",
                        ctl_escaped(session, s, sizeof(s)),
                        (double)(deadline - now) / S);
            group_signal(g, SIGTERM);
            kill_at = now + grace_ns;
            if (kill_at > deadline && !FAULT_BROKEN("hold_late_kill"))
                kill_at = deadline;
        }
        if (kill_at >= 0 && now >= kill_at) {
            group_signal(g, SIGKILL);
            killed = true;
        }
        if (g->stopped)
            group_resume(g); /* after a ^Z; killed first if due */
        /* Once stopping, look again now and then: a process of the
         * group that is no child of leasectl's ends without a SIGCHLD
         * here. */
        int64_t until = kill_at >= 0 ? kill_at : term_at;
        if (kill_at >= 0) {
            int64_t again =
                now + (killed ? KILL_AGAIN_MS : STOPPING_POLL_MS) * 1000000;
            if (killed || until > again)
                until = again;
        }
        wait_event(wake_rd, until);
    }
}

/* What hold allows for its SIGKILL to end the group, on top of the
 * keeper's least margin: for hold to wake, on a loaded machine, and the
 * kernel to end every process. 200 ms, or a tenth of a TTL shorter than
 * 2 s, so that a short TTL keeps room for renewals. */
static int64_t kill_time(int64_t ttl_ns)
{
    return ttl_ns / 10 < KILL_TIME_NS ? ttl_ns / 10 : KILL_TIME_NS;
}

/* Seconds, for messages. */
static double secs(int64_t ns)
{
    return (double)ns / S;
}

/* The TTL to trust for the grant l, and --grace checked against it, into
 * *ttl_ns and *grace_ns; EXIT_OK, or the exit code of a refusal said on
 * stderr. */
static int settle(const struct ctl_args *a, const struct lease *l,
                  int64_t *ttl_ns, int64_t *grace_ns)
{
    if (l->ttl_ns > 0 && a->ttl_ns > l->ttl_ns) {
        fprintf(stderr, "leasectl: hold: --ttl %gs is longer than the "
                        "service's TTL (%gs)\n",
                secs(a->ttl_ns), secs(l->ttl_ns));
        return EXIT_USAGE;
    }
    if (l->ttl_ns > 0) {
        *ttl_ns = a->ttl_ns > 0 ? a->ttl_ns : l->ttl_ns;
    } else if (a->ttl_ns > 0) {
        *ttl_ns = a->ttl_ns;
    } else {
        *ttl_ns = l->expiry_ns - nanotime_wall();
        if (*ttl_ns <= 0) {
            fprintf(stderr, "leasectl: hold: the service does not say its "
                            "TTL, and the lease came back expired (are the "
                            "clocks apart? give --ttl)\n");
            return EXIT_FAILED;
        }
        fprintf(stderr, "leasectl: hold: the service does not say its TTL: "
                        "trusting %.3gs, its expiry less this host's clock "
                        "(give --ttl if the clocks may differ)\n",
                secs(*ttl_ns));
    }
    int64_t most = *ttl_ns / 2;
    if (a->grace_ns > most) {
        fprintf(stderr, "leasectl: hold: --grace %gs is more than the lease "
                        "allows: at most %gs, half the TTL (%gs)\n",
                secs(a->grace_ns), secs(most), secs(*ttl_ns));
        return EXIT_USAGE;
    }
    *grace_ns = a->grace_ns > 0 ? a->grace_ns
                : *ttl_ns / 10 < GRACE_DEFAULT_NS ? *ttl_ns / 10
                                                  : GRACE_DEFAULT_NS;
    return EXIT_OK;
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
    int64_t ttl_ns, grace_ns;
    int code = settle(a, &l, &ttl_ns, &grace_ns);
    if (code != EXIT_OK) {
        lease_release(c->client, &l);
        return code;
    }

    /* The pipe and the signal thread stay until leasectl exits, a moment
     * after this returns: a late signal only writes to the pipe. */
    int fds[2];
    if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) {
        fprintf(stderr, "leasectl: hold: pipe: %s\n", strerror(errno));
        lease_release(c->client, &l);
        return EXIT_FAILED;
    }
    atomic_store(&wake_fd, fds[1]);
    /* The TTL hold settled on, trusted by the keeper when the service
     * says none; and the least margin and the kill's time: hold stops
     * CMD with grace before the deadline, so its deadline is SIGKILL's. */
    struct lease_keeper_options ko = {
        .ttl_ns = a->ttl_ns > 0 || l.ttl_ns == 0 ? ttl_ns : 0,
        .margin_ns = lease_margin_min(ttl_ns) + kill_time(ttl_ns),
    };
    struct lease_keeper_callbacks cb = {.lost = on_lost,
                                        .trouble = on_trouble};
    struct lease_keeper *k;
    rc = lease_keeper_start(c->client, a->arg, owner, &ko, &cb, &k, &l);
    if (rc != LEASE_OK) {
        code = ctl_fail(rc, "hold: acquire");
        lease_release(c->client, &l);
        return code;
    }
    atomic_store(&forwarding, true);

    /* From here on CMD's status is hold's: --timeout no longer ends it
     * (the watchdog did, if this is too late). */
    struct group g;
    int err = ctl_deadline_stop()
                  ? start(&g, &l, lease_keeper_deadline(k), a->run)
                  : ETIMEDOUT;
    if (err == ETIMEDOUT) {
        code = EXIT_UNAVAILABLE;
    } else if (err == EAGAIN || err == ENOMEM) {
        fprintf(stderr, "leasectl: hold: fork: %s\n", strerror(err));
        code = EXIT_FAILED;
    } else if (err != 0) {
        fprintf(stderr, "leasectl: hold: %s: %s\n", a->run[0], strerror(err));
        code = 127; /* as a shell says it */
    } else {
        code = supervise(&g, k, a->arg, fds[0], grace_ns);
        group_end(&g);
    }
    rc = lease_keeper_stop(k); /* releases, unless lost */
    if (rc != LEASE_OK)
        ctl_fail(rc, "hold: release");
    return code;
}
