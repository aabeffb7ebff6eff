/*
 * The keeper and the fence together: a server that owns one session and
 * appends to a log that every holder of the session appends to, entering
 * the fence with its token for each write, so that a holder paused past
 * its lease cannot write after its successor did (docs/client.md,
 * "Fencing a resource").
 *
 *   fenced_writer HOST:PORT SESSION FENCE LOG [SECONDS]
 *
 * Holds SESSION with a keeper and, while the lease is valid, works in
 * pieces: each checks the lease, works 100 ms, then enters the fence
 * FENCE with its token, appends "TOKEN OWNER N\n" to LOG (one write; N
 * counts this process's writes) and leaves the fence. A pause in the work
 * longer than the lease (a GC pause, SIGSTOP, a slow disk) is what the
 * lease check cannot see and the fence refuses.
 * Prints "held SESSION token N" once it has the lease, "wrote token N"
 * after each write, "refused token N: a newer holder wrote" when the
 * fence refuses it, and "lost ..." if the keeper loses the lease. Exits 0
 * after SECONDS (default 10) or on SIGTERM/SIGINT, releasing the lease; 3
 * when the lease is held by someone else or lost, or a write is refused;
 * 4 when the service, the fence or the log is unavailable.
 *
 * Build it after `meson install`:
 *
 *   cc -o fenced_writer fenced_writer.c $(pkg-config --cflags --libs lease)
 */
#include <fcntl.h>
#include <lease.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t stop;
static atomic_int lost;

static void on_signal(int sig)
{
    (void)sig;
    stop = 1;
}

static void on_lost(void *arg, const struct lease *l, int err)
{
    (void)arg;
    printf("lost %s token %llu (%s)\n", l->session_id,
           (unsigned long long)l->token, lease_strerror(err));
    fflush(stdout);
    atomic_store(&lost, 1);
}

static void on_trouble(void *arg, const struct lease *l, int err,
                       const char *why)
{
    (void)arg, (void)l, (void)err;
    fprintf(stderr, "trouble: %s\n", why);
}

/* Appends line n to the log (log_fd, O_APPEND) inside the fence, with
 * l's token. Returns a lease error: LEASE_EHELD when a newer holder has
 * written. */
static int write_fenced(const char *fence, int log_fd, const struct lease *l,
                        int n)
{
    struct lease_fence *f;
    int err = lease_fence_enter(fence, l->token, &f);
    if (err != LEASE_OK) {
        fprintf(stderr, "fence: %s\n", lease_errmsg());
        return err;
    }
    char line[LEASE_OWNER_MAX + 64];
    int len = snprintf(line, sizeof(line), "%llu %s %d\n",
                       (unsigned long long)l->token, l->owner, n);
    /* One write: with O_APPEND, lines of several writers never mix. */
    if (write(log_fd, line, (size_t)len) != len) {
        perror("writing the log");
        err = LEASE_EUNAVAILABLE;
    }
    lease_fence_leave(f); /* held for the write only */
    return err;
}

int main(int argc, char **argv)
{
    if (argc < 5 || argc > 6) {
        fprintf(stderr, "usage: %s HOST:PORT SESSION FENCE LOG [SECONDS]\n",
                argv[0]);
        return 2;
    }
    const char *fence = argv[3];
    int seconds = argc == 6 ? atoi(argv[5]) : 10;
    char owner[128], host[64] = "host";
    gethostname(host, sizeof(host) - 1);
    snprintf(owner, sizeof(owner), "%s-%ld-writer", host, (long)getpid());
    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);

    int log_fd = open(argv[4], O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC,
                      0666);
    if (log_fd < 0) {
        perror(argv[4]);
        return 4;
    }
    struct lease_client *client;
    if (lease_grpc_open(argv[1], NULL, &client) != LEASE_OK) {
        fprintf(stderr, "%s\n", lease_errmsg());
        close(log_fd);
        return 2;
    }
    struct lease_keeper_set *set = lease_keeper_set_create();
    struct lease_keeper_options opts = {.set = set};
    struct lease_keeper_callbacks cb = {.lost = on_lost, .trouble = on_trouble};
    struct lease_keeper *k;
    struct lease l;
    int err = lease_keeper_start(client, argv[2], owner, &opts, &cb, &k, &l);
    if (err != LEASE_OK) {
        fprintf(stderr, "acquire: %s\n", lease_errmsg());
        lease_keeper_set_destroy(set);
        lease_client_destroy(client);
        close(log_fd);
        return err == LEASE_EHELD ? 3 : 4;
    }
    printf("held %s token %llu\n", l.session_id, (unsigned long long)l.token);
    fflush(stdout);

    int rc = 0;
    for (int n = 1; n <= seconds * 10 && !stop; n++) { /* 100 ms each */
        if (!lease_keeper_valid(k)) { /* lost, or past its deadline */
            rc = 3;
            break;
        }
        lease_keeper_lease(k, &l);
        /* The work, shorter than the keeper's margin (a tenth of the
         * TTL): the lease was valid when it began. */
        struct timespec ts = {0, 100 * 1000000L};
        nanosleep(&ts, NULL);
        err = write_fenced(fence, log_fd, &l, n);
        if (err == LEASE_EHELD) {
            printf("refused token %llu: a newer holder wrote\n",
                   (unsigned long long)l.token);
            rc = 3;
            break;
        }
        if (err != LEASE_OK) { /* said on stderr */
            rc = 4;
            break;
        }
        printf("wrote token %llu\n", (unsigned long long)l.token);
        fflush(stdout);
    }
    fflush(stdout);
    if (rc == 0 && atomic_load(&lost))
        rc = 3;
    /* Leaving the set to release everything (here: this one lease). */
    lease_keeper_set_destroy(set);
    lease_client_destroy(client);
    lease_grpc_wait_shutdown(1000); /* gRPC's threads finish first */
    close(log_fd);
    return rc;
}
