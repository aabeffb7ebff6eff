/*
 * holder: the holders' fault campaign's lease holder (tests/faults/holders),
 * a program that does "work" on a session and records each piece of it,
 * so that the checker can tell whether any of it ran while another owner
 * held the session. Not installed; built against liblease's test build
 * (with its fault points), so that LEASED_FAULTS="broken=NAME" breaks it.
 *
 *   holder keep --url U --session S[,S2...] --units FILE --fence-dir D
 *               --for MS [--retry-ms N] [--timeout-ms N] [--hold-ms LO,HI]
 *               [--rest-ms N] [--prefix P] [--no-fence]
 *   holder work --units FILE --fence-dir D --for MS [--fork]
 *               [--ignore-term] [--no-fence]
 *
 * keep: a holder that uses liblease's keeper. Until --for has passed, it
 * picks one of the sessions at random, and a new owner for the attempt
 * (P-PID-N, P being --prefix, "keep" by default), and starts a keeper
 * (lease_grpc_open with a per-call deadline of --timeout-ms, 1000 by
 * default). Refused (LEASE_EHELD) or failed, it sleeps --retry-ms (20)
 * and tries again. Once it holds the
 * session, it does units while lease_keeper_valid() says true, for a
 * random time between the --hold-ms bounds (500 to 3000), then stops the
 * keeper (which releases the lease, unless it was lost), and rests
 * --rest-ms (0) before the next attempt: a holder that releases and asks
 * again at once would mostly get its session back.
 *
 * work: the command that `leasectl hold` runs. It reads LEASE_SESSION,
 * LEASE_OWNER and LEASE_TOKEN and does units until --for has passed,
 * then exits 0. --fork first starts a child in the same process group
 * that does units too (a hold that signals only its direct child leaves
 * it running); --ignore-term ignores SIGTERM (a command slow to stop),
 * and so does the child.
 *
 * A unit: t0 = the wall clock; the work, a sleep of 5 to 20 ms; then,
 * inside the fence D/fence-SESSION (lease_fence_enter with the token),
 * one line "TOKEN OWNER PID WALL_NS\n" appended to D/resource-SESSION.log
 * (O_APPEND, one write); the fence left; t1 = the wall clock; and one
 * JSON line appended to the units file (O_APPEND, one write per line):
 *
 *   {"kind":"unit","session":S,"owner":O,"token":T,"pid":P,
 *    "start":t0,"end":t1,"write":"accepted"|"refused"}
 *
 * Times are CLOCK_REALTIME in ns: the checker compares them with the
 * grants in leased's log, which are on leased's clock, the host's wall
 * clock (the campaign never steps it). A refused write ends the work
 * (the session is lost): keep stops that keeper, work exits 3. --no-fence
 * is a negative control, a resource without the fence check: the line
 * goes to the resource log with no fence, and the write is "accepted".
 *
 * Exit: 0, or 3 after a refused write, 2 on bad usage, 1 when something
 * else failed (the fence unusable, a file that cannot be written: said
 * on stderr).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "lease.h"
#include "nanotime.h"

#define MS INT64_C(1000000)
#define MAX_SESSIONS 16
#define UNIT_MIN_MS 5
#define UNIT_MAX_MS 20

enum exit_code {
    EXIT_DONE = 0,
    EXIT_ERROR = 1,
    EXIT_USAGE = 2,
    EXIT_REFUSED = 3,
};

/* What a unit's write came to. */
enum write_result {
    WRITE_ACCEPTED,
    WRITE_REFUSED,
    WRITE_FAILED, /* neither: the fence or a file failed (said on stderr) */
};

struct options {
    const char *url;
    char *sessions[MAX_SESSIONS]; /* in sessions_buf */
    size_t nsessions;
    char sessions_buf[1024];
    const char *units_path;
    const char *fence_dir;
    int64_t for_ms;
    int64_t retry_ms;
    int64_t timeout_ms;
    int64_t hold_min_ms, hold_max_ms;
    int64_t rest_ms;
    const char *prefix;
    bool fence; /* false: --no-fence */
    bool fork_child;
    bool ignore_term;
};

/* The units file, open for appending. */
static int units_fd = -1;
static unsigned seed;

/* A uniform integer in [lo, hi]. */
static int64_t between(int64_t lo, int64_t hi)
{
    return lo + (int64_t)((double)rand_r(&seed) / ((double)RAND_MAX + 1) *
                          (double)(hi - lo + 1));
}

static void sleep_ms(int64_t ms)
{
    struct timespec ts = {.tv_sec = ms / 1000,
                          .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* Writes all of buf to fd in one write() (O_APPEND: the line lands
 * whole). Returns 0, or -1 having said why. */
static int append(int fd, const char *buf, size_t len, const char *what)
{
    ssize_t n = write(fd, buf, len);
    if (n == (ssize_t)len)
        return 0;
    fprintf(stderr, "holder: writing %s: %s\n", what,
            n < 0 ? strerror(errno) : "short write");
    return -1;
}

/* s as a JSON string (quotes included) into out (len bytes). */
static void json_string(char *out, size_t len, const char *s)
{
    size_t i = 0;
    if (i + 1 < len)
        out[i++] = '"';
    for (; *s != '\0' && i + 7 < len; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            out[i++] = '\\';
            out[i++] = (char)c;
        } else if (c < 0x20) {
            i += (size_t)snprintf(out + i, len - i, "\\u%04x", c);
        } else {
            out[i++] = (char)c;
        }
    }
    if (i + 1 < len)
        out[i++] = '"';
    out[i < len ? i : len - 1] = '\0';
}

/* The resource's write: one line appended to D/resource-SESSION.log. */
static enum write_result write_resource(const struct options *o,
                                        const char *session,
                                        const char *owner, uint64_t token)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/resource-%s.log", o->fence_dir, session);
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
        fprintf(stderr, "holder: %s: %s\n", path, strerror(errno));
        return WRITE_FAILED;
    }
    char line[512];
    int n = snprintf(line, sizeof(line), "%" PRIu64 " %s %ld %" PRId64 "\n",
                     token, owner, (long)getpid(), nanotime_wall());
    int rc = append(fd, line, (size_t)n, path);
    close(fd);
    return rc == 0 ? WRITE_ACCEPTED : WRITE_FAILED;
}

/* The write of one unit: through the fence, or (--no-fence) without. */
static enum write_result fenced_write(const struct options *o,
                                      const char *session, const char *owner,
                                      uint64_t token)
{
    if (!o->fence)
        return write_resource(o, session, owner, token);
    char path[4096];
    snprintf(path, sizeof(path), "%s/fence-%s", o->fence_dir, session);
    struct lease_fence *f;
    int rc = lease_fence_enter(path, token, &f);
    if (rc == LEASE_EHELD)
        return WRITE_REFUSED;
    if (rc != LEASE_OK) {
        fprintf(stderr, "holder: fence %s: %s\n", path, lease_errmsg());
        return WRITE_FAILED;
    }
    enum write_result w = write_resource(o, session, owner, token);
    lease_fence_leave(f);
    return w;
}

/* One unit of work on session, as owner with token, recorded. */
static enum write_result unit(const struct options *o, const char *session,
                              const char *owner, uint64_t token)
{
    int64_t t0 = nanotime_wall();
    sleep_ms(between(UNIT_MIN_MS, UNIT_MAX_MS)); /* the work */
    enum write_result w = fenced_write(o, session, owner, token);
    int64_t t1 = nanotime_wall();
    if (w == WRITE_FAILED)
        return w;
    char s[2 * LEASE_SESSION_MAX], ow[2 * LEASE_OWNER_MAX], line[4096];
    json_string(s, sizeof(s), session);
    json_string(ow, sizeof(ow), owner);
    int n = snprintf(line, sizeof(line),
                     "{\"kind\":\"unit\",\"session\":%s,\"owner\":%s,"
                     "\"token\":%" PRIu64 ",\"pid\":%ld,\"start\":%" PRId64
                     ",\"end\":%" PRId64 ",\"write\":\"%s\"}\n",
                     s, ow, token, (long)getpid(), t0, t1,
                     w == WRITE_ACCEPTED ? "accepted" : "refused");
    if (append(units_fd, line, (size_t)n, o->units_path) != 0)
        return WRITE_FAILED;
    return w;
}

/* ---- keep ------------------------------------------------------------ */

static int keep(const struct options *o)
{
    struct lease_grpc_options go = {.timeout_ms = o->timeout_ms};
    struct lease_client *c;
    if (lease_grpc_open(o->url, &go, &c) != LEASE_OK) {
        fprintf(stderr, "holder: %s: %s\n", o->url, lease_errmsg());
        return EXIT_ERROR;
    }
    int64_t end = nanotime_mono() + o->for_ms * MS;
    long attempts = 0, held = 0, lost = 0, units = 0;
    int code = EXIT_DONE;
    while (code == EXIT_DONE && nanotime_mono() < end) {
        const char *session =
            o->sessions[between(0, (int64_t)o->nsessions - 1)];
        char owner[64];
        snprintf(owner, sizeof(owner), "%s-%ld-%ld", o->prefix,
                 (long)getpid(), attempts++);
        struct lease_keeper *k;
        struct lease l;
        int rc = lease_keeper_start(c, session, owner, NULL, NULL, &k, &l);
        if (rc != LEASE_OK) {
            if (rc != LEASE_EHELD && rc != LEASE_EUNAVAILABLE &&
                rc != LEASE_EDEADLINE) {
                fprintf(stderr, "holder: acquire %s: %s\n", session,
                        lease_errmsg());
                code = EXIT_ERROR;
            }
            sleep_ms(o->retry_ms);
            continue;
        }
        held++;
        int64_t until = nanotime_mono() +
                        between(o->hold_min_ms, o->hold_max_ms) * MS;
        if (until > end)
            until = end;
        while (nanotime_mono() < until && lease_keeper_valid(k)) {
            lease_keeper_lease(k, &l);
            enum write_result w = unit(o, session, owner, l.token);
            if (w == WRITE_FAILED)
                code = EXIT_ERROR;
            if (w != WRITE_ACCEPTED)
                break;
            units++;
        }
        if (!lease_keeper_valid(k))
            lost++; /* the next attempt is a new owner */
        lease_keeper_stop(k);
        sleep_ms(o->rest_ms);
    }
    fprintf(stderr, "holder: keep: %ld attempts, %ld held, %ld lost, "
                    "%ld units\n",
            attempts, held, lost, units);
    lease_client_destroy(c);
    lease_grpc_wait_shutdown(1000);
    return code;
}

/* ---- work ------------------------------------------------------------ */

static int work(const struct options *o)
{
    const char *session = getenv("LEASE_SESSION");
    const char *owner = getenv("LEASE_OWNER");
    const char *token_s = getenv("LEASE_TOKEN");
    if (session == NULL || owner == NULL || token_s == NULL) {
        fprintf(stderr, "holder: work: LEASE_SESSION, LEASE_OWNER and "
                        "LEASE_TOKEN must be set (run under leasectl "
                        "hold)\n");
        return EXIT_USAGE;
    }
    char *endp;
    errno = 0;
    uint64_t token = strtoull(token_s, &endp, 10);
    if (errno != 0 || *endp != '\0' || token == 0) {
        fprintf(stderr, "holder: work: bad LEASE_TOKEN \"%s\"\n", token_s);
        return EXIT_USAGE;
    }
    int64_t end = nanotime_mono() + o->for_ms * MS;
    if (o->ignore_term)
        signal(SIGTERM, SIG_IGN); /* inherited by the child */
    pid_t child = -1;
    if (o->fork_child) {
        child = fork();
        if (child < 0) {
            fprintf(stderr, "holder: fork: %s\n", strerror(errno));
            return EXIT_ERROR;
        }
        if (child == 0)
            seed ^= (unsigned)getpid() * 2654435761u;
    }
    int code = EXIT_DONE;
    while (code == EXIT_DONE && nanotime_mono() < end) {
        enum write_result w = unit(o, session, owner, token);
        code = w == WRITE_ACCEPTED ? EXIT_DONE
               : w == WRITE_REFUSED ? EXIT_REFUSED
                                    : EXIT_ERROR;
    }
    if (child > 0) {
        int status;
        while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
        }
        if (code == EXIT_DONE && WIFEXITED(status))
            code = WEXITSTATUS(status);
    }
    return code;
}

/* ---- the command line ------------------------------------------------ */

static void usage(void)
{
    fprintf(stderr,
            "usage: holder keep --url U --session S[,S2...] --units FILE\n"
            "                   --fence-dir D --for MS [--retry-ms N]\n"
            "                   [--timeout-ms N] [--hold-ms LO,HI]"
            " [--rest-ms N]\n"
            "                   [--prefix P] [--no-fence]\n"
            "       holder work --units FILE --fence-dir D --for MS"
            " [--fork]\n"
            "                   [--ignore-term] [--no-fence]\n");
}

/* A non-negative number of milliseconds; false if s is not one. */
static bool parse_ms(const char *s, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < 0)
        return false;
    *out = v;
    return true;
}

/* Splits the sessions' list (copied) at commas; false if one is empty,
 * holds a slash (it names files), or there are too many. */
static bool parse_sessions(struct options *o, const char *list)
{
    snprintf(o->sessions_buf, sizeof(o->sessions_buf), "%s", list);
    char *save = NULL;
    for (char *s = strtok_r(o->sessions_buf, ",", &save); s != NULL;
         s = strtok_r(NULL, ",", &save)) {
        if (o->nsessions == MAX_SESSIONS || strchr(s, '/') != NULL)
            return false;
        o->sessions[o->nsessions++] = s;
    }
    return o->nsessions > 0;
}

static bool parse_range(const char *s, int64_t *lo, int64_t *hi)
{
    char buf[64];
    snprintf(buf, sizeof(buf), "%s", s);
    char *comma = strchr(buf, ',');
    if (comma == NULL)
        return false;
    *comma = '\0';
    return parse_ms(buf, lo) && parse_ms(comma + 1, hi) && *lo <= *hi;
}

/* Reads the options after the mode word into *o (keep's when keeping,
 * else work's); false on bad usage. */
static bool parse_options(int argc, char **argv, bool keeping,
                          struct options *o)
{
    static const struct option longopts[] = {
        {"url", required_argument, NULL, 'u'},
        {"session", required_argument, NULL, 's'},
        {"retry-ms", required_argument, NULL, 'r'},
        {"timeout-ms", required_argument, NULL, 't'},
        {"hold-ms", required_argument, NULL, 'h'},
        {"rest-ms", required_argument, NULL, 'R'},
        {"prefix", required_argument, NULL, 'P'},
        {"fork", no_argument, NULL, 'F'},
        {"ignore-term", no_argument, NULL, 'I'},
        {"units", required_argument, NULL, 'n'},
        {"fence-dir", required_argument, NULL, 'd'},
        {"for", required_argument, NULL, 'f'},
        {"no-fence", no_argument, NULL, 'N'},
        {NULL, 0, NULL, 0},
    };
    static const char keep_only[] = "usrthRP", work_only[] = "FI";
    int c;
    optind = 2;
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        if (c == '?' || strchr(keeping ? work_only : keep_only, c) != NULL)
            return false;
        bool ok = true;
        switch (c) {
        case 'u':
            o->url = optarg;
            break;
        case 's':
            ok = parse_sessions(o, optarg);
            break;
        case 'r':
            ok = parse_ms(optarg, &o->retry_ms);
            break;
        case 't':
            ok = parse_ms(optarg, &o->timeout_ms) && o->timeout_ms > 0;
            break;
        case 'h':
            ok = parse_range(optarg, &o->hold_min_ms, &o->hold_max_ms);
            break;
        case 'R':
            ok = parse_ms(optarg, &o->rest_ms);
            break;
        case 'P':
            o->prefix = optarg;
            ok = strlen(optarg) > 0 && strlen(optarg) < 32;
            break;
        case 'F':
            o->fork_child = true;
            break;
        case 'I':
            o->ignore_term = true;
            break;
        case 'n':
            o->units_path = optarg;
            break;
        case 'd':
            o->fence_dir = optarg;
            break;
        case 'f':
            ok = parse_ms(optarg, &o->for_ms);
            break;
        case 'N':
            o->fence = false;
            break;
        default:
            ok = false;
            break;
        }
        if (!ok)
            return false;
    }
    return optind == argc && o->units_path != NULL && o->fence_dir != NULL &&
           o->for_ms >= 0 &&
           (!keeping || (o->url != NULL && o->nsessions > 0));
}

int main(int argc, char **argv)
{
    bool keeping = argc >= 2 && strcmp(argv[1], "keep") == 0;
    struct options o = {.retry_ms = 20, .timeout_ms = 1000,
                        .hold_min_ms = 500, .hold_max_ms = 3000,
                        .prefix = "keep", .fence = true, .for_ms = -1};
    if (argc < 2 || (!keeping && strcmp(argv[1], "work") != 0) ||
        !parse_options(argc, argv, keeping, &o)) {
        usage();
        return EXIT_USAGE;
    }
    units_fd = open(o.units_path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC,
                    0644);
    if (units_fd < 0) {
        fprintf(stderr, "holder: %s: %s\n", o.units_path, strerror(errno));
        return EXIT_ERROR;
    }
    seed = (unsigned)getpid() ^ (unsigned)nanotime_mono();
    int code = keeping ? keep(&o) : work(&o);
    close(units_fd);
    return code;
}
