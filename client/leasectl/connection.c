/*
 * leasectl's side of the connection: what a person at a shell needs that
 * liblease, made for programs, does not say. The plaintext rule in
 * leasectl's words (--tls-ca, not liblease's tls_ca_file); gRPC's own log
 * lines kept off the terminal unless asked for; a quick check that
 * something listens, with what is probably wrong when it does not (TLS
 * one side only); and --timeout as the limit of the whole command.
 *
 * The limit is a watchdog thread, not a deadline on each call: a command
 * makes several calls (the check, an admin Get, the lease call, each
 * connecting anew), and liblease gives each the whole --timeout. When
 * the limit passes, the watchdog says so and ends the process at once
 * (exit 4); the call in flight may or may not have taken effect, as with
 * any call that got no answer. hold stops it before CMD runs: from then
 * on CMD's status is the exit status.
 */
#include <errno.h>
#include <grpc/support/log.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "addr.h"
#include "leasectl.h"

#define REACH_MS 1000 /* the most ctl_reach takes */

static void drop_log(gpr_log_func_args *args)
{
    (void)args;
}

void ctl_quiet_grpc(void)
{
    const char *verbosity = getenv("GRPC_VERBOSITY");
    const char *trace = getenv("GRPC_TRACE");
    if ((verbosity == NULL || verbosity[0] == '\0') &&
        (trace == NULL || trace[0] == '\0'))
        gpr_set_log_function(drop_log);
}

int ctl_check_url(const struct ctl *c)
{
    if (c->args.tls_ca_file != NULL)
        return EXIT_OK;
    const char *p = c->args.url;
    for (;;) {
        size_t n = strcspn(p, ",");
        char one[512], why[200];
        bool plaintext_ok = true;
        if (n < sizeof(one)) {
            memcpy(one, p, n);
            one[n] = '\0';
            /* A malformed address is liblease's to report. */
            if (addr_check(one, &plaintext_ok, why, sizeof(why)) == 0 &&
                !plaintext_ok) {
                fprintf(stderr, "leasectl: %s: %s is not a loopback "
                                "address: plaintext is allowed only on "
                                "loopback or a unix socket: give --tls-ca "
                                "FILE for TLS (INVALID_ARGUMENT)\n",
                        c->cmd, one);
                return EXIT_INVALID;
            }
        }
        if (p[n] == '\0')
            return EXIT_OK;
        p += n + 1;
    }
}

/* What is probably wrong when a connection failed with why, for a client
 * that speaks TLS or not: "" when nothing better can be said. A TLS
 * server closes a connection that starts in plaintext; OpenSSL finds no
 * TLS record ("wrong version number") in a plaintext server's answer. */
static const char *hint(bool tls, const char *why)
{
    if (!tls && strstr(why, "Socket closed") != NULL)
        return ": the server probably speaks TLS: give --tls-ca FILE";
    if (tls && strstr(why, "wrong version number") != NULL)
        return ": the server probably speaks plaintext: leave out --tls-ca";
    return "";
}

int ctl_reach(struct ctl *c)
{
    char why[256];
    int64_t ms = c->opts.timeout_ms < REACH_MS ? c->opts.timeout_ms
                                               : REACH_MS;
    if (conn_reachable(&c->conn, ms, why, sizeof(why)))
        return EXIT_OK;
    ctl_deadline_settle();
    fprintf(stderr,
            "leasectl: %s: cannot connect to %s: %s%s (UNAVAILABLE)\n",
            c->cmd, c->args.url, why,
            hint(c->args.tls_ca_file != NULL, why));
    return EXIT_UNAVAILABLE;
}

/* ---- The limit of the whole command (--timeout) --------------------- */

enum { IDLE, ARMED, FIRED };
static atomic_int state;
static struct timespec end; /* CLOCK_MONOTONIC */
static int64_t end_ns;        /* the same */
static char message[160];

/* Says that the command's time ran out and ends it, unless the command
 * already finished (or another thread is saying it). */
static void expire(void)
{
    int armed = ARMED;
    if (!atomic_compare_exchange_strong(&state, &armed, FIRED))
        return;
    fflush(stdout); /* what a list printed so far */
    ssize_t n = write(STDERR_FILENO, message, strlen(message));
    (void)n;
    _exit(EXIT_UNAVAILABLE);
}

static void *watch(void *arg)
{
    (void)arg;
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &end, NULL) ==
           EINTR) {
    }
    expire();
    return NULL;
}

int ctl_deadline_start(const struct ctl *c)
{
    const struct ctl_args *a = &c->args;
    if (a->wait_ns == CTL_FOREVER)
        return 0; /* each call still ends within --timeout */
    end_ns = nanotime_mono() + a->timeout_ns + a->wait_ns;
    end.tv_sec = (time_t)(end_ns / 1000000000);
    end.tv_nsec = (long)(end_ns % 1000000000);
    bool changes = a->cmd == CTL_ACQUIRE || a->cmd == CTL_RENEW ||
                   a->cmd == CTL_RELEASE || a->cmd == CTL_HOLD;
    char wait[48] = "";
    if (a->wait_ns > 0)
        snprintf(wait, sizeof(wait), " and --wait %gs",
                 (double)a->wait_ns / 1e9);
    snprintf(message, sizeof(message),
             "leasectl: %s: no answer within --timeout %gs%s%s "
             "(DEADLINE_EXCEEDED)\n",
             c->cmd, (double)a->timeout_ns / 1e9, wait,
             changes ? ": it may or may not have taken effect" : "");
    atomic_store(&state, ARMED);
    int err = ctl_start_thread(watch);
    if (err != 0)
        atomic_store(&state, IDLE);
    return err;
}

bool ctl_deadline_stop(void)
{
    return atomic_exchange(&state, IDLE) != FIRED;
}

void ctl_deadline_settle(void)
{
    /* A call that failed as the time ran out is the time running out,
     * however the watchdog's thread and this one were scheduled. */
    if (atomic_load(&state) == ARMED && nanotime_mono() >= end_ns)
        expire();
    if (ctl_deadline_stop())
        return;
    for (;;)
        pause(); /* the watchdog says why, and ends the process */
}
