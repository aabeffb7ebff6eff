/*
 * The fence (client/fence.c): the first writer, lower, equal and higher
 * tokens, files that are not fences, bad arguments, processes racing with
 * random tokens over one resource, a writer killed inside, and the same
 * file shared with the shell recipe (client/examples/fenced-write.sh,
 * whose path is in $FENCED_WRITE_SH).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "lease.h"

static char dir[64];

static void setup(void)
{
    snprintf(dir, sizeof(dir), "/tmp/leased-fence-XXXXXX");
    CHECK(mkdtemp(dir) != NULL);
}

static void teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
}

/* dir/name, in a buffer of the caller's. */
static char *in_dir(char *buf, size_t len, const char *name)
{
    snprintf(buf, len, "%s/%s", dir, name);
    return buf;
}

static void write_file(const char *path, const char *bytes, size_t n)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0666);
    CHECK(fd >= 0);
    CHECK(write(fd, bytes, n) == (ssize_t)n);
    close(fd);
}

/* Up to cap bytes of path; -1 if it cannot be read. */
static ssize_t read_file(const char *path, char *buf, size_t cap)
{
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, cap);
    close(fd);
    return n;
}

/* Whether path holds exactly these n bytes. */
static bool holds(const char *path, const char *bytes, size_t n)
{
    char buf[256];
    ssize_t got = read_file(path, buf, sizeof(buf));
    return got == (ssize_t)n && memcmp(buf, bytes, n) == 0;
}

static bool holds_token(const char *path, uint64_t token)
{
    char line[32];
    snprintf(line, sizeof(line), "%020" PRIu64 "\n", token);
    return holds(path, line, 21);
}

/* Whether another open file could take path's lock now: false while a
 * writer is inside. */
static bool lock_is_free(const char *path)
{
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return false;
    bool free_now = flock(fd, LOCK_EX | LOCK_NB) == 0;
    close(fd);
    return free_now;
}

/* Enters and leaves at once (so that a wrong admission blocks no later
 * step): what lease_fence_enter returned. */
static int try_enter(const char *path, uint64_t token)
{
    struct lease_fence *f = NULL;
    int err = lease_fence_enter(path, token, &f);
    lease_fence_leave(f);
    return err;
}

static int open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    int n = 0;
    while (d != NULL && readdir(d) != NULL)
        n++;
    if (d != NULL)
        closedir(d);
    return n;
}

TEST(the_first_writer_is_admitted_and_recorded)
{
    setup();
    char p[128];
    in_dir(p, sizeof(p), "fence");
    mode_t old = umask(027);
    struct lease_fence *f = NULL;
    CHECK_EQ_I64(lease_fence_enter(p, 3, &f), LEASE_OK);
    umask(old);
    CHECK(f != NULL);
    /* Recorded before the writer is let in, and locked while inside. */
    CHECK(holds(p, "00000000000000000003\n", 21));
    CHECK(!lock_is_free(p));
    struct stat st;
    CHECK(stat(p, &st) == 0 && (st.st_mode & 0777) == 0640);
    lease_fence_leave(f);
    CHECK(lock_is_free(p));
    CHECK(holds_token(p, 3));
    teardown();
}

TEST(a_lower_token_is_refused_and_the_file_left_unchanged)
{
    setup();
    char p[128];
    in_dir(p, sizeof(p), "fence");
    struct lease_fence *f;
    CHECK_EQ_I64(lease_fence_enter(p, 9, &f), LEASE_OK);
    lease_fence_leave(f);
    int fds = open_fds();
    f = (struct lease_fence *)&fds; /* not left as it was */
    int err = lease_fence_enter(p, 8, &f);
    CHECK_EQ_I64(err, LEASE_EHELD);
    CHECK(f == NULL);
    CHECK(strstr(lease_errmsg(), "token 8 ") != NULL);
    CHECK(strstr(lease_errmsg(), "token 9,") != NULL);
    CHECK(holds_token(p, 9));
    /* The lock let go and the file closed. */
    CHECK(lock_is_free(p));
    CHECK_EQ_I64(open_fds(), fds);
    if (err == LEASE_OK) /* wrongly */
        lease_fence_leave(f);
    teardown();
}

TEST(an_equal_token_is_admitted)
{
    setup();
    char p[128];
    in_dir(p, sizeof(p), "fence");
    struct lease_fence *f;
    CHECK_EQ_I64(lease_fence_enter(p, 9, &f), LEASE_OK);
    lease_fence_leave(f);
    f = NULL;
    CHECK_EQ_I64(lease_fence_enter(p, 9, &f), LEASE_OK);
    CHECK(f != NULL && !lock_is_free(p));
    CHECK(holds_token(p, 9));
    lease_fence_leave(f);
    teardown();
}

TEST(a_higher_token_is_recorded_in_place)
{
    setup();
    char p[128];
    in_dir(p, sizeof(p), "fence");
    struct lease_fence *f;
    CHECK_EQ_I64(lease_fence_enter(p, 5, &f), LEASE_OK);
    lease_fence_leave(f);
    struct stat before, after;
    CHECK(stat(p, &before) == 0);
    CHECK_EQ_I64(lease_fence_enter(p, UINT64_C(12345678901234567890), &f),
                 LEASE_OK);
    lease_fence_leave(f);
    CHECK(holds(p, "12345678901234567890\n", 21));
    /* The largest token takes all 20 digits. */
    CHECK_EQ_I64(lease_fence_enter(p, UINT64_MAX, &f), LEASE_OK);
    lease_fence_leave(f);
    CHECK(holds(p, "18446744073709551615\n", 21));
    CHECK_EQ_I64(try_enter(p, UINT64_MAX - 1), LEASE_EHELD);
    CHECK_EQ_I64(try_enter(p, 6), LEASE_EHELD);
    CHECK(holds(p, "18446744073709551615\n", 21));
    /* Rewritten in place: the same file, never replaced. */
    CHECK(stat(p, &after) == 0 && after.st_ino == before.st_ino);
    teardown();
}

TEST(a_file_that_is_not_a_fence_is_refused_and_left_unchanged)
{
    setup();
    static const struct {
        const char *bytes;
        size_t n;
    } bad[] = {
        {"garbage", 7},
        {"42\n", 3},                       /* a short line */
        {"aaaaaaaaaaaaaaaaaaaa\n", 21},    /* 21 bytes, not digits */
        {"00000000000000000005", 20},      /* no newline */
        {"00000000000000000005\r", 21},
        {"000000000000000000005\n", 22},   /* 21 digits */
        {"00000000000000000005\nx", 22},   /* more after the line */
        {"00000000000000000005\n\n", 22},
        {"0000000000000000005\n\n", 21},   /* 19 digits */
        {"-0000000000000000005\n", 21},
        {" 0000000000000000005\n", 21},
        {"0000000000000000000\0\n", 21},
        {"18446744073709551616\n", 21},    /* UINT64_MAX + 1 */
        {"99999999999999999999\n", 21},
        {"\n", 1},
    };
    char p[128];
    in_dir(p, sizeof(p), "fence");
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        write_file(p, bad[i].bytes, bad[i].n);
        struct lease_fence *f = (struct lease_fence *)&f;
        int err = lease_fence_enter(p, 1000, &f);
        if (err != LEASE_EUNAVAILABLE)
            fprintf(stderr, "case %zu: %d\n", i, err);
        CHECK_EQ_I64(err, LEASE_EUNAVAILABLE);
        CHECK(f == NULL);
        CHECK(strstr(lease_errmsg(), "is not a fence file") != NULL);
        CHECK(strstr(lease_errmsg(), p) != NULL);
        CHECK(holds(p, bad[i].bytes, bad[i].n));
        CHECK(lock_is_free(p));
        if (err == LEASE_OK)
            lease_fence_leave(f);
    }
    teardown();
}

TEST(token_0_and_a_null_path_are_invalid)
{
    setup();
    char p[128];
    in_dir(p, sizeof(p), "fence");
    struct lease_fence *f = (struct lease_fence *)&f;
    CHECK_EQ_I64(lease_fence_enter(p, 0, &f), LEASE_EINVAL);
    CHECK(f == NULL);
    CHECK(access(p, F_OK) != 0 && errno == ENOENT); /* not even created */
    f = (struct lease_fence *)&f;
    CHECK_EQ_I64(lease_fence_enter(NULL, 5, &f), LEASE_EINVAL);
    CHECK(f == NULL);
    CHECK_EQ_I64(lease_fence_enter(p, 5, NULL), LEASE_EINVAL);
    CHECK(access(p, F_OK) != 0);
    lease_fence_leave(NULL);
    /* A file that cannot be opened is a failure of the moment. */
    in_dir(p, sizeof(p), "missing/fence");
    CHECK_EQ_I64(try_enter(p, 5), LEASE_EUNAVAILABLE);
    CHECK(strstr(lease_errmsg(), "opening") != NULL);
    teardown();
}

/* One attempt of a racing process, as it reports it. */
struct attempt {
    uint64_t token;
    int err;
    uint64_t seen; /* the fence file's token, inside or after a refusal */
};

enum { PROCS = 8, ROUNDS = 25 };

/* A racing process's token in round r: rising by 16 a round, give or
 * take 16, so that the processes' tokens, and each one's own, go up and
 * down. */
static uint64_t token_of(int r, unsigned *seed)
{
    return (uint64_t)r * 16 + 1 + (uint64_t)(rand_r(seed) % 32);
}

static uint64_t fence_token(const char *path)
{
    char buf[32] = "";
    return read_file(path, buf, 21) == 21 ? strtoull(buf, NULL, 10) : 0;
}

static void racer(int i, const char *fence, const char *log, int out)
{
    unsigned seed = 1000u + (unsigned)i;
    int log_fd = open(log, O_WRONLY | O_APPEND | O_CREAT, 0666);
    for (int r = 0; r < ROUNDS; r++) {
        struct attempt a = {.token = token_of(r, &seed)};
        struct lease_fence *f;
        a.err = lease_fence_enter(fence, a.token, &f);
        if (a.err == LEASE_OK) {
            a.seen = fence_token(fence);
            char line[32];
            int n = snprintf(line, sizeof(line), "%" PRIu64 "\n", a.token);
            if (write(log_fd, line, (size_t)n) != n)
                a.err = 1;
            sched_yield(); /* let the others pile up on the lock */
            lease_fence_leave(f);
        } else if (a.err == LEASE_EHELD) {
            a.seen = fence_token(fence);
        }
        if (write(out, &a, sizeof(a)) != (ssize_t)sizeof(a))
            _exit(2);
    }
    _exit(0);
}

static int compare_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

TEST(processes_racing_with_random_tokens)
{
    setup();
    char fence[128], log[128];
    in_dir(fence, sizeof(fence), "fence");
    in_dir(log, sizeof(log), "resource.log");
    int fds[2];
    CHECK(pipe(fds) == 0);
    for (int i = 0; i < PROCS; i++)
        if (fork() == 0) {
            close(fds[0]);
            racer(i, fence, log, fds[1]);
        }
    close(fds[1]);
    static struct attempt all[PROCS * ROUNDS];
    static uint64_t admitted[PROCS * ROUNDS], logged[PROCS * ROUNDS + 1];
    size_t n = 0, nadmitted = 0, refused = 0, wrong = 0;
    uint64_t max = 0;
    while (n < PROCS * ROUNDS &&
           read(fds[0], &all[n], sizeof(all[n])) == sizeof(all[n])) {
        struct attempt *a = &all[n++];
        max = a->token > max ? a->token : max;
        if (a->err == LEASE_OK) {
            wrong += a->seen != a->token; /* recorded before it wrote */
            admitted[nadmitted++] = a->token;
        } else if (a->err == LEASE_EHELD) {
            wrong += a->seen <= a->token; /* a newer token had written */
            refused++;
        } else {
            wrong++;
        }
    }
    close(fds[0]);
    CHECK_EQ_I64(wrong, 0);
    int status, clean = 0;
    while (wait(&status) > 0)
        clean += WIFEXITED(status) && WEXITSTATUS(status) == 0;
    CHECK_EQ_I64(clean, PROCS);
    CHECK_EQ_I64(n, PROCS * ROUNDS);
    /* The resource saw exactly the admitted writes, in rising order. */
    char text[PROCS * ROUNDS * 8];
    ssize_t len = read_file(log, text, sizeof(text) - 1);
    CHECK(len > 0);
    text[len > 0 ? len : 0] = '\0';
    size_t nlogged = 0, downs = 0, bad_lines = 0;
    for (char *s = text, *end; *s != '\0' && nlogged <= n; s = end + 1) {
        logged[nlogged] = strtoull(s, &end, 10);
        bad_lines += *end != '\n';
        downs += nlogged > 0 && logged[nlogged] < logged[nlogged - 1];
        nlogged++;
    }
    CHECK_EQ_I64(bad_lines, 0);
    CHECK_EQ_I64(downs, 0);
    CHECK_EQ_I64(nlogged, nadmitted);
    qsort(admitted, nadmitted, sizeof(admitted[0]), compare_u64);
    size_t differ = 0;
    for (size_t i = 0; i < nlogged && i < nadmitted; i++)
        differ += logged[i] != admitted[i];
    CHECK_EQ_I64(differ, 0); /* the log is the admitted tokens, sorted */
    /* The highest token is never refused, and it is what stays. */
    CHECK(nadmitted > 0 && admitted[nadmitted - 1] == max);
    CHECK(holds_token(fence, max));
    /* A token lower than one its own process already tried is refused
     * whatever the order, since that one went through or met a higher
     * one: so many refusals are certain (the seeds are fixed). */
    size_t certain = 0;
    for (int i = 0; i < PROCS; i++) {
        unsigned seed = 1000u + (unsigned)i;
        uint64_t highest = 0;
        for (int r = 0; r < ROUNDS; r++) {
            uint64_t t = token_of(r, &seed);
            certain += t < highest;
            highest = t > highest ? t : highest;
        }
    }
    CHECK(certain > 0);
    CHECK(refused >= certain);
    teardown();
}

TEST(a_writer_killed_inside_lets_the_next_one_in)
{
    setup();
    char p[128];
    in_dir(p, sizeof(p), "fence");
    int fds[2];
    CHECK(pipe(fds) == 0);
    pid_t pid = fork();
    if (pid == 0) {
        struct lease_fence *f;
        char r = lease_fence_enter(p, 7, &f) == LEASE_OK ? 'Y' : 'N';
        if (write(fds[1], &r, 1) != 1)
            _exit(2);
        pause(); /* inside until killed */
        _exit(0);
    }
    char r = 0;
    CHECK(read(fds[0], &r, 1) == 1 && r == 'Y');
    CHECK(!lock_is_free(p)); /* it is inside */
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    CHECK(lock_is_free(p)); /* the kernel let go of its lock */
    struct lease_fence *f;
    CHECK_EQ_I64(try_enter(p, 6), LEASE_EHELD);
    CHECK_EQ_I64(lease_fence_enter(p, 7, &f), LEASE_OK);
    lease_fence_leave(f);
    CHECK(holds_token(p, 7));
    close(fds[0]);
    close(fds[1]);
    teardown();
}

/* Runs the shell recipe: /bin/sh fenced-write.sh fence sh -c cmd, with
 * LEASE_TOKEN=token and stderr into dir/stderr; returns its exit
 * status, or -1. */
static int recipe(const char *fence, uint64_t token, const char *cmd)
{
    const char *script = getenv("FENCED_WRITE_SH");
    CHECK(script != NULL);
    if (script == NULL)
        return -1;
    char err[128];
    in_dir(err, sizeof(err), "stderr");
    pid_t pid = fork();
    if (pid == 0) {
        char value[32];
        snprintf(value, sizeof(value), "%" PRIu64, token);
        int fd = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0666);
        if (fd < 0 || dup2(fd, 2) < 0 || setenv("LEASE_TOKEN", value, 1))
            _exit(126);
        execl("/bin/sh", "sh", script, fence, "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    int status;
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status))
        return -1;
    return WEXITSTATUS(status);
}

static bool stderr_says(const char *what)
{
    char buf[512], err[128];
    ssize_t n = read_file(in_dir(err, sizeof(err), "stderr"), buf,
                          sizeof(buf) - 1);
    buf[n > 0 ? n : 0] = '\0';
    if (strstr(buf, what) == NULL) {
        fprintf(stderr, "the recipe said \"%s\", not \"%s\"\n", buf, what);
        return false;
    }
    return true;
}

TEST(the_shell_recipe_shares_the_fence)
{
    setup();
    char p[128], log[128], cmd[512];
    in_dir(p, sizeof(p), "fence");
    in_dir(log, sizeof(log), "resource.log");
    /* The command runs inside: the lock is taken (flock -n fails). */
    snprintf(cmd, sizeof(cmd),
             "flock -n '%s' true && exit 9; echo \"sh $LEASE_TOKEN\" >> '%s'",
             p, log);
    CHECK_EQ_I64(recipe(p, 5, cmd), 0);
    CHECK(holds_token(p, 5));
    struct lease_fence *f;
    CHECK_EQ_I64(try_enter(p, 4), LEASE_EHELD);
    CHECK(strstr(lease_errmsg(), "token 5,") != NULL);
    CHECK_EQ_I64(lease_fence_enter(p, 7, &f), LEASE_OK);
    lease_fence_leave(f);
    CHECK(holds_token(p, 7));
    CHECK_EQ_I64(recipe(p, 6, cmd), 3); /* stale: leasectl's "held" */
    CHECK(stderr_says("token 6 is older than token 7, which has written"));
    CHECK(holds_token(p, 7));
    CHECK_EQ_I64(recipe(p, 7, cmd), 0);
    CHECK_EQ_I64(recipe(p, 12, cmd), 0);
    CHECK(holds_token(p, 12));
    CHECK_EQ_I64(try_enter(p, 11), LEASE_EHELD);
    /* Only the admitted commands ran. */
    CHECK(holds(log, "sh 5\nsh 7\nsh 12\n", 16));
    /* CMD's own status comes back. */
    CHECK_EQ_I64(recipe(p, 12, "exit 42"), 42);
    /* Both refuse what is not a fence file, and leave it. */
    write_file(p, "0000000000000000007\n", 20);
    CHECK_EQ_I64(recipe(p, 12, cmd), 4);
    CHECK(stderr_says("is not a fence file"));
    CHECK_EQ_I64(try_enter(p, 12), LEASE_EUNAVAILABLE);
    CHECK(holds(p, "0000000000000000007\n", 20));
    /* An empty file is 0 to both. */
    write_file(p, "", 0);
    CHECK_EQ_I64(recipe(p, 1, cmd), 0);
    CHECK(holds_token(p, 1));
    write_file(p, "", 0);
    CHECK_EQ_I64(lease_fence_enter(p, 1, &f), LEASE_OK);
    lease_fence_leave(f);
    CHECK(holds_token(p, 1));
    /* Bad tokens and usage. */
    CHECK_EQ_I64(recipe(p, 0, cmd), 5);
    CHECK(stderr_says("LEASE_TOKEN is not a token"));
    CHECK(holds_token(p, 1));
    teardown();
}

CHECK_MAIN(the_first_writer_is_admitted_and_recorded,
           a_lower_token_is_refused_and_the_file_left_unchanged,
           an_equal_token_is_admitted, a_higher_token_is_recorded_in_place,
           a_file_that_is_not_a_fence_is_refused_and_left_unchanged,
           token_0_and_a_null_path_are_invalid,
           processes_racing_with_random_tokens,
           a_writer_killed_inside_lets_the_next_one_in,
           the_shell_recipe_shares_the_fence)
