/*
 * leasectl hold SESSION [--owner O] [--wait D] [--grace D] [--ttl D]
 *               -- CMD ARGS…
 *
 * Like flock(1), across hosts: acquire the lease (waiting up to D with
 * --wait), run CMD with LEASE_SESSION, LEASE_OWNER and LEASE_TOKEN in its
 * environment, renew at a third of the TTL, and release when CMD exits;
 * exit with CMD's status (128 + the signal when a signal ended it).
 *
 * When the lease is lost (a renewal says it is held by someone else, or
 * the service stays unavailable past the local deadline: the time of the
 * last successful renewal's request plus the TTL, less a tenth), CMD gets
 * SIGTERM, then SIGKILL after --grace (5 s). SIGTERM, SIGINT and SIGHUP
 * to leasectl are passed on to CMD.
 *
 * The TTL is what the first grant left of the lease when it came back
 * (expiry minus the local clock), or --ttl when the clocks of this host
 * and the daemon's may differ.
 *
 * The owner is --owner, else $LEASE_OWNER, else USER@HOST/PID-NONCE:
 * unlike acquire's USER@HOST, unique to the run, so that two holds of one
 * user exclude each other as two flock(1)s do. CMD's LEASE_OWNER makes a
 * `leasectl renew SESSION` within it act as the holder.
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "duration.h"
#include "leasectl.h"

#define TICK_NS INT64_C(50000000)   /* how often the loop looks around */
#define RETRY_NS INT64_C(500000000) /* after a failed renewal */

static const char help[] =
    "Usage: leasectl hold SESSION [--owner O] [--wait D] [--grace D] "
    "[--ttl D] -- CMD [ARGS…]\n"
    "Runs CMD while holding the lease of SESSION: renews it, stops CMD\n"
    "(SIGTERM, SIGKILL after --grace, 5s) if the lease is lost, releases it\n"
    "when CMD exits, and exits with CMD's status. CMD sees LEASE_SESSION,\n"
    "LEASE_OWNER and LEASE_TOKEN. The owner is O, else $LEASE_OWNER, else\n"
    "USER@HOST/PID-NONCE (unique to the run). Exit 3 when the lease is held\n"
    "by another owner (after --wait, if given).\n";

static volatile sig_atomic_t pending_signal;

static void on_signal(int sig)
{
    pending_signal = sig;
}

static void nap(int64_t ns)
{
    struct timespec ts = {ns / 1000000000, ns % 1000000000};
    nanosleep(&ts, NULL);
}

static pid_t start(const struct lease *l, char **cmd)
{
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    char token[32];
    snprintf(token, sizeof(token), "%llu", (unsigned long long)l->token);
    setenv("LEASE_SESSION", l->session_id, 1);
    setenv("LEASE_OWNER", l->owner, 1);
    setenv("LEASE_TOKEN", token, 1);
    signal(SIGTERM, SIG_DFL);
    signal(SIGINT, SIG_DFL);
    signal(SIGHUP, SIG_DFL);
    execvp(cmd[0], cmd);
    fprintf(stderr, "leasectl: hold: %s: %s\n", cmd[0], strerror(errno));
    _exit(127);
}

static int exit_code(int status)
{
    if (WIFEXITED(status))
        return WEXITSTATUS(status);
    return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : EXIT_FAILED;
}

int ctl_hold(struct ctl *c, int argc, char **argv)
{
    static const struct option options[] = {
        {"owner", required_argument, NULL, 'o'},
        {"wait", required_argument, NULL, 'w'},
        {"grace", required_argument, NULL, 'g'},
        {"ttl", required_argument, NULL, 't'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0}};
    const char *owner_flag = NULL;
    int64_t wait_ns = 0, grace_ns = INT64_C(5000000000), ttl_ns = 0;
    /* hold's own words end at "--"; CMD follows. */
    int dd = 1;
    while (dd < argc && strcmp(argv[dd], "--") != 0)
        dd++;
    if (argc == 2 && strcmp(argv[1], "--help") == 0) {
        fputs(help, stdout);
        return EXIT_OK;
    }
    if (dd >= argc - 1) /* no "--", or no CMD after it */
        return ctl_usage("hold", help, "missing -- CMD");
    char **cmd = argv + dd + 1;
    optind = 0; /* 0: getopt starts afresh (and drops main's "+") */
    int opt, which = 0;
    while ((opt = getopt_long(dd, argv, ":", options, &which)) != -1) {
        int bad = 0;
        switch (opt) {
        case 'o':
            owner_flag = optarg;
            break;
        case 'w':
            bad = duration_parse(optarg, &wait_ns);
            break;
        case 'g':
            bad = duration_parse(optarg, &grace_ns);
            break;
        case 't':
            bad = duration_parse(optarg, &ttl_ns) || ttl_ns <= 0;
            break;
        case 'h':
            fputs(help, stdout);
            return EXIT_OK;
        default:
            return ctl_bad_option("hold", help, opt, argv);
        }
        if (bad)
            return ctl_usage("hold", help, "--%s: not a duration: %s",
                             options[which].name, optarg);
    }
    if (dd == optind)
        return ctl_usage("hold", help, "missing SESSION");
    if (dd - optind > 1)
        return ctl_usage("hold", help, "unexpected argument %s",
                         argv[optind + 1]);
    const char *session = argv[optind];
    char buf[LEASE_OWNER_MAX + 1];
    const char *owner = ctl_owner(owner_flag, true, buf, sizeof(buf));
    int rc = ctl_reach(c);
    if (rc != EXIT_OK)
        return rc;

    struct lease l;
    int64_t sent;
    rc = ctl_acquire(c, session, owner, wait_ns, &l, &sent);
    if (rc != LEASE_OK)
        return ctl_fail(rc, "hold: acquire");
    if (ttl_ns == 0)
        ttl_ns = l.expiry_ns - ctl_wall_ns();
    if (ttl_ns <= 0) {
        fprintf(stderr, "leasectl: hold: the lease came back expired (are "
                        "the clocks apart? give --ttl)\n");
        lease_release(c->client, &l);
        return EXIT_FAILED;
    }
    /* No renewal may wait past the lease's deadline: calls get at most a
     * third of the TTL from here on. */
    if (c->opts.timeout_ms * INT64_C(1000000) > ttl_ns / 3) {
        struct lease_grpc_options o = c->opts;
        o.timeout_ms = ttl_ns / 3 / 1000000 > 0 ? ttl_ns / 3 / 1000000 : 1;
        struct lease_client *shorter;
        if (lease_grpc_open(c->url, &o, &shorter) == LEASE_OK) {
            lease_client_destroy(c->client);
            c->client = shorter;
        }
    }
    int64_t margin = ttl_ns / 10;
    int64_t deadline = sent + ttl_ns - margin; /* trust the lease until */
    int64_t next_renew = sent + ttl_ns / 3;

    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    pid_t child = start(&l, cmd);
    if (child < 0) {
        fprintf(stderr, "leasectl: hold: fork: %s\n", strerror(errno));
        lease_release(c->client, &l);
        return EXIT_FAILED;
    }

    bool lost = false;
    int64_t kill_at = 0;
    int status = 0;
    for (;;) {
        pid_t done = waitpid(child, &status, WNOHANG);
        if (done == child)
            break;
        if (pending_signal != 0) {
            kill(child, pending_signal);
            pending_signal = 0;
        }
        int64_t now = ctl_mono_ns();
        if (!lost && now >= next_renew) {
            struct lease out;
            int64_t asked = now;
            int r = lease_renew(c->client, &l, &out);
            if (r == LEASE_OK) {
                l = out;
                deadline = asked + ttl_ns - margin;
                /* A third of the TTL, less up to a tenth of it at random,
                 * so that many holders do not renew in step. */
                next_renew = asked + ttl_ns / 3 -
                             (int64_t)((double)rand() / RAND_MAX *
                                       (double)(ttl_ns / 10));
            } else if (r == LEASE_EHELD) {
                fprintf(stderr, "leasectl: hold: the lease of %s was lost "
                                "(FAILED_PRECONDITION)\n",
                        session);
                lost = true;
            } else {
                fprintf(stderr, "leasectl: hold: renew: %s\n",
                        lease_errmsg());
                next_renew = now + RETRY_NS;
            }
            if (!lost && ctl_mono_ns() >= deadline) {
                fprintf(stderr, "leasectl: hold: no renewal of %s before its "
                                "deadline: treating it as lost "
                                "(DEADLINE_EXCEEDED)\n",
                        session);
                lost = true;
            }
            if (lost) {
                kill(child, SIGTERM);
                kill_at = ctl_mono_ns() + grace_ns;
            }
        }
        if (lost && kill_at != 0 && ctl_mono_ns() >= kill_at) {
            kill(child, SIGKILL);
            kill_at = 0;
        }
        nap(TICK_NS);
    }
    if (!lost) {
        rc = lease_release(c->client, &l);
        if (rc != LEASE_OK)
            ctl_fail(rc, "hold: release");
    }
    return exit_code(status);
}
