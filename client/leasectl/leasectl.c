/*
 * leasectl: leased from the shell. The lease calls go through liblease
 * (the same client a C server uses), the admin and health calls through
 * its connection (conn.h). Commands, options and exit codes are in
 * docs/leasectl.1; the command line is options.c's.
 *
 * Every failure is one line on stderr, "leasectl: COMMAND: what happened
 * (STATUS_NAME)" with the gRPC status name; bad usage is "leasectl:
 * [COMMAND: ]what is wrong" and where the help is. Before its first call a
 * command checks that something listens (ctl_reach): liblease rides out a
 * daemon's restart until its timeout, which from the shell is only a
 * wait when there is no daemon. --timeout limits the whole command
 * (connection.c).
 */
#include "leasectl.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "grpc/health/v1/health.pb-c.h"
#include "json.h"
#include "leased/admin/v1/admin.pb-c.h"
#include "status.h"
#include "validate.h"
#include "version.h"

#define NAME_PART_MAX 64 /* bytes of the login and host names in an owner */
#define GET_PATH "/leased.admin.v1.Admin/Get"
#define STATS_PATH "/leased.admin.v1.Admin/Stats"

int ctl_exit_of(int err)
{
    switch (err) {
    case LEASE_OK:
        return EXIT_OK;
    case LEASE_EHELD:
        return EXIT_HELD;
    case LEASE_EUNAVAILABLE:
    case LEASE_EDEADLINE:
        return EXIT_UNAVAILABLE;
    case LEASE_EINVAL:
        return EXIT_INVALID;
    case LEASE_EUNSUPPORTED:
        return EXIT_UNSUPPORTED;
    case LEASE_EDENIED:
        return EXIT_DENIED;
    case LEASE_EUNAUTH:
        return EXIT_UNAUTHENTICATED;
    case LEASE_EGONE:
        return EXIT_GONE;
    default:
        return EXIT_FAILED;
    }
}

/* The status a liblease error stands for. */
static grpc_status_code status_of(int err)
{
    switch (err) {
    case LEASE_EHELD:
        return GRPC_STATUS_FAILED_PRECONDITION;
    case LEASE_EUNSUPPORTED:
        return GRPC_STATUS_UNIMPLEMENTED;
    case LEASE_EINVAL:
        return GRPC_STATUS_INVALID_ARGUMENT;
    case LEASE_EDEADLINE:
        return GRPC_STATUS_DEADLINE_EXCEEDED;
    case LEASE_ENOMEM:
        return GRPC_STATUS_RESOURCE_EXHAUSTED;
    case LEASE_EDENIED:
        return GRPC_STATUS_PERMISSION_DENIED;
    case LEASE_EUNAUTH:
        return GRPC_STATUS_UNAUTHENTICATED;
    case LEASE_EGONE:
        return GRPC_STATUS_OUT_OF_RANGE;
    default:
        return GRPC_STATUS_UNAVAILABLE;
    }
}

/* Whether text ends with "(NAME)", NAME a gRPC status name. */
static bool ends_with_status(const char *text)
{
    const char *open = strrchr(text, '(');
    size_t n = open != NULL ? strlen(open + 1) : 0;
    if (n < 2 || open[n] != ')')
        return false;
    for (int code = 0; code < STATUS_CODES; code++) {
        const char *name = status_name(code);
        if (strlen(name) == n - 1 && strncmp(open + 1, name, n - 1) == 0)
            return true;
    }
    return false;
}

int ctl_start_thread(void *(*run)(void *))
{
    pthread_attr_t attr;
    int err = pthread_attr_init(&attr);
    if (err != 0)
        return err;
    pthread_t t;
    err = pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (err == 0)
        err = pthread_create(&t, &attr, run, NULL);
    pthread_attr_destroy(&attr);
    return err;
}

int ctl_fail(int err, const char *what)
{
    ctl_deadline_settle();
    const char *why = lease_errmsg();
    if (why[0] == '\0')
        why = lease_strerror(err);
    /* The gRPC driver's reasons end with the status's name; liblease's
     * own checks (an empty owner, …) come before any call. */
    if (ends_with_status(why))
        fprintf(stderr, "leasectl: %s: %s\n", what, why);
    else
        fprintf(stderr, "leasectl: %s: %s (%s)\n", what, why,
                status_name(status_of(err)));
    return ctl_exit_of(err);
}

/* Copies name into out (len bytes), at most NAME_PART_MAX bytes of it,
 * each byte that is not printable ASCII (or is a space) as '_': an
 * owner is UTF-8 of at most LEASE_OWNER_MAX bytes, and easier to read
 * and to type when plain. */
static void name_part(char *out, size_t len, const char *name)
{
    size_t n = 0;
    for (; name[n] != '\0' && n < NAME_PART_MAX && n + 1 < len; n++)
        out[n] = name[n] > ' ' && name[n] <= '~' ? name[n] : '_';
    out[n] = '\0';
}

static unsigned nonce(void)
{
    unsigned n = (unsigned)nanotime_mono() ^ (unsigned)getpid();
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        if (read(fd, &n, sizeof(n)) != (ssize_t)sizeof(n))
            n ^= (unsigned)nanotime_wall();
        close(fd);
    }
    return n;
}

const char *ctl_owner(const char *flag, bool unique, char *buf, size_t len)
{
    if (flag != NULL)
        return flag;
    const char *env = getenv("LEASE_OWNER");
    if (env != NULL && env[0] != '\0')
        return env;
    const struct passwd *pw = getpwuid(geteuid());
    const char *login =
        pw != NULL && pw->pw_name[0] != '\0' ? pw->pw_name : getenv("USER");
    char user[NAME_PART_MAX + 1], host[NAME_PART_MAX + 1], name[256] = "";
    if (login != NULL && login[0] != '\0')
        name_part(user, sizeof(user), login);
    else
        snprintf(user, sizeof(user), "uid%lu", (unsigned long)geteuid());
    if (gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0')
        snprintf(name, sizeof(name), "localhost");
    name_part(host, sizeof(host), name);
    if (unique)
        snprintf(buf, len, "%s@%s/%ld-%08x", user, host, (long)getpid(),
                 nonce());
    else
        snprintf(buf, len, "%s@%s", user, host);
    return buf;
}

int ctl_acquire(struct ctl *c, const char *session, const char *owner,
                int64_t wait_ns, struct lease *out)
{
    if (wait_ns == 0)
        return lease_acquire(c->client, session, owner, out);
    return lease_wait(
        c->client, session, owner,
        wait_ns == CTL_FOREVER ? INT64_MAX : nanotime_mono() + wait_ns, out);
}

static int cmd_acquire(struct ctl *c)
{
    int rc = ctl_reach(c);
    if (rc != EXIT_OK)
        return rc;
    char buf[LEASE_OWNER_MAX + 1];
    const char *owner = ctl_owner(c->args.owner, false, buf, sizeof(buf));
    struct lease l;
    rc = ctl_acquire(c, c->args.arg, owner, c->args.wait_ns, &l);
    if (rc != LEASE_OK)
        return ctl_fail(rc, "acquire");
    ctl_print_lease(c, &l);
    return EXIT_OK;
}

/* The exit code of an admin or health call's status; a failure is said
 * on stderr. */
static int reported(const struct ctl *c, grpc_status_code st,
                    const char *details)
{
    if (st == GRPC_STATUS_OK)
        return EXIT_OK;
    ctl_deadline_settle();
    fprintf(stderr, "leasectl: %s: %s (%s)\n", c->cmd,
            details[0] != '\0' ? details : "failed", status_name(st));
    switch (st) {
    case GRPC_STATUS_NOT_FOUND:
        return EXIT_NOT_FOUND;
    case GRPC_STATUS_FAILED_PRECONDITION: /* Revoke: another token */
        return EXIT_HELD;
    case GRPC_STATUS_INVALID_ARGUMENT:
        return EXIT_INVALID;
    case GRPC_STATUS_UNIMPLEMENTED:
        return EXIT_UNSUPPORTED;
    case GRPC_STATUS_UNAVAILABLE:
    case GRPC_STATUS_DEADLINE_EXCEEDED:
        return EXIT_UNAVAILABLE;
    case GRPC_STATUS_PERMISSION_DENIED:
        return EXIT_DENIED;
    case GRPC_STATUS_UNAUTHENTICATED:
        return EXIT_UNAUTHENTICATED;
    default:
        return EXIT_FAILED;
    }
}

int ctl_call(struct ctl *c, const char *path, const ProtobufCMessage *req,
             const ProtobufCMessageDescriptor *desc, ProtobufCMessage **resp)
{
    char details[256];
    grpc_status_code st =
        conn_call(&c->conn, path, 0, req, desc, resp, NULL, details,
                  sizeof(details));
    return reported(c, st, details);
}

/* The lease renew and release act on, into *l: SESSION with --token (and
 * the owner); SESSION alone: the lease the owner holds now (admin Get),
 * or, when it holds none, why in why (len bytes); or the JSON object on
 * stdin (what `acquire --json` printed). Checks that the daemon listens.
 * Returns EXIT_OK with *l or why set, or the exit code of a failure it
 * reported. */
static int lease_from(struct ctl *c, struct lease *l, char *why, size_t len)
{
    const struct ctl_args *a = &c->args;
    memset(l, 0, sizeof(*l));
    why[0] = '\0';
    if (a->arg == NULL) {
        if (isatty(STDIN_FILENO))
            return ctl_usage(a->cmd,
                             "missing SESSION (or a lease as JSON on stdin)");
        static char text[8192];
        size_t n = fread(text, 1, sizeof(text) - 1, stdin);
        text[n] = '\0';
        if (!json_get_string(text, "session_id", l->session_id,
                             sizeof(l->session_id)) ||
            !json_get_string(text, "owner", l->owner, sizeof(l->owner)) ||
            !json_get_u64(text, "token", &l->token))
            return ctl_usage(a->cmd,
                             "want a lease as JSON on stdin (session_id, "
                             "owner, token)");
        return ctl_reach(c);
    }
    const char *session = a->arg;
    char buf[LEASE_OWNER_MAX + 1];
    const char *owner = ctl_owner(a->owner, false, buf, sizeof(buf));
    const char *bad = validate_string((const unsigned char *)session,
                                      strlen(session), LEASE_SESSION_MAX);
    const char *field = "session_id";
    if (bad == NULL) {
        bad = validate_string((const unsigned char *)owner, strlen(owner),
                              LEASE_OWNER_MAX);
        field = "owner";
    }
    if (bad != NULL) {
        fprintf(stderr, "leasectl: %s: %s: %s (INVALID_ARGUMENT)\n", c->cmd,
                field, bad);
        return EXIT_INVALID;
    }
    snprintf(l->session_id, sizeof(l->session_id), "%s", session);
    snprintf(l->owner, sizeof(l->owner), "%s", owner);
    l->token = a->token.value;
    int rc = ctl_reach(c);
    if (rc != EXIT_OK || a->token.set)
        return rc;
    Leased__Admin__V1__GetRequest req = LEASED__ADMIN__V1__GET_REQUEST__INIT;
    req.session_id = l->session_id;
    ProtobufCMessage *resp;
    char details[256];
    grpc_status_code st =
        conn_call(&c->conn, GET_PATH, 0, &req.base,
                  &leased__admin__v1__get_response__descriptor, &resp, NULL,
                  details, sizeof(details));
    if (st != GRPC_STATUS_OK && st != GRPC_STATUS_NOT_FOUND)
        return reported(c, st, details);
    const Leased__Admin__V1__Lease *cur =
        st == GRPC_STATUS_OK ? ((Leased__Admin__V1__GetResponse *)resp)->lease
                             : NULL;
    char s[CTL_ESCAPED_LEN(LEASE_SESSION_MAX)];
    char held_by[CTL_ESCAPED_LEN(LEASE_OWNER_MAX)];
    char us[CTL_ESCAPED_LEN(LEASE_OWNER_MAX)];
    ctl_escaped(session, s, sizeof(s));
    if (cur == NULL)
        snprintf(why, len, "%s has no lease", s);
    else if (strcmp(cur->owner, owner) != 0)
        snprintf(why, len, "%s is held by %s, not %s", s,
                 ctl_escaped(cur->owner, held_by, sizeof(held_by)),
                 ctl_escaped(owner, us, sizeof(us)));
    else
        l->token = cur->token;
    if (st == GRPC_STATUS_OK)
        protobuf_c_message_free_unpacked(resp, NULL);
    return EXIT_OK;
}

static int cmd_renew(struct ctl *c)
{
    struct lease cur, out;
    char why[4200]; /* three names, escaped */
    int rc = lease_from(c, &cur, why, sizeof(why));
    if (rc != EXIT_OK)
        return rc;
    if (why[0] != '\0') {
        fprintf(stderr, "leasectl: renew: %s (FAILED_PRECONDITION)\n", why);
        return EXIT_HELD;
    }
    rc = lease_renew(c->client, &cur, &out);
    if (rc != LEASE_OK)
        return ctl_fail(rc, "renew");
    ctl_print_lease(c, &out);
    return EXIT_OK;
}

static int cmd_release(struct ctl *c)
{
    struct lease cur;
    char why[4200]; /* three names, escaped */
    int rc = lease_from(c, &cur, why, sizeof(why));
    if (rc != EXIT_OK)
        return rc;
    if (why[0] != '\0') {
        fprintf(stderr, "leasectl: release: %s: nothing to release\n", why);
        if (c->args.json)
            printf("{\"released\":false}\n");
        return EXIT_OK;
    }
    rc = lease_release(c->client, &cur);
    if (rc != LEASE_OK)
        return ctl_fail(rc, "release");
    if (c->args.json)
        printf("{\"released\":true}\n");
    return EXIT_OK;
}

/* The end of the restart quarantine on this host's wall clock, from the
 * admin Stats call, asked once per run; 0 when none runs, or when Stats
 * fails (then a live lease past its expiry says only that it is). */
static int64_t quarantine_end(struct ctl *c)
{
    static bool asked;
    static int64_t end_ns;
    if (asked)
        return end_ns;
    asked = true;
    Leased__Admin__V1__StatsRequest req =
        LEASED__ADMIN__V1__STATS_REQUEST__INIT;
    ProtobufCMessage *resp;
    char details[256];
    int64_t now = nanotime_wall();
    if (conn_call(&c->conn, STATS_PATH, 0, &req.base,
                  &leased__admin__v1__stats_response__descriptor, &resp,
                  NULL, details, sizeof(details)) != GRPC_STATUS_OK)
        return end_ns;
    int64_t ms = ((Leased__Admin__V1__StatsResponse *)resp)
                     ->quarantine_remaining_ms;
    if (ms > 0)
        end_ns = now + ms * 1000000;
    protobuf_c_message_free_unpacked(resp, NULL);
    return end_ns;
}

static void print_admin_lease(struct ctl *c, const Leased__Admin__V1__Lease *l)
{
    struct ctl_view v = {
        .session_id = l->session_id,
        .owner = l->owner,
        .token = l->token,
        .expiry_ns = l->expiry != NULL ? l->expiry->seconds * 1000000000 +
                                             l->expiry->nanos
                                       : 0,
        .live = l->live,
    };
    if (l->live)
        v.quarantine_end_ns = quarantine_end(c);
    ctl_print_view(c, &v);
}

static int cmd_get(struct ctl *c)
{
    int rc = ctl_reach(c);
    if (rc != EXIT_OK)
        return rc;
    Leased__Admin__V1__GetRequest req = LEASED__ADMIN__V1__GET_REQUEST__INIT;
    req.session_id = c->args.arg;
    ProtobufCMessage *resp;
    rc = ctl_call(c, GET_PATH, &req.base,
                  &leased__admin__v1__get_response__descriptor, &resp);
    if (rc != EXIT_OK)
        return rc;
    Leased__Admin__V1__GetResponse *r = (Leased__Admin__V1__GetResponse *)resp;
    if (r->lease != NULL)
        print_admin_lease(c, r->lease);
    protobuf_c_message_free_unpacked(resp, NULL);
    return EXIT_OK;
}

static int cmd_list(struct ctl *c)
{
    int rc = ctl_reach(c);
    if (rc != EXIT_OK)
        return rc;
    char token[LEASE_SESSION_MAX + 1] = "";
    long left = c->args.limit > 0 ? c->args.limit : -1;
    do {
        Leased__Admin__V1__ListRequest req =
            LEASED__ADMIN__V1__LIST_REQUEST__INIT;
        req.prefix = c->args.arg != NULL ? c->args.arg : "";
        req.page_token = token;
        req.page_size = left > 0 && left < 1000 ? (int32_t)left : 1000;
        ProtobufCMessage *resp;
        rc = ctl_call(c, "/leased.admin.v1.Admin/List", &req.base,
                      &leased__admin__v1__list_response__descriptor, &resp);
        if (rc != EXIT_OK)
            return rc;
        Leased__Admin__V1__ListResponse *r =
            (Leased__Admin__V1__ListResponse *)resp;
        for (size_t i = 0; i < r->n_leases; i++)
            print_admin_lease(c, r->leases[i]);
        if (left > 0)
            left -= (long)r->n_leases;
        snprintf(token, sizeof(token), "%s", r->next_page_token);
        protobuf_c_message_free_unpacked(resp, NULL);
    } while (token[0] != '\0' && left != 0);
    return EXIT_OK;
}

static int cmd_revoke(struct ctl *c)
{
    int rc = ctl_reach(c);
    if (rc != EXIT_OK)
        return rc;
    Leased__Admin__V1__RevokeRequest req =
        LEASED__ADMIN__V1__REVOKE_REQUEST__INIT;
    req.session_id = c->args.arg;
    req.token = c->args.token.set ? c->args.token.value : 0;
    ProtobufCMessage *resp;
    rc = ctl_call(c, "/leased.admin.v1.Admin/Revoke", &req.base,
                  &leased__admin__v1__revoke_response__descriptor, &resp);
    if (rc != EXIT_OK)
        return rc;
    const Leased__Admin__V1__Lease *l =
        ((Leased__Admin__V1__RevokeResponse *)resp)->lease;
    const char *owner = l != NULL ? l->owner : "";
    uint64_t token = l != NULL ? l->token : 0;
    if (c->args.json) {
        printf("{\"revoked\":true,\"session_id\":");
        json_put_string(stdout, c->args.arg);
        printf(",\"owner\":");
        json_put_string(stdout, owner);
        printf(",\"token\":%" PRIu64 "}\n", token);
    } else {
        char s[CTL_ESCAPED_LEN(LEASE_SESSION_MAX)];
        char o[CTL_ESCAPED_LEN(LEASE_OWNER_MAX)];
        printf("revoked %s: owner %s, token %" PRIu64 "\n",
               ctl_escaped(c->args.arg, s, sizeof(s)),
               ctl_escaped(owner, o, sizeof(o)), token);
    }
    protobuf_c_message_free_unpacked(resp, NULL);
    return EXIT_OK;
}

static int cmd_stats(struct ctl *c)
{
    int rc = ctl_reach(c);
    if (rc != EXIT_OK)
        return rc;
    Leased__Admin__V1__StatsRequest req =
        LEASED__ADMIN__V1__STATS_REQUEST__INIT;
    ProtobufCMessage *resp;
    rc = ctl_call(c, STATS_PATH, &req.base,
                  &leased__admin__v1__stats_response__descriptor, &resp);
    if (rc != EXIT_OK)
        return rc;
    Leased__Admin__V1__StatsResponse *s =
        (Leased__Admin__V1__StatsResponse *)resp;
    if (c->args.json)
        printf("{\"live_leases\":%" PRIu64 ",\"lease_entries\":%" PRIu64
               ",\"takeovers\":%" PRIu64 ",\"expiries\":%" PRIu64
               ",\"reclaims\":%" PRIu64 ",\"uptime_seconds\":%" PRId64
               ",\"storage_state\":\"%s\",\"token_high_water_mark\":%" PRIu64
               ",\"quarantine_remaining_ms\":%" PRId64
               ",\"version\":\"%s\"}\n",
               s->live_leases, s->lease_entries, s->takeovers, s->expiries,
               s->reclaims, s->uptime_seconds, s->storage_state,
               s->token_high_water_mark, s->quarantine_remaining_ms,
               s->version);
    else
        printf("live leases      %" PRIu64 "\nlease entries    %" PRIu64
               "\ntakeovers        %" PRIu64 "\nexpiries         %" PRIu64
               "\nreclaims         %" PRIu64 "\nuptime           %" PRId64
               "s\nstorage          %s\ntoken high-water %" PRIu64
               "\nquarantine left  %" PRId64 "ms\nversion          %s\n",
               s->live_leases, s->lease_entries, s->takeovers, s->expiries,
               s->reclaims, s->uptime_seconds, s->storage_state,
               s->token_high_water_mark, s->quarantine_remaining_ms,
               s->version);
    protobuf_c_message_free_unpacked(resp, NULL);
    return EXIT_OK;
}

static int cmd_health(struct ctl *c)
{
    int rc = ctl_reach(c);
    if (rc != EXIT_OK)
        return rc;
    Grpc__Health__V1__HealthCheckRequest req =
        GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
    ProtobufCMessage *resp;
    rc = ctl_call(c, "/grpc.health.v1.Health/Check", &req.base,
                  &grpc__health__v1__health_check_response__descriptor,
                  &resp);
    if (rc != EXIT_OK)
        return rc;
    int status = (int)((Grpc__Health__V1__HealthCheckResponse *)resp)->status;
    protobuf_c_message_free_unpacked(resp, NULL);
    const char *name = status == 1 ? "SERVING" : "NOT_SERVING";
    if (c->args.json)
        printf("{\"status\":\"%s\"}\n", name);
    else
        printf("%s\n", name);
    return status == 1 ? EXIT_OK : EXIT_UNAVAILABLE;
}

/* The first token of a token file; failures are said on stderr for
 * command cmd. */
static int read_token(const char *cmd, const char *path, char *out,
                      size_t len)
{
    FILE *f = fopen(path, "re");
    if (f == NULL) {
        fprintf(stderr, "leasectl: %s: %s: %s\n", cmd, path,
                strerror(errno));
        return -1;
    }
    char line[4200];
    int rc = -1;
    while (rc != 0 && fgets(line, sizeof(line), f) != NULL) {
        char *p = line + strspn(line, " \t");
        p[strcspn(p, " \t\r\n")] = '\0';
        if (*p != '\0' && *p != '#' && strlen(p) < len) {
            snprintf(out, len, "%s", p);
            rc = 0;
        }
    }
    fclose(f);
    explicit_bzero(line, sizeof(line));
    if (rc != 0)
        fprintf(stderr, "leasectl: %s: %s: no token\n", cmd, path);
    return rc;
}

int main(int argc, char **argv)
{
    static int (*const run[CTL_COMMANDS])(struct ctl *) = {
        [CTL_ACQUIRE] = cmd_acquire, [CTL_RENEW] = cmd_renew,
        [CTL_RELEASE] = cmd_release, [CTL_GET] = cmd_get,
        [CTL_LIST] = cmd_list,       [CTL_STATS] = cmd_stats,
        [CTL_REVOKE] = cmd_revoke,   [CTL_SNAPSHOT] = ctl_snapshot,
        [CTL_HEALTH] = cmd_health,   [CTL_HOLD] = ctl_hold,
        [CTL_WATCH] = ctl_watch};
    struct ctl c = {0};
    const struct ctl_args *a = &c.args;
    int rc = ctl_parse(argc, argv, &c.args);
    if (rc != EXIT_OK)
        return rc;
    if (a->help) {
        ctl_help(stdout, a->cmd);
        return EXIT_OK;
    }
    if (a->version) {
        printf("leasectl %s\n", LEASED_VERSION);
        return EXIT_OK;
    }
    c.cmd = ctl_command_name(a->cmd);
    struct lease_grpc_options o = {
        .timeout_ms = a->timeout_ns / 1000000,
        .tls_ca_file = a->tls_ca_file,
        .tls_cert_file = a->tls_cert_file,
        .tls_key_file = a->tls_key_file,
        .tls_server_name = a->tls_server_name,
    };
    char token[4100];
    if (a->token_file != NULL) {
        if (read_token(c.cmd, a->token_file, token, sizeof(token)) != 0)
            return EXIT_INVALID;
        o.token = token;
    }
    char why[512];
    c.opts = o;
    int err = a->cmd == CTL_HOLD ? hold_block_signals() : 0;
    if (err == 0)
        err = ctl_deadline_start(&c);
    if (err != 0) {
        fprintf(stderr, "leasectl: %s: starting a thread: %s\n", c.cmd,
                strerror(err));
        return EXIT_FAILED;
    }
    ctl_quiet_grpc();
    if ((rc = ctl_check_url(&c)) != EXIT_OK)
        return rc;
    if (lease_grpc_open(a->url, &o, &c.client) != LEASE_OK)
        return ctl_fail(LEASE_EINVAL, c.cmd);
    if (conn_open(&c.conn, a->url, &o, why, sizeof(why)) != LEASE_OK) {
        fprintf(stderr, "leasectl: %s: %s (INVALID_ARGUMENT)\n", c.cmd, why);
        lease_client_destroy(c.client);
        return EXIT_INVALID;
    }
    rc = run[a->cmd](&c);
    ctl_deadline_stop(); /* done: what is left is gRPC's own shutdown */
    explicit_bzero(token, sizeof(token));
    conn_close(&c.conn);
    lease_client_destroy(c.client);
    lease_grpc_wait_shutdown(1000); /* a clean exit: see lease.h */
    return rc;
}
