/*
 * leasectl: leased from the shell. The lease calls go through liblease
 * (the same client a C server uses), the admin and health calls through
 * its connection (conn.h). Commands, options and exit codes are in
 * docs/leasectl.1.
 *
 * Every failure is one line on stderr, "leasectl: COMMAND: what happened
 * (STATUS_NAME)" with the gRPC status name; bad usage is "leasectl:
 * [COMMAND: ]what is wrong" and the usage text. Before its first call a
 * command checks that something listens (ctl_reach): liblease rides out a
 * daemon's restart until its timeout, which from the shell is only a
 * wait when there is no daemon.
 */
#include "leasectl.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "duration.h"
#include "grpc/health/v1/health.pb-c.h"
#include "json.h"
#include "leased/admin/v1/admin.pb-c.h"
#include "status.h"

#define DEFAULT_URL "127.0.0.1:7443"
#define WAIT_POLL_NS INT64_C(250000000)
#define REACH_MS 1000 /* the most ctl_reach takes */
#define NAME_PART_MAX 64 /* bytes of the login and host names in an owner */
#define GET_PATH "/leased.admin.v1.Admin/Get"

static const char usage[] =
    "Usage: leasectl [OPTIONS] COMMAND [ARGS]\n"
    "\n"
    "Commands:\n"
    "  acquire SESSION [--owner O] [--wait D]    take a lease\n"
    "  renew [SESSION [--owner O] [--token N]]   extend a lease (or the JSON\n"
    "                                            lease on stdin)\n"
    "  release [SESSION [--owner O] [--token N]] free a lease (or stdin)\n"
    "  get SESSION                               show a lease\n"
    "  list [PREFIX] [--limit N]                 list leases by session id\n"
    "  stats                                     the daemon's counters\n"
    "  health                                    SERVING or not\n"
    "  hold SESSION [--owner O] [--wait D] [--grace D] [--ttl D] -- CMD…\n"
    "                                            run CMD while holding it\n"
    "\n"
    "The owner is --owner O, else $LEASE_OWNER, else USER@HOST (for hold,\n"
    "USER@HOST/PID-NONCE: unique to the run). renew and release without\n"
    "--token act on the lease the owner holds now.\n"
    "\n"
    "Options (before the command):\n"
    "  --url HOST:PORT[,…]  the daemon(s), or unix:/PATH [$LEASED_URL;\n"
    "                       default " DEFAULT_URL "]\n"
    "  --tls-ca FILE        TLS, trusting these CA certificates\n"
    "  --tls-cert FILE, --tls-key FILE   a client certificate (mutual TLS)\n"
    "  --tls-server-name N  the name in the server's certificate\n"
    "  --token-file FILE    a bearer token (the first line that is not a\n"
    "                       comment) [$LEASED_TOKEN_FILE]\n"
    "  --timeout D          per call [5s]\n"
    "  --json               one JSON object per result, for scripts\n"
    "  --help               this; `leasectl COMMAND --help` for a command\n"
    "\n"
    "Exit: 0 ok, 1 failure, 2 usage, 3 held or lost, 4 unavailable or no\n"
    "answer, 5 invalid, 6 not found, 7 not a lease service.\n";

int64_t ctl_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t ctl_wall_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

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

int ctl_fail(int err, const char *what)
{
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

int ctl_usage(const char *cmd, const char *help, const char *fmt, ...)
{
    fprintf(stderr, "leasectl: ");
    if (cmd != NULL)
        fprintf(stderr, "%s: ", cmd);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n\n%s", help);
    return EXIT_USAGE;
}

int ctl_bad_option(const char *cmd, const char *help, int opt, char **argv)
{
    /* optind is past the option in error, unless it is a letter within
     * a group (-xy); optopt is that letter, or the long option's value
     * (none when unknown). */
    const char *arg = argv[optind - 1];
    int n = (int)strcspn(arg, "=");
    if (opt == ':')
        return ctl_usage(cmd, help, "option %s needs a value", arg);
    if (strncmp(arg, "--", 2) == 0 && optopt == 0)
        return ctl_usage(cmd, help, "unknown option %.*s", n, arg);
    if (strncmp(arg, "--", 2) == 0 && arg[n] == '=')
        return ctl_usage(cmd, help, "option %.*s takes no value", n, arg);
    return ctl_usage(cmd, help, "unknown option -%c", optopt);
}

int ctl_reach(struct ctl *c)
{
    char why[256];
    int64_t ms = c->opts.timeout_ms < REACH_MS ? c->opts.timeout_ms
                                               : REACH_MS;
    if (conn_reachable(&c->conn, ms, why, sizeof(why)))
        return EXIT_OK;
    fprintf(stderr, "leasectl: %s: cannot connect to %s: %s (UNAVAILABLE)\n",
            c->cmd, c->url, why);
    return EXIT_UNAVAILABLE;
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
    unsigned n = (unsigned)ctl_mono_ns() ^ (unsigned)getpid();
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        if (read(fd, &n, sizeof(n)) != (ssize_t)sizeof(n))
            n ^= (unsigned)ctl_wall_ns();
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

/* "2026-11-30T17:00:00.123456789Z" */
static void format_time(int64_t ns, char *out, size_t len)
{
    time_t s = (time_t)(ns / 1000000000);
    struct tm tm;
    gmtime_r(&s, &tm);
    char day[32];
    strftime(day, sizeof(day), "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out, len, "%s.%09lldZ", day, (long long)(ns % 1000000000));
}

static void print_lease_fields(const struct ctl *c, const char *session,
                               const char *owner, uint64_t token,
                               int64_t expiry_ns, int live)
{
    char when[48];
    format_time(expiry_ns, when, sizeof(when));
    if (c->json) {
        printf("{\"session_id\":");
        json_put_string(stdout, session);
        printf(",\"owner\":");
        json_put_string(stdout, owner);
        printf(",\"token\":%" PRIu64 ",\"expiry\":\"%s\",\"expiry_ns\":%lld",
               token, when, (long long)expiry_ns);
        if (live >= 0)
            printf(",\"live\":%s", live ? "true" : "false");
        printf("}\n");
        return;
    }
    double in_s = (double)(expiry_ns - ctl_wall_ns()) / 1e9;
    printf("%s  owner %s  token %" PRIu64 "  expires %s (%s%.1fs)%s\n",
           session, owner, token, when, in_s >= 0 ? "in " : "",
           in_s >= 0 ? in_s : -in_s, live == 0 ? "  expired" : "");
}

void ctl_print_lease(const struct ctl *c, const struct lease *l)
{
    print_lease_fields(c, l->session_id, l->owner, l->token, l->expiry_ns,
                       -1);
}

int ctl_acquire(struct ctl *c, const char *session, const char *owner,
                int64_t wait_ns, struct lease *out, int64_t *sent_ns)
{
    int64_t until = ctl_mono_ns() + wait_ns;
    for (;;) {
        if (sent_ns != NULL)
            *sent_ns = ctl_mono_ns();
        int rc = lease_acquire(c->client, session, owner, out);
        int64_t left = until - ctl_mono_ns();
        if (rc != LEASE_EHELD || left <= 0)
            return rc;
        int64_t nap = left < WAIT_POLL_NS ? left : WAIT_POLL_NS;
        struct timespec ts = {nap / 1000000000, nap % 1000000000};
        nanosleep(&ts, NULL);
    }
}

/* A command's own options: --owner, --token, --wait, --limit, --help. */
struct args {
    const char *owner;
    uint64_t token;
    bool has_token;
    int64_t wait_ns;
    long limit;
    int optind;
};

/* Parses a command's options into *a, and checks that it has at most max
 * arguments, and at least one (named need) unless need is NULL. Returns
 * EXIT_OK, or EXIT_USAGE having said why. */
static int parse_args(const struct ctl *c, int argc, char **argv,
                      const char *help, const char *need, int max,
                      struct args *a)
{
    static const struct option options[] = {
        {"owner", required_argument, NULL, 'o'},
        {"token", required_argument, NULL, 't'},
        {"wait", required_argument, NULL, 'w'},
        {"limit", required_argument, NULL, 'l'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0}};
    memset(a, 0, sizeof(*a));
    optind = 0; /* 0: getopt starts afresh (and drops main's "+") */
    int opt;
    /* Options may come before or after the positional arguments. */
    while ((opt = getopt_long(argc, argv, ":", options, NULL)) != -1) {
        char *end;
        switch (opt) {
        case 'o':
            a->owner = optarg;
            break;
        case 't':
            errno = 0;
            a->token = strtoull(optarg, &end, 10);
            if (errno != 0 || *end != '\0' || optarg[0] == '-' ||
                optarg[0] == '\0')
                return ctl_usage(c->cmd, help, "--token: not a number: %s",
                                 optarg);
            a->has_token = true;
            break;
        case 'w':
            if (duration_parse(optarg, &a->wait_ns) != 0)
                return ctl_usage(c->cmd, help, "--wait: not a duration: %s",
                                 optarg);
            break;
        case 'l':
            a->limit = strtol(optarg, &end, 10);
            if (*end != '\0' || a->limit < 1)
                return ctl_usage(c->cmd, help,
                                 "--limit: not a number above 0: %s", optarg);
            break;
        case 'h':
            fputs(help, stdout);
            exit(EXIT_OK);
        default:
            return ctl_bad_option(c->cmd, help, opt, argv);
        }
    }
    a->optind = optind;
    if (need != NULL && argc == optind)
        return ctl_usage(c->cmd, help, "missing %s", need);
    if (argc - optind > max)
        return ctl_usage(c->cmd, help, "unexpected argument %s",
                         argv[optind + max]);
    return EXIT_OK;
}

static int cmd_acquire(struct ctl *c, int argc, char **argv)
{
    static const char help[] =
        "Usage: leasectl acquire SESSION [--owner O] [--wait D]\n"
        "Takes the lease of SESSION for owner O (default: $LEASE_OWNER, or\n"
        "USER@HOST); the same owner again keeps its token. With --wait,\n"
        "keeps trying for up to D while another owner holds it. Exit 3 when\n"
        "held.\n";
    struct args a;
    int rc = parse_args(c, argc, argv, help, "SESSION", 1, &a);
    if (rc == EXIT_OK)
        rc = ctl_reach(c);
    if (rc != EXIT_OK)
        return rc;
    char buf[LEASE_OWNER_MAX + 1];
    const char *owner = ctl_owner(a.owner, false, buf, sizeof(buf));
    struct lease l;
    rc = ctl_acquire(c, argv[a.optind], owner, a.wait_ns, &l, NULL);
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
    fprintf(stderr, "leasectl: %s: %s (%s)\n", c->cmd,
            details[0] != '\0' ? details : "failed", status_name(st));
    switch (st) {
    case GRPC_STATUS_NOT_FOUND:
        return EXIT_NOT_FOUND;
    case GRPC_STATUS_INVALID_ARGUMENT:
        return EXIT_INVALID;
    case GRPC_STATUS_UNIMPLEMENTED:
        return EXIT_UNSUPPORTED;
    case GRPC_STATUS_UNAVAILABLE:
    case GRPC_STATUS_DEADLINE_EXCEEDED:
    case GRPC_STATUS_UNAUTHENTICATED: /* as liblease reports it */
    case GRPC_STATUS_PERMISSION_DENIED:
        return EXIT_UNAVAILABLE;
    default:
        return EXIT_FAILED;
    }
}

/* An admin or health call; returns the exit code, printing failures. */
static int call(struct ctl *c, const char *path, const ProtobufCMessage *req,
                const ProtobufCMessageDescriptor *desc,
                ProtobufCMessage **resp)
{
    char details[256];
    grpc_status_code st =
        conn_call(&c->conn, path, req, desc, resp, details, sizeof(details));
    return reported(c, st, details);
}

/* The lease renew and release act on, into *l: SESSION with --token (and
 * the owner); SESSION alone: the lease the owner holds now (admin Get),
 * or, when it holds none, why in why (len bytes); or the JSON object on
 * stdin (what `acquire --json` printed). Checks that the daemon listens.
 * Returns EXIT_OK with *l or why set, or the exit code of a failure it
 * reported. */
static int lease_from(struct ctl *c, int argc, char **argv,
                      const char *help, struct lease *l, char *why,
                      size_t len)
{
    struct args a;
    int rc = parse_args(c, argc, argv, help, NULL, 1, &a);
    if (rc != EXIT_OK)
        return rc;
    memset(l, 0, sizeof(*l));
    why[0] = '\0';
    if (argc == a.optind) {
        if (isatty(STDIN_FILENO))
            return ctl_usage(c->cmd, help,
                             "missing SESSION (or a lease as JSON on stdin)");
        static char text[8192];
        size_t n = fread(text, 1, sizeof(text) - 1, stdin);
        text[n] = '\0';
        if (!json_get_string(text, "session_id", l->session_id,
                             sizeof(l->session_id)) ||
            !json_get_string(text, "owner", l->owner, sizeof(l->owner)) ||
            !json_get_u64(text, "token", &l->token))
            return ctl_usage(c->cmd, help,
                             "want a lease as JSON on stdin (session_id, "
                             "owner, token)");
        return ctl_reach(c);
    }
    const char *session = argv[a.optind];
    char buf[LEASE_OWNER_MAX + 1];
    const char *owner = ctl_owner(a.owner, false, buf, sizeof(buf));
    bool long_owner = strlen(owner) > LEASE_OWNER_MAX;
    if (long_owner || strlen(session) > LEASE_SESSION_MAX) {
        fprintf(stderr, "leasectl: %s: %s: longer than the limit "
                        "(INVALID_ARGUMENT)\n",
                c->cmd, long_owner ? "owner" : "session_id");
        return EXIT_INVALID;
    }
    snprintf(l->session_id, sizeof(l->session_id), "%s", session);
    snprintf(l->owner, sizeof(l->owner), "%s", owner);
    l->token = a.token;
    rc = ctl_reach(c);
    if (rc != EXIT_OK || a.has_token)
        return rc;
    Leased__Admin__V1__GetRequest req = LEASED__ADMIN__V1__GET_REQUEST__INIT;
    req.session_id = l->session_id;
    ProtobufCMessage *resp;
    char details[256];
    grpc_status_code st =
        conn_call(&c->conn, GET_PATH, &req.base,
                  &leased__admin__v1__get_response__descriptor, &resp,
                  details, sizeof(details));
    if (st == GRPC_STATUS_NOT_FOUND) {
        snprintf(why, len, "%s has no lease", session);
        return EXIT_OK;
    }
    if (st != GRPC_STATUS_OK)
        return reported(c, st, details);
    const Leased__Admin__V1__Lease *cur =
        ((Leased__Admin__V1__GetResponse *)resp)->lease;
    if (cur == NULL)
        snprintf(why, len, "%s has no lease", session);
    else if (strcmp(cur->owner, owner) != 0)
        snprintf(why, len, "%s is held by %s, not %s", session, cur->owner,
                 owner);
    else
        l->token = cur->token;
    protobuf_c_message_free_unpacked(resp, NULL);
    return EXIT_OK;
}

static int cmd_renew(struct ctl *c, int argc, char **argv)
{
    static const char help[] =
        "Usage: leasectl renew [SESSION [--owner O] [--token N]]\n"
        "Extends the lease of SESSION that owner O (default: $LEASE_OWNER,\n"
        "or USER@HOST) holds: the one with token N, or without --token the\n"
        "one O holds now. Without SESSION, the lease given as JSON on stdin\n"
        "(what acquire --json prints). Exit 3 when the lease is lost, or\n"
        "not O's.\n";
    struct lease cur, out;
    char why[1200];
    int rc = lease_from(c, argc, argv, help, &cur, why, sizeof(why));
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

static int cmd_release(struct ctl *c, int argc, char **argv)
{
    static const char help[] =
        "Usage: leasectl release [SESSION [--owner O] [--token N]]\n"
        "Frees a lease given as for renew. Freeing one that is not held (any\n"
        "more), or not O's, succeeds too (and says so, without --token).\n";
    struct lease cur;
    char why[1200];
    int rc = lease_from(c, argc, argv, help, &cur, why, sizeof(why));
    if (rc != EXIT_OK)
        return rc;
    if (why[0] != '\0') {
        fprintf(stderr, "leasectl: release: %s: nothing to release\n", why);
        if (c->json)
            printf("{\"released\":false}\n");
        return EXIT_OK;
    }
    rc = lease_release(c->client, &cur);
    if (rc != LEASE_OK)
        return ctl_fail(rc, "release");
    if (c->json)
        printf("{\"released\":true}\n");
    return EXIT_OK;
}

static void print_admin_lease(const struct ctl *c,
                              const Leased__Admin__V1__Lease *l)
{
    int64_t ns = l->expiry != NULL ? l->expiry->seconds * 1000000000 +
                                         l->expiry->nanos
                                   : 0;
    print_lease_fields(c, l->session_id, l->owner, l->token, ns, l->live);
}

static int cmd_get(struct ctl *c, int argc, char **argv)
{
    static const char help[] =
        "Usage: leasectl get SESSION\nShows the lease of SESSION; exit 6 "
        "when it has none.\n";
    struct args a;
    int rc = parse_args(c, argc, argv, help, "SESSION", 1, &a);
    if (rc == EXIT_OK)
        rc = ctl_reach(c);
    if (rc != EXIT_OK)
        return rc;
    Leased__Admin__V1__GetRequest req = LEASED__ADMIN__V1__GET_REQUEST__INIT;
    req.session_id = argv[a.optind];
    ProtobufCMessage *resp;
    rc = call(c, GET_PATH, &req.base,
              &leased__admin__v1__get_response__descriptor, &resp);
    if (rc != EXIT_OK)
        return rc;
    Leased__Admin__V1__GetResponse *r = (Leased__Admin__V1__GetResponse *)resp;
    if (r->lease != NULL)
        print_admin_lease(c, r->lease);
    protobuf_c_message_free_unpacked(resp, NULL);
    return EXIT_OK;
}

static int cmd_list(struct ctl *c, int argc, char **argv)
{
    static const char help[] =
        "Usage: leasectl list [PREFIX] [--limit N]\nLists the leases whose "
        "session id starts with PREFIX, by session id\n(all of them, or the "
        "first N).\n";
    struct args a;
    int rc = parse_args(c, argc, argv, help, NULL, 1, &a);
    if (rc == EXIT_OK)
        rc = ctl_reach(c);
    if (rc != EXIT_OK)
        return rc;
    char token[LEASE_SESSION_MAX + 1] = "";
    long left = a.limit > 0 ? a.limit : -1;
    do {
        Leased__Admin__V1__ListRequest req =
            LEASED__ADMIN__V1__LIST_REQUEST__INIT;
        req.prefix = argc > a.optind ? argv[a.optind] : "";
        req.page_token = token;
        req.page_size = left > 0 && left < 1000 ? (int32_t)left : 1000;
        ProtobufCMessage *resp;
        rc = call(c, "/leased.admin.v1.Admin/List", &req.base,
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

static int cmd_stats(struct ctl *c, int argc, char **argv)
{
    static const char help[] = "Usage: leasectl stats\nThe daemon's "
                               "counters and state.\n";
    struct args a;
    int rc = parse_args(c, argc, argv, help, NULL, 0, &a);
    if (rc == EXIT_OK)
        rc = ctl_reach(c);
    if (rc != EXIT_OK)
        return rc;
    Leased__Admin__V1__StatsRequest req =
        LEASED__ADMIN__V1__STATS_REQUEST__INIT;
    ProtobufCMessage *resp;
    rc = call(c, "/leased.admin.v1.Admin/Stats", &req.base,
              &leased__admin__v1__stats_response__descriptor, &resp);
    if (rc != EXIT_OK)
        return rc;
    Leased__Admin__V1__StatsResponse *s =
        (Leased__Admin__V1__StatsResponse *)resp;
    if (c->json)
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

static int cmd_health(struct ctl *c, int argc, char **argv)
{
    static const char help[] = "Usage: leasectl health\nSERVING (exit 0) or "
                               "not (exit 4).\n";
    struct args a;
    int rc = parse_args(c, argc, argv, help, NULL, 0, &a);
    if (rc == EXIT_OK)
        rc = ctl_reach(c);
    if (rc != EXIT_OK)
        return rc;
    Grpc__Health__V1__HealthCheckRequest req =
        GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
    ProtobufCMessage *resp;
    rc = call(c, "/grpc.health.v1.Health/Check", &req.base,
              &grpc__health__v1__health_check_response__descriptor, &resp);
    if (rc != EXIT_OK)
        return rc;
    int status = (int)((Grpc__Health__V1__HealthCheckResponse *)resp)->status;
    protobuf_c_message_free_unpacked(resp, NULL);
    const char *name = status == 1 ? "SERVING" : "NOT_SERVING";
    if (c->json)
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
    static const struct option options[] = {
        {"url", required_argument, NULL, 'u'},
        {"tls-ca", required_argument, NULL, 'a'},
        {"tls-cert", required_argument, NULL, 'c'},
        {"tls-key", required_argument, NULL, 'k'},
        {"tls-server-name", required_argument, NULL, 'n'},
        {"token-file", required_argument, NULL, 'T'},
        {"timeout", required_argument, NULL, 't'},
        {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0}};
    static const struct {
        const char *name;
        int (*run)(struct ctl *, int, char **);
    } commands[] = {{"acquire", cmd_acquire}, {"renew", cmd_renew},
                    {"release", cmd_release}, {"get", cmd_get},
                    {"list", cmd_list},       {"stats", cmd_stats},
                    {"health", cmd_health},   {"hold", ctl_hold}};
    const char *url = getenv("LEASED_URL");
    const char *token_file = getenv("LEASED_TOKEN_FILE");
    struct lease_grpc_options o = {.timeout_ms = 5000};
    struct ctl c = {0};
    int opt;
    opterr = 0; /* our messages, not getopt's */
    while ((opt = getopt_long(argc, argv, "+:", options, NULL)) != -1) {
        int64_t ns;
        switch (opt) {
        case 'u':
            url = optarg;
            break;
        case 'a':
            o.tls_ca_file = optarg;
            break;
        case 'c':
            o.tls_cert_file = optarg;
            break;
        case 'k':
            o.tls_key_file = optarg;
            break;
        case 'n':
            o.tls_server_name = optarg;
            break;
        case 'T':
            token_file = optarg;
            break;
        case 't':
            if (duration_parse(optarg, &ns) != 0 || ns < 1000000)
                return ctl_usage(NULL, usage,
                                 "--timeout: not a duration of 1ms or "
                                 "more: %s",
                                 optarg);
            o.timeout_ms = ns / 1000000;
            break;
        case 'j':
            c.json = true;
            break;
        case 'h':
            fputs(usage, stdout);
            return EXIT_OK;
        default:
            return ctl_bad_option(NULL, usage, opt, argv);
        }
    }
    if (optind >= argc)
        return ctl_usage(NULL, usage, "missing COMMAND");
    size_t k = 0;
    while (k < sizeof(commands) / sizeof(commands[0]) &&
           strcmp(commands[k].name, argv[optind]) != 0)
        k++;
    if (k == sizeof(commands) / sizeof(commands[0]))
        return ctl_usage(NULL, usage, "unknown command %s", argv[optind]);
    c.cmd = commands[k].name;
    char token[4100];
    if (token_file != NULL) {
        if (read_token(c.cmd, token_file, token, sizeof(token)) != 0)
            return EXIT_INVALID;
        o.token = token;
    }
    if (url == NULL || url[0] == '\0')
        url = DEFAULT_URL;
    char why[512];
    c.url = url;
    c.opts = o;
    if (lease_grpc_open(url, &o, &c.client) != LEASE_OK)
        return ctl_fail(LEASE_EINVAL, c.cmd);
    if (conn_open(&c.conn, url, &o, why, sizeof(why)) != LEASE_OK) {
        fprintf(stderr, "leasectl: %s: %s (INVALID_ARGUMENT)\n", c.cmd, why);
        lease_client_destroy(c.client);
        return EXIT_INVALID;
    }
    int rc = commands[k].run(&c, argc - optind, argv + optind);
    explicit_bzero(token, sizeof(token));
    conn_close(&c.conn);
    lease_client_destroy(c.client);
    lease_grpc_wait_shutdown(1000); /* a clean exit: see lease.h */
    return rc;
}
