/* The data directory and its lock file (see datadir.h). */
#include "datadir.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

static int mkdirs(char *path)
{
    for (char *p = path + 1; *p != '\0'; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        int rc = mkdir(path, 0700);
        *p = '/';
        if (rc != 0 && errno != EEXIST)
            return -1;
    }
    return mkdir(path, 0700) == 0 || errno == EEXIST ? 0 : -1;
}

int datadir_lock(const char *dir, char *errmsg, size_t len)
{
    char path[PATH_MAX];
    if (snprintf(path, sizeof(path), "%s", dir) >= (int)sizeof(path)) {
        snprintf(errmsg, len, "data directory path too long");
        return -1;
    }
    if (mkdirs(path) != 0) {
        snprintf(errmsg, len, "cannot create data directory %s: %s", dir,
                 strerror(errno));
        return -1;
    }
    if (snprintf(path, sizeof(path), "%s/leased.lock", dir) >=
        (int)sizeof(path)) {
        snprintf(errmsg, len, "data directory path too long");
        return -1;
    }
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) {
        snprintf(errmsg, len, "cannot open %s: %s", path, strerror(errno));
        return -1;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int err = errno;
        char pid[32] = "";
        ssize_t n = pread(fd, pid, sizeof(pid) - 1, 0);
        pid[n > 0 ? n : 0] = '\0';
        pid[strcspn(pid, "\n")] = '\0';
        if (err == EWOULDBLOCK)
            snprintf(errmsg, len,
                     "data directory %s is in use by another leased (pid %s)",
                     dir, pid[0] != '\0' ? pid : "unknown");
        else
            snprintf(errmsg, len, "cannot lock %s: %s", path, strerror(err));
        close(fd);
        return -1;
    }
    char pid[32];
    int n = snprintf(pid, sizeof(pid), "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)n, 0) != n) {
        /* The pid is only a courtesy for the message above. */
    }
    return fd;
}
