/*
 * A C server's part in the lease lifecycle, whole: own one session with
 * a keeper, work on it only while the lease is valid (fencing each write
 * with the token), stop at once when it is lost, release at the end.
 *
 *   session_owner HOST:PORT SESSION [SECONDS]
 *
 * Prints "held SESSION token N" once it has the lease, "working token N"
 * each 100 ms of work, and "lost" if the lease goes. Exits 0 after
 * SECONDS (default 10) or on SIGTERM/SIGINT, releasing the lease; 3 when
 * the lease is held by someone else or lost; 4 when the service is
 * unavailable. Build it after `meson install`:
 *
 *   cc -o session_owner session_owner.c $(pkg-config --cflags --libs lease)
 */
#include <lease.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
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

int main(int argc, char **argv)
{
    if (argc < 3 || argc > 4) {
        fprintf(stderr, "usage: %s HOST:PORT SESSION [SECONDS]\n", argv[0]);
        return 2;
    }
    int seconds = argc == 4 ? atoi(argv[3]) : 10;
    char owner[128], host[64] = "host";
    gethostname(host, sizeof(host) - 1);
    snprintf(owner, sizeof(owner), "%s-%ld-example", host, (long)getpid());
    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);

    struct lease_client *client;
    if (lease_grpc_open(argv[1], NULL, &client) != LEASE_OK) {
        fprintf(stderr, "%s\n", lease_errmsg());
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
        return err == LEASE_EHELD ? 3 : 4;
    }
    printf("held %s token %llu\n", l.session_id, (unsigned long long)l.token);
    fflush(stdout);

    int rc = 0;
    for (int tick = 0; tick < seconds * 10 && !stop; tick++) {
        if (!lease_keeper_valid(k)) { /* lost, or past its deadline */
            rc = 3;
            break;
        }
        lease_keeper_lease(k, &l);
        /* The work: anything written goes out with l.token, so that a
         * fenced store refuses it once a newer owner has written. */
        printf("working token %llu\n", (unsigned long long)l.token);
        fflush(stdout);
        struct timespec ts = {0, 100 * 1000000L};
        nanosleep(&ts, NULL);
    }
    if (atomic_load(&lost))
        rc = 3;
    /* Leaving the set to release everything (here: this one lease). */
    lease_keeper_set_destroy(set);
    lease_client_destroy(client);
    lease_grpc_wait_shutdown(1000); /* gRPC's threads finish first */
    return rc;
}
