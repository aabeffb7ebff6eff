/* The real leased from C tests (see daemon_proc.h). */
#include "daemon_proc.h"

#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* What the sanitizers print when they find a bug (tests/run.sh builds
 * leased with ASan+UBSan and with TSan). */
static const char *const report_marks[] = {
    "WARNING: ThreadSanitizer", "ThreadSanitizer: CHECK failed",
    "ERROR: AddressSanitizer", "ERROR: LeakSanitizer", ": runtime error: "};

/* A daemon stopped by daemon_stop() had a report in its log. */
static bool reported;

static bool has_mark(const char *line)
{
    for (size_t i = 0; i < sizeof(report_marks) / sizeof(report_marks[0]);
         i++)
        if (strstr(line, report_marks[i]) != NULL)
            return true;
    return false;
}

/* Prints the first sanitizer report in the log (to its SUMMARY line, at
 * most 80 lines) to stderr; returns whether there was one. */
static bool print_report(const char *log)
{
    FILE *f = fopen(log, "r");
    if (f == NULL)
        return false;
    char line[1024];
    int shown = 0;
    while (fgets(line, sizeof(line), f) != NULL) {
        if (shown == 0 && !has_mark(line))
            continue;
        if (shown == 0)
            fprintf(stderr, "leased printed a sanitizer report (%s):\n", log);
        fputs(line, stderr);
        if (++shown == 80 || strncmp(line, "SUMMARY:", 8) == 0)
            break;
    }
    fclose(f);
    return shown > 0;
}

/* At exit: a report in any daemon this process stopped fails it, also
 * where the test did not look at daemon_stop()'s result (after a kill -9,
 * say). */
static void fail_if_reported(void)
{
    if (!reported)
        return;
    fprintf(stderr, "a leased this test stopped printed a sanitizer report "
                    "(above): the test fails\n");
    fflush(NULL);
    _exit(1);
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

static int find_addr(struct daemon_proc *d)
{
    FILE *f = fopen(d->log, "r");
    if (f == NULL)
        return -1;
    char line[1024];
    int found = -1;
    while (found != 0 && fgets(line, sizeof(line), f) != NULL) {
        const char *p = strstr(line, "msg=listening addr=");
        if (p != NULL &&
            sscanf(p, "msg=listening addr=%127s", d->addr) == 1)
            found = 0;
    }
    fclose(f);
    return found;
}

int daemon_start(struct daemon_proc *d, const char *ttl, ...)
{
    const char *bin = getenv("LEASED_BIN");
    if (bin == NULL) {
        fprintf(stderr, "LEASED_BIN is not set\n");
        return -1;
    }
    static bool registered;
    if (!registered)
        registered = atexit(fail_if_reported) == 0;
    memset(d, 0, sizeof(*d));
    snprintf(d->dir, sizeof(d->dir), "/tmp/leased-ctest-XXXXXX");
    if (mkdtemp(d->dir) == NULL)
        return -1;
    snprintf(d->log, sizeof(d->log), "%s/leased.log", d->dir);
    char data[96];
    snprintf(data, sizeof(data), "%s/data", d->dir);
    const char *argv[32] = {bin, "--listen", "127.0.0.1:0", "--data-dir",
                            data, "--ttl", ttl};
    int argc = 7;
    const char *postgres = getenv("LEASED_TEST_POSTGRES");
    if (postgres != NULL) {
        argv[argc++] = "--postgres";
        argv[argc++] = postgres;
    }
    va_list ap;
    va_start(ap, ttl);
    const char *a;
    while ((a = va_arg(ap, const char *)) != NULL && argc < 31)
        argv[argc++] = a;
    va_end(ap);
    argv[argc] = NULL;

    d->pid = fork();
    if (d->pid < 0)
        return -1;
    if (d->pid == 0) {
        int fd = open(d->log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        dup2(fd, 2);
        dup2(fd, 1);
        execv(bin, (char *const *)argv);
        _exit(127);
    }
    for (int i = 0; i < 1000; i++) { /* 10 s */
        if (find_addr(d) == 0)
            return 0;
        int status;
        if (waitpid(d->pid, &status, WNOHANG) == d->pid) {
            fprintf(stderr, "leased exited before listening (see %s)\n",
                    d->log);
            d->pid = 0;
            return -1;
        }
        sleep_ms(10);
    }
    fprintf(stderr, "leased did not listen within 10 s\n");
    return -1;
}

int daemon_stop(struct daemon_proc *d)
{
    int rc = -1;
    if (d->pid > 0) {
        kill(d->pid, SIGTERM);
        for (int i = 0; i < 2000; i++) {
            int status;
            if (waitpid(d->pid, &status, WNOHANG) == d->pid) {
                rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
                break;
            }
            sleep_ms(10);
        }
        if (rc == -1) {
            kill(d->pid, SIGKILL);
            waitpid(d->pid, NULL, 0);
        }
        d->pid = 0;
    }
    if (rc != 0) { /* keep the log on failure */
        FILE *f = fopen(d->log, "r");
        char line[1024];
        while (f != NULL && fgets(line, sizeof(line), f) != NULL)
            fputs(line, stderr);
        if (f != NULL)
            fclose(f);
    }
    /* Again at the end, where the tail of the output shows it. */
    if (print_report(d->log)) {
        reported = true;
        if (rc == 0)
            rc = -1;
    }
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", d->dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", d->dir);
    return rc;
}
