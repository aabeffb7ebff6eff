/*
 * CMD's process group (see group.h).
 *
 * Both children are made with fork from a process that runs other
 * threads (liblease's keeper, gRPC's), so between fork and exec (CMD) or
 * _exit (the guardian) they call async-signal-safe functions only; what
 * needs memory (finding CMD in PATH, its environment) is done before.
 *
 * FAULT_BROKEN("hold_direct_child") is a negative control of the holders'
 * fault campaign (tests/faults/holders), compiled into its test build
 * only: signals go to CMD alone, and hold waits for CMD alone.
 */
#include "group.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include "faultpoint.h"

/* name as execvp would find it, into buf (len bytes). Returns 0 or an
 * errno: ENOENT, or EACCES when only files that may not be executed
 * have that name. A name with a slash is taken as it is (execve then
 * says what is wrong with it). */
static int find_command(const char *name, char *buf, size_t len)
{
    if (strchr(name, '/') != NULL) {
        snprintf(buf, len, "%s", name);
        return 0;
    }
    const char *path = getenv("PATH");
    if (path == NULL)
        path = "/bin:/usr/bin"; /* glibc's default */
    int err = ENOENT;
    for (const char *p = path;; p++) {
        size_t n = strcspn(p, ":");
        int w = n == 0 ? snprintf(buf, len, "%s", name) /* "": here */
                       : snprintf(buf, len, "%.*s/%s", (int)n, p, name);
        struct stat st;
        if (w > 0 && (size_t)w < len && stat(buf, &st) == 0 &&
            S_ISREG(st.st_mode)) {
            if (access(buf, X_OK) == 0)
                return 0;
            err = EACCES;
        }
        p += n;
        if (*p == '\0')
            return err;
    }
}

/* Gives the terminal tty to the process group pgrp, from the foreground
 * or not (SIGTTOU blocked meanwhile). Async-signal-safe. */
static void give_tty(int tty, pid_t pgrp)
{
    sigset_t ttou, old;
    sigemptyset(&ttou);
    sigaddset(&ttou, SIGTTOU);
    sigprocmask(SIG_BLOCK, &ttou, &old);
    tcsetpgrp(tty, pgrp);
    sigprocmask(SIG_SETMASK, &old, NULL);
}

/* In the child: becomes CMD, given the terminal tty if not -1, once a
 * byte on go_fd says the guardian stands. Says why it could not on
 * err_fd. */
static void become_cmd(int tty, pid_t parent, const char *path, char **argv,
                       char **env, const sigset_t *mask, const int *defaults,
                       size_t ndefaults, int go_fd, int err_fd)
{
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
        _exit(127); /* leasectl died before that */
    char go;
    ssize_t got;
    while ((got = read(go_fd, &go, 1)) < 0 && errno == EINTR)
        ;
    if (got != 1)
        _exit(127); /* no guardian: leasectl died, or gave up */
    if (tty >= 0)
        give_tty(tty, getpid()); /* before it may read: no SIGTTIN */
    struct sigaction dfl;
    memset(&dfl, 0, sizeof(dfl));
    dfl.sa_handler = SIG_DFL;
    for (size_t i = 0; i < ndefaults; i++)
        sigaction(defaults[i], &dfl, NULL);
    sigprocmask(SIG_SETMASK, mask, NULL);
    execve(path, argv, env);
    int err = errno;
    ssize_t n = write(err_fd, &err, sizeof(err));
    (void)n;
    _exit(127);
}

/* In the child: the guardian of group pgid. Waits for a byte on fd (stand
 * down) or its end (leasectl is gone: kill the group). */
static void guard(int fd, pid_t pgid)
{
    dup2(fd, 0);
    close_range(1, ~0U, 0);
    setpgid(0, 0); /* out of reach of signals to leasectl's job */
    struct sigaction ign;
    memset(&ign, 0, sizeof(ign));
    ign.sa_handler = SIG_IGN;
    static const int quiet[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT,
                                SIGTSTP, SIGTTIN, SIGTTOU};
    for (size_t i = 0; i < sizeof(quiet) / sizeof(quiet[0]); i++)
        sigaction(quiet[i], &ign, NULL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    for (;;) {
        char byte;
        ssize_t n = read(0, &byte, 1);
        if (n == 1)
            _exit(0);
        if (n == 0) {
            kill(-pgid, SIGKILL);
            _exit(0);
        }
        if (errno != EINTR)
            _exit(1);
    }
}

/* Starts the guardian of g's group. Returns 0 or an errno. */
static int start_guardian(struct group *g)
{
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0)
        return errno;
    pid_t pid = fork();
    if (pid == 0)
        guard(fds[0], g->leader);
    int err = errno;
    close(fds[0]);
    if (pid < 0) {
        close(fds[1]);
        return err;
    }
    g->guardian = pid;
    g->guardian_fd = fds[1];
    return 0;
}

int group_start(struct group *g, char **argv, char **env,
                const sigset_t *mask, const int *defaults, size_t ndefaults)
{
    memset(g, 0, sizeof(*g));
    g->guardian = -1;
    g->guardian_fd = -1;
    g->tty = isatty(0) ? 0 : -1;
    bool foreground = g->tty >= 0 && tcgetpgrp(g->tty) == getpgrp();
    char path[PATH_MAX];
    int err = find_command(argv[0], path, sizeof(path));
    if (err != 0)
        return err;
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    /* go: CMD waits on it until the guardian stands, so that whatever
     * CMD starts is in a group that dies with leasectl. fds: CMD's exec
     * error, or its end at exec. */
    int go[2], fds[2];
    if (pipe2(go, O_CLOEXEC) != 0)
        return errno;
    if (pipe2(fds, O_CLOEXEC) != 0) {
        err = errno;
        close(go[0]);
        close(go[1]);
        return err;
    }
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0)
        become_cmd(foreground ? g->tty : -1, parent, path, argv, env, mask,
                   defaults, ndefaults, go[0], fds[1]);
    err = pid < 0 ? errno : 0;
    close(go[0]);
    close(fds[1]);
    if (pid > 0) {
        setpgid(pid, pid); /* as the child does: whoever comes first */
        g->leader = pid;
        err = start_guardian(g);
        if (err == 0 && write(go[1], "", 1) != 1)
            err = errno;
    }
    close(go[1]); /* without the byte, the child ends: CMD never runs */
    if (pid > 0) {
        if (err == 0) {
            int exec_err;
            ssize_t n;
            while ((n = read(fds[0], &exec_err, sizeof(exec_err))) < 0 &&
                   errno == EINTR)
                ;
            if (n == sizeof(exec_err))
                err = exec_err; /* else the pipe closed at exec: CMD runs */
        }
        if (err != 0) {
            kill(-pid, SIGKILL);
            while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
                ;
            g->leader = 0;
        }
    }
    close(fds[0]);
    if (err == 0 && foreground)
        give_tty(g->tty, g->leader);
    return err;
}

void group_signal(struct group *g, int sig)
{
    if (FAULT_BROKEN("hold_direct_child")) {
        if (!g->done)
            kill(g->leader, sig); /* a control: CMD alone */
        return;
    }
    kill(-g->leader, sig);
}

/* CMD stopped with sig: a stop from the terminal (^Z, or reading or
 * writing it from the background) stops leasectl too, the terminal
 * back in its hands if CMD had it, so that the shell sees the job
 * stopped. */
static void stopped(struct group *g, int sig)
{
    if (g->tty < 0 || (sig != SIGTSTP && sig != SIGTTIN && sig != SIGTTOU))
        return;
    if (tcgetpgrp(g->tty) == g->leader)
        give_tty(g->tty, getpgrp());
    kill(getpid(), sig); /* returns once the shell continues leasectl */
    g->stopped = true;
}

void group_reap(struct group *g)
{
    for (;;) {
        int status;
        pid_t pid = waitpid(-1, &status, WNOHANG | WUNTRACED);
        if (pid < 0 && errno == EINTR)
            continue;
        if (pid <= 0)
            return;
        if (pid == g->leader && WIFSTOPPED(status)) {
            stopped(g, WSTOPSIG(status));
        } else if (pid == g->leader) {
            g->done = true;
            g->status = status;
        } else if (pid == g->guardian && !WIFSTOPPED(status)) {
            g->guardian = -1;
        }
    }
}

void group_resume(struct group *g)
{
    g->stopped = false;
    if (g->tty >= 0 && tcgetpgrp(g->tty) == getpgrp())
        give_tty(g->tty, g->leader);
    group_signal(g, SIGCONT);
}

bool group_empty(const struct group *g)
{
    if (FAULT_BROKEN("hold_direct_child"))
        return g->done;
    return kill(-g->leader, 0) != 0 && errno == ESRCH;
}

void group_end(struct group *g)
{
    if (g->guardian_fd >= 0) {
        ssize_t n = write(g->guardian_fd, "", 1);
        (void)n;
        close(g->guardian_fd);
        g->guardian_fd = -1;
    }
    if (g->guardian > 0)
        while (waitpid(g->guardian, NULL, 0) < 0 && errno == EINTR)
            ;
    g->guardian = -1;
    if (g->tty >= 0 && tcgetpgrp(g->tty) == g->leader)
        give_tty(g->tty, getpgrp());
    g->tty = -1;
}
